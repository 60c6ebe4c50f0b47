/* Tests of the staleness rule (ext/runtime/staleness.c, max_staleness_ms=):
 * when a node is stale (no leader known, none heard for longer than the bound,
 * catching up after its start, removed from the cluster), the lag it
 * reports, and the published
 * state with its notice file for other processes (worded with the time
 * of the last contact) and the bound marker, whose mtime the ticks
 * refresh (the heartbeat). */

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/attach_sock.h"
#include "ext/runtime/node_log.h"
#include "ext/runtime/staleness.h"

/* view builds what the loop thread sees at one tick. */
static struct ext_staleness_view view(bool leading, uint64_t contact_ms,
                                      raft_index leader_commit,
                                      raft_index applied)
{
    return (struct ext_staleness_view){.leading = leading,
                                       .contact_ms = contact_ms,
                                       .leader_commit = leader_commit,
                                       .applied = applied,
                                       .commit_current = true};
}

/* judge runs the rule once with bound @max_ms. */
static struct ext_staleness_verdict judge(struct ext_staleness_memory *m,
                                          unsigned max_ms,
                                          struct ext_staleness_view v)
{
    struct ext_staleness_verdict out;
    staleness_judge(m, max_ms, &v, &out);
    return out;
}

/* A follower that hears its leader within the bound and has applied what
 * the leader first told it is fresh; past the bound it is stale, and
 * fresh again as soon as the leader is heard. */
static void test_follower_contact(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 500, view(false, 20, 7, 7));
    assert_false(v.stale);
    assert_true(v.leader_known);
    assert_int_equal(v.lag_ms, 20);
    assert_int_equal(v.lag_entries, 0);
    assert_string_equal(v.reason, "");

    v = judge(&m, 500, view(false, 500, 9, 7));
    assert_false(v.stale); /* the bound itself is still fresh */
    assert_int_equal(v.lag_entries, 2);

    v = judge(&m, 500, view(false, 501, 9, 7));
    assert_true(v.stale);
    assert_int_equal(v.lag_ms, 501);
    assert_string_equal(
        v.reason,
        "stale replica: no round trip with its leader for 501 ms "
        "(max_staleness_ms=500)");

    v = judge(&m, 500, view(false, 10, 9, 9));
    assert_false(v.stale);
}

/* mono_now returns CLOCK_MONOTONIC in ms, as staleness.c reads it. */
static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* view_at is view() at CLOCK_MONOTONIC @mono_ms. */
static struct ext_staleness_view view_at(uint64_t mono_ms, uint64_t contact_ms,
                                         raft_index leader_commit,
                                         raft_index applied)
{
    struct ext_staleness_view v =
        view(false, contact_ms, leader_commit, applied);
    v.mono_ms = mono_ms;
    return v;
}

/* A new leader's commit index may lag entries the leader before it
 * committed until its own NOOP commits (raft_commit_current false): a
 * follower that applied that lagging index is not current (the fault
 * suite's checker saw a follower read a value replaced 0.67 s before,
 * bound 0.5 s, across such a change: seed 450868; the simulation's
 * staleness check reproduces it, tests/sim/sim_staleness.h). Stale
 * while no entry of the term is committed here, and a commit index
 * heard meanwhile does not renew the applied state's time. */
static void test_new_leader_commit(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    struct ext_staleness_view w;
    (void)state;

    assert_false(judge(&m, 500, view_at(10000, 10, 7, 7)).stale);
    /* A new leader, its NOOP not committed: it tells 7, while the old
     * leader had committed 8, which this node never received. */
    w = view_at(10300, 10, 7, 7);
    w.commit_current = false;
    v = judge(&m, 500, w);
    assert_true(v.stale);
    assert_string_equal(v.reason,
                        "stale replica: no entry of the leader's term "
                        "committed here yet (commit index 7 heard; a new "
                        "leader's may lag an earlier leader's; "
                        "max_staleness_ms=500)");
    assert_non_null(strstr(v.notice, "no entry of the leader's term"));
    /* Still not current 400 ms later: the old state's time is not
     * renewed, so it is past the bound once current again unless what
     * the leader then tells was applied. */
    w.mono_ms = 10400;
    assert_true(judge(&m, 500, w).stale);
    v = judge(&m, 500, view_at(10600, 10, 9, 7));
    assert_true(v.stale);
    assert_non_null(strstr(v.reason, "its applied state is 610 ms old"));
    assert_false(judge(&m, 500, view_at(10620, 10, 9, 9)).stale);
}

