/* Unit tests of the driver's storage jobs (raft/uv_storage.c over
 * raft/persist): writes on the thread pool, group commit, messages held
 * until durable, PERSISTED and COMPACT stepping, the NOSPACE requeue and
 * its retries, failures that stop the driver, and stop with a write in
 * flight. A real core and driver run on the fakes of tests/uv/fake.h. */

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/uv/fake.h"

static const raft_id ONE[] = {1};
static const raft_id TWO[] = {1, 2};
static const raft_id PEER_1[] = {1};

/* applied returns whether the entry at @index was applied (mutex held). */
static bool applied(const struct fake *f, raft_index index)
{
    return f->n_applied > 0 && f->applied[f->n_applied - 1].index >= index;
}

/* append_of returns the @nth (0-based) append call whose first entry is
 * @first, or NULL (mutex held). */
static const struct fake_call *append_of(const struct fake *f, raft_index first,
                                         unsigned nth)
{
    for (unsigned i = 0; i < f->n_calls; i++) {
        const struct fake_call *c = &f->calls[i];
        if (c->op == FAKE_APPEND && c->first == first && nth-- == 0) {
            return c;
        }
    }
    return NULL;
}

/* start_single starts server 1 as the only voter and waits until it leads
 * and applied its first entry. */
static void start_single(struct fake *f, const struct fake_opts *o)
{
    struct fake_opts none = {0};
    fake_init(f, 1);
    fake_start(f, fake_core(1, ONE, 1, 20), o != NULL ? o : &none);
    FAKE_WAIT(f, f->obs.role == RAFT_LEADER && f->n_applied >= 1);
}

/* start_follower starts server 2 of {1, 2}, which the test leads as 1. */
static void start_follower(struct fake *f)
{
    struct fake_opts o = {.peers = PEER_1, .n_peers = 1};
    fake_init(f, 2);
    fake_start(f, fake_core(2, TWO, 2, 60000), &o);
    FAKE_WAIT(f, f->obs.n_ticks > 0);
}

/* n_appends counts the append calls so far. */
static unsigned n_appends(struct fake *f)
{
    unsigned n;
    fake_lock(f);
    n = fake_n_calls(f, FAKE_APPEND, -1);
    fake_unlock(f);
    return n;
}

/* propose_applied proposes @payload and waits until it is applied. */
static raft_index propose_applied(struct fake *f, const char *payload)
{
    raft_index index = 0;
    assert_int_equal(fake_propose(f, payload, &index), 0);
    FAKE_WAIT(f, applied(f, index));
    return index;
}

/* A proposal is written by the store's append on a thread-pool thread,
 * and only once that write returned does the core commit and apply it. */
static void test_write_path(void **state)
{
    struct fake *f = fake_a(state);
    raft_index index = 0;
    start_single(f, NULL);
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "x1", &index), 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    fake_barrier(f);
    FAKE_CHECK(f, f->obs.commit < index && !applied(f, index));
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, applied(f, index));
    FAKE_CHECK(f, append_of(f, index, 0) != NULL &&
                      append_of(f, index, 0)->n == 1 &&
                      append_of(f, index, 0)->rc == 0);
    FAKE_CHECK(f, f->loop_known && !append_of(f, index, 0)->on_loop);
    FAKE_CHECK(f, strcmp(f->applied[f->n_applied - 1].data, "x1") == 0);
    FAKE_CHECK(f, f->obs.persisted >= index && f->obs.stats.n_writes >= 2 &&
                      f->obs.stats.n_entries_written >= 2);
}

/* What the appended callback saw (loop thread; read by the test after
 * fake_propose, which waits for the loop). */
struct seen {
    raft_index first; /* the first index handed over, 0 before any */
    unsigned n;       /* entries handed over */
    char last[16];    /* the last one's payload */
};

static void on_appended(void *data, const struct raft_entry *entries,
                        unsigned n)
{
    struct seen *s = data;
    const struct raft_buf *b = entries[n - 1].data;
    if (s->first == 0) {
        s->first = entries[0].index;
    }
    s->n += n;
    snprintf(s->last, sizeof s->last, "%.*s", b != NULL ? (int)b->len : 0,
             b != NULL ? (const char *)b->data : "");
}

/* The application gets the entries the log takes before the call that
 * proposed them returns, while their write has not even started (held):
 * before they are durable. */