/* A node catching up that hears more than 16 commit indexes before it
 * reaches its target keeps the target's time: caught up, its applied
 * state is as old as when the target was heard, so stale past the
 * bound. Before, the ring dropped its oldest (the target): caught up with
 * its state's time unknown, the node called itself fresh (the
 * simulation's seed 31014, 5 nodes). */
static void test_catch_up_ring_full(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 500, view_at(10000, 5, 10, 5));
    assert_true(v.stale); /* catching up to 10 */
    for (unsigned i = 1; i <= 20; i++) {
        assert_true(
            judge(&m, 500, view_at(10000 + i * 50, 5, 10 + i, 5)).stale);
    }
    /* Applied the target, 1.2 s after it was heard. */
    v = judge(&m, 500, view_at(11200, 5, 30, 10));
    assert_true(v.stale);
    assert_non_null(strstr(v.reason, "its applied state is 1205 ms old"));
    /* Applied all it heard: fresh. */
    assert_false(judge(&m, 500, view_at(11210, 5, 30, 30)).stale);
}

/* A node that hears its leader but has not applied what the leader had
 * committed as of longer than the bound ago is stale: after SIGSTOP and
 * SIGCONT it hears the leader before it applies what it missed, and a
 * follower whose log disk is full hears its leader and applies nothing
 * (both found by the fault suite's bounded-staleness checker, which saw
 * such a node serve reads seconds old). Fresh again once it applied. */
static void test_applied_state_age(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    assert_false(judge(&m, 500, view_at(10000, 10, 7, 7)).stale);
    assert_false(judge(&m, 500, view_at(10100, 10, 9, 8)).stale);
    assert_false(judge(&m, 500, view_at(10200, 10, 12, 9)).stale);
    /* Paused 3 s; the leader heard again at once, 40 entries on. */
    v = judge(&m, 500, view_at(13200, 5, 52, 12));
    assert_true(v.stale);
    assert_string_equal(v.reason,
                        "stale replica: its applied state is 3010 ms old "
                        "(applied 12 of the leader's commit index 52; "
                        "max_staleness_ms=500)");
    assert_non_null(strstr(v.notice, "its applied state is the leader's of"));
    /* Applied up to what it heard: fresh. */
    assert_false(judge(&m, 500, view_at(13250, 10, 52, 52)).stale);

    /* A full log disk: the leader heard, its commit index moving on,
     * nothing applied here; stale once the bound passed since the
     * commit index it applied was heard. */
    assert_false(judge(&m, 500, view_at(13300, 10, 60, 52)).stale);
    assert_false(judge(&m, 500, view_at(13700, 10, 70, 52)).stale);
    v = judge(&m, 500, view_at(13800, 10, 80, 52));
    assert_true(v.stale);
    assert_non_null(strstr(v.reason, "its applied state is 560 ms old"));
    /* It applies again, up to an index heard 100 ms ago: fresh. */
    assert_false(judge(&m, 500, view_at(13900, 10, 90, 80)).stale);
}

/* Without a leader, a node is stale at once; lag_ms is then not known. */
static void test_no_leader(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 500, view(false, UINT64_MAX, 0, 0));
    assert_true(v.stale);
    assert_false(v.leader_known);
    assert_int_equal(v.lag_ms, 0);
    assert_string_equal(v.reason,
                        "stale replica: no leader known "
                        "(max_staleness_ms=500)");
    assert_false(m.contacted);
}

/* A leader known with no round trip completed yet (wire version 7: its
 * first AppendEntries echoes no answer of ours) is stale, and the reason
 * says so rather than "no leader known"; so is a leader that knows no
 * quorum to follow it. */
static void test_no_round_trip(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_view in = view(false, UINT64_MAX, 0, 0);
    struct ext_staleness_verdict v;
    (void)state;

    in.leader_seen = true;
    v = judge(&m, 500, in);
    assert_true(v.stale);
    assert_false(v.leader_known);
    assert_string_equal(v.reason,
                        "stale replica: no round trip with its leader "
                        "completed yet (max_staleness_ms=500)");
    in.leading = true;
    v = judge(&m, 500, in);
    assert_string_equal(v.reason,
                        "stale replica: no quorum known to follow it yet "
                        "(max_staleness_ms=500)");
    assert_false(m.contacted);
}

/* A leader counts its last contact with a quorum: an isolated old leader
 * goes stale too, with a reason naming the quorum. */
static void test_isolated_leader(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 300, view(true, 0, 40, 40));
    assert_false(v.stale);
    assert_int_equal(v.lag_ms, 0);
    v = judge(&m, 300, view(true, 301, 40, 40));
    assert_true(v.stale);
    assert_string_equal(v.reason,
                        "stale replica: no round trip with a quorum for 301 ms "
                        "(max_staleness_ms=300)");
}

/* A follower cut off with its leader in a minority hears it until it
 * steps down while the majority commits: its state is current as of the
 * leader's last quorum contact as the leader tells it (wire version 6),
 * not as of the follower's own receipt. Stale once that is past the
 * bound, however recent the receipt, with a reason naming the leader's
 * quorum; a fresh verdict's fresh_until counts from the leader's quorum
 * contact; the applied state's time is the leader's quorum contact, so
 * an index applied after the leader lost its quorum is as old as that.
 * (The old rule took the receipt's time: the simulation's
 * test_staleness_minority.) */
static void test_leader_without_quorum(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    struct ext_staleness_view w;
    (void)state;

    w = view_at(10000, 10, 7, 7);
    w.leader_quorum_ms = 30;
    v = judge(&m, 300, w);
    assert_false(v.stale);
    assert_int_equal(v.fresh_until, 10000 - 10 - 30 + 300);
    /* The leader lost its quorum at about 9990; it still heartbeats. */
    w = view_at(10250, 10, 7, 7);
    w.leader_quorum_ms = 250;
    assert_false(judge(&m, 300, w).stale);
    w = view_at(10301, 10, 7, 7);
    w.leader_quorum_ms = 301;
    v = judge(&m, 300, w);
    assert_true(v.stale);
    assert_string_equal(v.reason,
                        "stale replica: its leader had heard no quorum for "
                        "301 ms when it last sent, 10 ms ago "
                        "(max_staleness_ms=300)");
    assert_non_null(strstr(v.notice, "its leader has heard no quorum since"));
    /* Its quorum back, the leader tells 9, applied: fresh again. */
    w = view_at(10400, 10, 9, 9);
    w.leader_quorum_ms = 20;
    assert_false(judge(&m, 300, w).stale);
    /* An index told while the leader had heard no quorum for 200 ms is
     * current as of then: the verdict holds until 200 ms earlier. */
    m = (struct ext_staleness_memory){0};
    assert_false(judge(&m, 300, view_at(20000, 10, 10, 10)).stale);
    w = view_at(20100, 10, 11, 10);
    w.leader_quorum_ms = 200;
    v = judge(&m, 300, w);
    assert_false(v.stale);
    assert_int_equal(v.fresh_until, 20100 - 10 - 200 + 300);
    /* Applied, and the leader heard no more: stale at 20191. */
    w = view_at(20191, 101, 11, 11);
    w.leader_quorum_ms = 200;
    assert_true(judge(&m, 300, w).stale);
    /* Cut off alone, its leader's quorum as recent as ever: the
     * silence is named, not the leader's quorum (a new-user trial of
     * issue 26 saw "its leader had heard no quorum for 102 ms"). */
    m = (struct ext_staleness_memory){0};
    w = view_at(30000, 10, 7, 7);
    w.leader_quorum_ms = 40;
    assert_false(judge(&m, 300, w).stale);
    w = view_at(30270, 280, 7, 7);
    w.leader_quorum_ms = 40;
    v = judge(&m, 300, w);
    assert_true(v.stale);
    assert_string_equal(
        v.reason,
        "stale replica: no round trip with its leader for 280 ms, which "
        "its leader's last quorum contact, 40 ms before it "
        "sent, takes past max_staleness_ms=300");
    assert_non_null(strstr(v.notice, "no round trip with its leader since"));
}

/* After its start, a node is stale until it has applied the commit index
 * the leader told it at the first contact, however recent the contact;
 * later lag within the bound does not make it stale again. */
static void test_catch_up_after_start(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 500, view(false, 5, 100, 40));
    assert_true(v.stale);
    assert_int_equal(v.lag_entries, 60);
    assert_string_equal(v.reason,
                        "stale replica: catching up after its start: "
                        "applied 40 of the leader's commit index 100 "
                        "(max_staleness_ms=500)");
    /* The target is the first contact's: a moving commit index does not
     * move it. */
    v = judge(&m, 500, view(false, 5, 130, 99));
    assert_true(v.stale);
    assert_non_null(strstr(v.reason,
                           "applied 99 of the leader's commit "
                           "index 100"));
    v = judge(&m, 500, view(false, 5, 140, 100));
    assert_false(v.stale);
    assert_int_equal(v.lag_entries, 40);
    v = judge(&m, 500, view(false, 5, 900, 100));
    assert_false(v.stale);
    assert_int_equal(v.lag_entries, 800);
}