static void test_appended_before_durable(void **state)
{
    struct fake *f = fake_a(state);
    struct seen s = {0};
    struct raft_uv_node_callbacks app = {.data = &s, .appended = on_appended};
    struct fake_opts o = {.app = &app};
    raft_index index = 0;
    unsigned before;
    start_single(f, &o);
    assert_true(s.first == 1 && s.n >= 1); /* the leader's no-op */
    before = s.n;
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "x1", &index), 0);
    assert_int_equal(s.n, before + 1);
    assert_string_equal(s.last, "x1");
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    FAKE_CHECK(f, f->obs.persisted < index);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, applied(f, index));
    assert_int_equal(s.n, before + 1);
}

/* Proposals that arrive while a write runs are merged into the next one:
 * one append call, and one fsync, for all of them. */
static void test_group_commit(void **state)
{
    struct fake *f = fake_a(state);
    raft_index a = 0, b = 0, c = 0;
    uint64_t writes;
    start_single(f, NULL);
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "a", &a), 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    assert_int_equal(fake_propose(f, "b", &b), 0);
    assert_int_equal(fake_propose(f, "c", &c), 0);
    assert_int_equal(b, a + 1);
    assert_int_equal(c, a + 2);
    fake_lock(f);
    writes = f->obs.stats.n_writes;
    fake_unlock(f);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, applied(f, c));
    FAKE_CHECK(f, append_of(f, a, 0)->n == 1);
    FAKE_CHECK(f, append_of(f, b, 0) != NULL && append_of(f, b, 0)->n == 2);
    FAKE_CHECK(f, append_of(f, c, 0) == NULL);
    FAKE_CHECK(f, f->obs.stats.n_writes == writes + 2);
}

/* A vote is sent only after the term and vote it changes are durable
 * (raft.h driver rule 1): the answer waits for the held write. */
static void test_vote_held_until_durable(void **state)
{
    struct fake *f = fake_a(state);
    const struct fake_sent *s;
    const struct fake_call *c;
    start_follower(f);
    fake_hold(f, FAKE_APPEND);
    fake_inject_vote(f, 1, 5);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    fake_barrier(f);
    FAKE_CHECK(f, fake_n_sent(f, RAFT_MSG_REQUEST_VOTE_RESULT) == 0);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_MSG_REQUEST_VOTE_RESULT) == 1);
    fake_lock(f);
    s = fake_last_sent(f, RAFT_MSG_REQUEST_VOTE_RESULT);
    c = fake_last_call(f, FAKE_APPEND);
    assert_true(s->f.message.request_vote_result.vote_granted);
    assert_int_equal(s->f.message.request_vote_result.term, 5);
    assert_int_equal(s->f.to, 1);
    assert_true(c->has_hs && c->rc == 0);
    assert_int_equal(c->hs.term, 5);
    assert_int_equal(c->hs.vote, 1);
    assert_true(c->seq < s->seq);
    fake_unlock(f);
}

/* An append that fails with an I/O error is logged at ERROR and stops
 * the driver (raft_uv_node_failure says why): no write follows, and
 * proposals fail with RAFT_IOERR. */
static void test_append_failure_stops_writing(void **state)
{
    struct fake *f = fake_a(state);
    raft_index index = 0;
    unsigned n, ticks;
    start_single(f, NULL);
    FAKE_CHECK(f, !f->obs.failed && f->obs.failure[0] == '\0');
    fake_fail(f, FAKE_APPEND, RAFT_IOERR, 1);
    assert_int_equal(fake_propose(f, "lost", &index), 0);
    FAKE_WAIT(f, f->obs.failed);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_ERROR,
                              "log write failed, the node stops writing, "
                              "voting and acknowledging until restarted: "
                              "fake: injected") == 1);
    FAKE_CHECK(f, strcmp(f->obs.failure, "fake: injected I/O error") == 0);
    assert_int_equal(fake_propose(f, "refused", NULL), RAFT_IOERR);
    n = n_appends(f);
    fake_lock(f);
    ticks = f->obs.n_ticks;
    fake_unlock(f);
    FAKE_WAIT(f, f->obs.n_ticks >= ticks + 5);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_APPEND, -1) == n);
    FAKE_CHECK(f, !applied(f, index) && f->obs.commit < index);
}

/* After a failed write a follower neither acknowledges nor votes: a
 * later RequestVote gets no answer and writes nothing. */