/* max_staleness_ms=0 (the default) never refuses, but still measures the
 * lag, and remembers the catch-up as it goes. */
static void test_off(void **state)
{
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    v = judge(&m, 0, view(false, UINT64_MAX, 0, 0));
    assert_false(v.stale);
    v = judge(&m, 0, view(false, 99999, 50, 10));
    assert_false(v.stale);
    assert_int_equal(v.lag_ms, 99999);
    assert_int_equal(v.lag_entries, 40);
    assert_string_equal(v.reason, "");
}

/* A node removed from the cluster is stale whatever the bound, 0 (off)
 * included, with the same reason and notice (no number that grows), and
 * a member again once added back. */
static void test_removed(void **state)
{
    static const char why[] =
        "stale replica: removed from the cluster (configuration entry 12 "
        "committed): it receives no more entries; read on a member";
    struct ext_staleness_view r = view(false, 20, 12, 12);
    struct ext_staleness_memory m = {0};
    struct ext_staleness_verdict v;
    (void)state;

    r.removed = true;
    r.removed_at = 12;
    for (unsigned max_ms = 0; max_ms <= 500; max_ms += 500) {
        v = judge(&m, max_ms, r);
        assert_true(v.stale);
        assert_string_equal(v.reason, why);
        assert_string_equal(v.notice, why);
        assert_int_equal(v.lag_ms, 20); /* still measured */
    }
    v = judge(&m, 0, view(false, 20, 14, 14));
    assert_false(v.stale);
    assert_string_equal(v.reason, "");
}

/* assert_file_text checks that file @path holds exactly @text. */
static void assert_file_text(const char *path, const char *text)
{
    char got[512];
    size_t len;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    len = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[len] = '\0';
    assert_string_equal(got, text);
}

/* The published state: stale from the start with a bound (no leader yet),
 * counted by staleness_any, its notice file present exactly while stale,
 * from the start on (written before the bound marker names this process:
 * other processes served the state of before a kill -9 while a restarted
 * node had not ticked yet), and removed at the end and at a start. */
static void test_published(void **state)
{
    struct ext_node_log log;
    struct ext_staleness *s;
    struct ext_staleness_verdict v;
    struct ext_staleness_view w;
    char dir[] = "/tmp/raftsql-stale-XXXXXX", notice[64], bound[64];
    struct stat st;
    (void)state;

    assert_non_null(mkdtemp(dir));
    snprintf(notice, sizeof notice, "%s/db-raftsql-stale", dir);
    snprintf(bound, sizeof bound, "%s/db-raftsql-bound", dir);
    node_log_init(&log, 1, RAFT_LOG_ERROR);
    assert_int_equal(staleness_new(500, notice, bound, &log, &s), 0);
    assert_int_equal(stat(notice, &st), 0); /* before any tick */
    {
        char text[128];
        snprintf(text, sizeof text,
                 "raftsql-bound 1\nmax_staleness_ms=500\npid=%ld\n",
                 (long)getpid());
        assert_file_text(bound, text);
    }
    {
        /* Other processes: the marker names a live process whose pointer
         * file is not out yet (it is starting), so reads are refused
         * though its notice does not count yet; once the pointer is out,
         * the notice refuses them (a restarted node served, in other
         * processes, the state of before its kill -9). */
        char db[64], why[512];
        struct ext_attach_pointer p = {
            .pid = (long)getpid(), .timeout_ms = 1000, .version = 2};
        snprintf(db, sizeof db, "%s/db", dir);
        snprintf(p.socket, sizeof p.socket, "%s/db.sock", dir);
        assert_false(attach_sock_stale(db, why, sizeof why));
        assert_true(attach_sock_unserved(db, why, sizeof why));
        assert_non_null(strstr(why, "is starting"));
        assert_int_equal(attach_sock_pointer_write(db, &p, why, sizeof why), 0);
        assert_false(attach_sock_unserved(db, why, sizeof why));
        assert_true(attach_sock_stale(db, why, sizeof why));
        assert_non_null(strstr(why, "stale replica: no leader known"));
        attach_sock_pointer_remove(db, (long)getpid());
    }
    staleness_get(s, &v);
    assert_true(v.stale);
    assert_true(staleness_any());

    w = view(false, UINT64_MAX, 0, 0);
    assert_false(staleness_on_tick(s, &w)); /* stale already */
    assert_int_equal(stat(notice, &st), 0);

    w = view_at(mono_now(), 10, 3, 3);
    assert_false(staleness_on_tick(s, &w));
    staleness_get(s, &v);
    assert_false(v.stale);
    /* No node is stale, but one has a bound: its verdict may expire
     * before its next tick, so the guard asks it. */
    assert_true(staleness_any());
    assert_int_not_equal(stat(notice, &st), 0);

    /* A fresh verdict whose tick was 2 s ago (the process was paused,
     * the loop has not ticked since): stale for a reader now, without a
     * tick (a reader right after SIGCONT served the state of before the
     * pause; the fault suite's bounded-staleness checker found it). */
    w = view_at(mono_now() - 2000, 10, 3, 3);
    assert_false(staleness_on_tick(s, &w));
    staleness_get(s, &v);
    assert_true(v.stale);
    assert_non_null(strstr(v.reason, "not judged since the last tick"));
    w = view_at(mono_now(), 10, 3, 3);
    assert_false(staleness_on_tick(s, &w));
    staleness_get(s, &v);
    assert_false(v.stale);

    /* 2026-12-01T17:49:25.123Z, last heard 600 ms before. */
    w = view(false, 600, 3, 3);
    w.wall_ms = 1796147365723;
    assert_true(staleness_on_tick(s, &w)); /* turned stale */
    staleness_get(s, &v);
    assert_string_equal(v.reason,
                        "stale replica: no round trip with its leader for 600 "
                        "ms (max_staleness_ms=500)");
    /* The notice names the time of the last contact, not a number that
     * grows while it is read: 900 ms on, it is the same. */
    w.contact_ms = 900;
    w.wall_ms += 300;
    assert_false(staleness_on_tick(s, &w));
    assert_true(staleness_any());
    assert_file_text(notice,
                     "stale replica: no round trip with its leader since "
                     "2026-12-01T17:49:25.123Z "
                     "(max_staleness_ms=500)\n");
    /* The leader lost: the notice says so, from the same time on. */
    w.contact_ms = UINT64_MAX;
    w.wall_ms += 1000;
    assert_false(staleness_on_tick(s, &w));
    assert_file_text(notice,
                     "stale replica: no leader known since "
                     "2026-12-01T17:49:25.123Z "
                     "(max_staleness_ms=500)\n");
    /* The heartbeat: a tick EXT_BOUND_BEAT_MS after the last beat sets
     * the marker's mtime to now (here from 10 s back). */
    {
        struct timespec t[2] = {{.tv_sec = time(NULL) - 10},
                                {.tv_sec = time(NULL) - 10}};
        struct timespec pause = {.tv_nsec =
                                     (EXT_BOUND_BEAT_MS(500) + 20) * 1000000L};
        assert_int_equal(utimensat(AT_FDCWD, bound, t, 0), 0);
        nanosleep(&pause, NULL);
        assert_false(staleness_on_tick(s, &w));
        assert_int_equal(stat(bound, &st), 0);
        assert_true(st.st_mtim.tv_sec >= time(NULL) - 1);
    }
    staleness_free(s);
    assert_false(staleness_any());
    assert_int_not_equal(stat(notice, &st), 0);
    /* The marker stays, naming no process: no node serves the file. */
    assert_file_text(bound, "raftsql-bound 1\nmax_staleness_ms=500\npid=0\n");

    /* Off: fresh from the start, no notice ever (one left by a run that
     * crashed is removed). */
    {
        FILE *f = fopen(notice, "w");
        assert_non_null(f);
        fclose(f);
    }
    assert_int_equal(staleness_new(0, notice, bound, &log, &s), 0);
    assert_int_not_equal(stat(notice, &st), 0);
    /* A start without the bound removes the marker. */
    assert_int_not_equal(stat(bound, &st), 0);
    staleness_get(s, &v);
    assert_false(v.stale);
    w = view(false, UINT64_MAX, 0, 0);
    assert_false(staleness_on_tick(s, &w));
    assert_int_not_equal(stat(notice, &st), 0);
    staleness_free(s);
    node_log_close(&log);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_follower_contact),
        cmocka_unit_test(test_applied_state_age),
        cmocka_unit_test(test_new_leader_commit),
        cmocka_unit_test(test_catch_up_ring_full),
        cmocka_unit_test(test_no_leader),
        cmocka_unit_test(test_no_round_trip),
        cmocka_unit_test(test_isolated_leader),
        cmocka_unit_test(test_leader_without_quorum),
        cmocka_unit_test(test_catch_up_after_start),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_removed),
        cmocka_unit_test(test_published),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