static void test_failed_follower_does_not_vote(void **state)
{
    struct fake *f = fake_a(state);
    unsigned n;
    start_follower(f);
    fake_fail(f, FAKE_APPEND, RAFT_IOERR, UINT_MAX);
    fake_inject_append(f, 1, 3, 0, 0, "a", 0);
    FAKE_WAIT(f, f->obs.failed);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_ERROR, "log write failed") == 1);
    n = n_appends(f);
    fake_inject_vote(f, 1, 4);
    fake_barrier(f);
    FAKE_CHECK(f, fake_n_sent(f, RAFT_MSG_REQUEST_VOTE_RESULT) == 0);
    FAKE_CHECK(f, fake_n_sent(f, RAFT_MSG_APPEND_ENTRIES_RESULT) == 0);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_APPEND, -1) == n);
    FAKE_CHECK(f, f->obs.term == 3);
}

/* An append refused for lack of space stays first in the queue: the log
 * shows full, an ERROR is logged, and the same write is retried (a second
 * later) and then commits. */
static void test_nospace_retried(void **state)
{
    struct fake *f = fake_a(state);
    raft_index index = 0;
    start_single(f, NULL);
    fake_fail(f, FAKE_APPEND, RAFT_NOSPACE, 1);
    assert_int_equal(fake_propose(f, "big", &index), 0);
    FAKE_WAIT(f, f->obs.log_full);
    FAKE_CHECK(f,
               fake_logged(f, RAFT_LOG_ERROR,
                           "no room for the log: writes wait until "
                           "compaction or freed disk space makes room") == 1);
    FAKE_CHECK(f, !applied(f, index) && !f->obs.failed);
    FAKE_WAIT(f, applied(f, index));
    FAKE_CHECK(f, append_of(f, index, 0)->rc == RAFT_NOSPACE &&
                      append_of(f, index, 0)->n == 1);
    FAKE_CHECK(
        f, append_of(f, index, 1)->rc == 0 && append_of(f, index, 1)->n == 1);
    FAKE_CHECK(f, !f->obs.log_full && !f->obs.failed);
    FAKE_CHECK(
        f, fake_logged(f, RAFT_LOG_WARN, "the log takes writes again") == 1);
}

/* While the log is full a compaction runs ahead of the refused append,
 * which runs again after it and commits; COMPACT is stepped. */
static void test_nospace_compaction_first(void **state)
{
    struct fake *f = fake_a(state);
    raft_index index = 0;
    const struct fake_call *c, *ok;
    start_single(f, NULL);
    propose_applied(f, "a");
    propose_applied(f, "b");
    fake_fail(f, FAKE_APPEND, RAFT_NOSPACE, UINT_MAX);
    assert_int_equal(fake_propose(f, "c", &index), 0);
    FAKE_WAIT(f, f->obs.log_full);
    fake_hold(f, FAKE_COMPACT);
    assert_int_equal(fake_compact(f, 2), 0);
    FAKE_WAIT(f, f->held[FAKE_COMPACT]);
    fake_fail(f, FAKE_APPEND, 0, 0);
    fake_release(f, FAKE_COMPACT);
    FAKE_WAIT(f, applied(f, index));
    fake_lock(f);
    c = fake_last_call(f, FAKE_COMPACT);
    assert_true(c->rc == 0 && c->index == 2);
    /* The appends of @index: refused until the compaction ran, then one
     * that commits. (Not the last append of all: a write that waited
     * longer than an election timeout, as on a loaded machine, stalls
     * the storage, the only voter steps down, and once the write went
     * through it is elected again and appends its term's no-op.) */
    ok = NULL;
    for (unsigned i = 0; ok == NULL && append_of(f, index, i) != NULL; i++) {
        const struct fake_call *a = append_of(f, index, i);
        if (a->rc == 0) {
            ok = a;
        } else {
            assert_int_equal(a->rc, RAFT_NOSPACE);
        }
    }
    assert_non_null(ok);
    assert_true(c->seq < ok->seq);
    assert_int_equal(f->obs.first, 3);
    assert_int_equal(f->obs.stats.n_compactions, 1);
    assert_false(f->obs.log_full);
    fake_unlock(f);
}

/* A compaction queued in the same job as an append that is refused for
 * lack of space is split off and runs first; the append then runs again
 * at once. */
static void test_nospace_splits_compaction(void **state)
{
    struct fake *f = fake_a(state);
    raft_index a = 0, b = 0;
    const struct fake_call *c;
    start_single(f, NULL);
    propose_applied(f, "x");
    propose_applied(f, "y");
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "a", &a), 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    assert_int_equal(fake_propose(f, "b", &b), 0);
    assert_int_equal(fake_compact(f, 2), 0);
    fake_fail_after(f, FAKE_APPEND, RAFT_NOSPACE, 1, 1);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, applied(f, b));
    fake_lock(f);
    c = fake_last_call(f, FAKE_COMPACT);
    assert_true(append_of(f, a, 0)->rc == 0);
    assert_true(append_of(f, b, 0)->rc == RAFT_NOSPACE);
    assert_true(c != NULL && c->rc == 0 && c->index == 2);
    assert_true(append_of(f, b, 0)->seq < c->seq);
    assert_true(append_of(f, b, 1)->rc == 0 &&
                c->seq < append_of(f, b, 1)->seq);
    assert_int_equal(fake_n_calls(f, FAKE_APPEND, -1),
                     fake_n_calls(f, FAKE_APPEND, 0) + 1);
    assert_int_equal(f->obs.first, 3);
    fake_unlock(f);
}

/* raft_uv_node_compact refuses an index beyond the persisted log or below
 * its first index, and a second compaction while one is queued. */
static void test_compact_refused(void **state)
{
    struct fake *f = fake_a(state);
    raft_index persisted, index = 0;
    start_single(f, NULL);
    propose_applied(f, "a");
    propose_applied(f, "b");
    fake_lock(f);
    persisted = f->obs.persisted;
    fake_unlock(f);
    assert_int_equal(fake_compact(f, persisted + 1), RAFT_INVALID);
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "c", &index), 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    assert_int_equal(fake_compact(f, 2), 0);
    assert_int_equal(fake_compact(f, 3), RAFT_BUSY);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, f->obs.stats.n_compactions == 1 && applied(f, index));
    FAKE_CHECK(f, f->obs.first == 3 && fake_n_calls(f, FAKE_COMPACT, -1) == 1);
    assert_int_equal(fake_compact(f, 1), RAFT_INVALID);
}

/* A store without a compact function makes every compaction invalid. */
static void test_compact_without_function(void **state)
{
    struct fake *f = fake_a(state);
    struct fake_opts o = {.no_compact = true};
    start_single(f, &o);
    propose_applied(f, "a");
    assert_int_equal(fake_compact(f, 1), RAFT_INVALID);
}

/* A compaction that fails with an I/O error stops the driver as a failed
 * append does, and COMPACT is not stepped. */
static void test_compact_failure_stops_writing(void **state)
{
    struct fake *f = fake_a(state);
    start_single(f, NULL);
    propose_applied(f, "a");
    propose_applied(f, "b");
    fake_fail(f, FAKE_COMPACT, RAFT_IOERR, 1);
    assert_int_equal(fake_compact(f, 2), 0);
    FAKE_WAIT(f, f->obs.failed);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_ERROR, "log write failed") == 1);
    FAKE_CHECK(f, f->obs.first == 1 && f->obs.stats.n_compactions == 0);
    assert_int_equal(fake_propose(f, "c", NULL), RAFT_IOERR);
}

static void *stop_thread(void *arg)
{
    raft_uv_node_stop(arg);
    return NULL;
}

/* Stopping waits for the write in flight, which completes; nothing is
 * stepped or applied once the stop began. */
static void test_stop_waits_for_write(void **state)
{
    struct fake *f = fake_a(state);
    raft_index index = 0;
    unsigned n_applied;
    pthread_t t;
    start_single(f, NULL);
    fake_hold(f, FAKE_APPEND);
    assert_int_equal(fake_propose(f, "last", &index), 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    fake_lock(f);
    n_applied = f->n_applied;
    fake_unlock(f);
    assert_int_equal(pthread_create(&t, NULL, stop_thread, f->d), 0);
    FAKE_WAIT(f, f->transport_closed);
    fake_release(f, FAKE_APPEND);
    assert_int_equal(pthread_join(t, NULL), 0);
    f->d = NULL;
    FAKE_CHECK(f, append_of(f, index, 0)->rc == 0);
    FAKE_CHECK(f, f->n_applied == n_applied);
}

/* Every test runs on a fresh struct fake_pair. */
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, fake_setup, fake_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_write_path),
        TEST(test_group_commit),
        TEST(test_appended_before_durable),
        TEST(test_vote_held_until_durable),
        TEST(test_append_failure_stops_writing),
        TEST(test_failed_follower_does_not_vote),
        TEST(test_nospace_retried),
        TEST(test_nospace_compaction_first),
        TEST(test_nospace_splits_compaction),
        TEST(test_compact_refused),
        TEST(test_compact_without_function),
        TEST(test_compact_failure_stops_writing),
        TEST(test_stop_waits_for_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
