/* Unit tests of raft/persist.c, the storage job queue of the driver and
 * the simulation: group commit into the open tail, sealed and running
 * jobs, held messages, installs and their stale writes, the NOSPACE
 * requeue, compaction order, empty jobs, and paper §7's decision. The
 * storage is a fake that records its calls over an in-memory log; a real
 * core answers whether an install resets the log. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/persist.h"

/* The fake storage: a log of (base, last], the calls it got, and codes to
 * return. */
struct fake {
    raft_index base;           /* boundary of the log */
    raft_term held_term;       /* what entry_term gives for any index */
    int entry_term_rc;         /* what entry_term returns */
    unsigned n_resets;         /* reset calls */
    int reset_rc;              /* what reset returns */
    bool not_covering;         /* the state machine installs nothing */
    raft_index last;           /* last index, base when empty */
    struct raft_hard_state hs; /* durable hard state */
    unsigned n_appends;        /* append calls */
    raft_index append_first;   /* first index of the last append, 0 */
    unsigned append_n;         /* its entry count */
    bool append_hs;            /* it wrote a hard state */
    unsigned n_compacts;       /* compact calls */
    raft_index compact_index;  /* index of the last one */
    unsigned n_installs;       /* install calls */
    raft_index install_index;  /* index of the last one */
    unsigned n_configurations; /* snapshot_configuration calls */
    int nospace;               /* appends to refuse with RAFT_NOSPACE */
    unsigned calls;            /* sequence of all calls */
    unsigned compact_seq;      /* sequence number of the last compact */
    unsigned append_seq;       /* sequence number of the last append */
};

static int fake_append(void *data, const struct raft_hard_state *hs,
                       const struct raft_entry *entries, unsigned n,
                       char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;

    f->n_appends++;
    if (n > 0 && f->nospace > 0) {
        f->nospace--;
        snprintf(errmsg, errmsg_len, "full");
        return RAFT_NOSPACE;
    }
    if (n > 0 &&
        (entries[0].index <= f->base || entries[0].index > f->last + 1)) {
        snprintf(errmsg, errmsg_len, "gap");
        return RAFT_INVALID;
    }
    f->append_seq = ++f->calls;
    f->append_first = n > 0 ? entries[0].index : 0;
    f->append_n = n;
    f->append_hs = hs != NULL;
    if (hs != NULL) {
        f->hs = *hs;
    }
    if (n > 0) {
        f->last = entries[n - 1].index;
    }
    return 0;
}

static int fake_compact(void *data, raft_index index, char *errmsg,
                        size_t errmsg_len)
{
    struct fake *f = data;

    (void)errmsg;
    (void)errmsg_len;
    f->n_compacts++;
    f->compact_index = index;
    f->compact_seq = ++f->calls;
    if (index > f->base) {
        f->base = index;
    }
    return 0;
}

/* fake_install is the state machine's install: it always installs. */
static int fake_install(void *data, const char *path, raft_index index,
                        raft_term term, bool *out_installed, char *errmsg,
                        size_t errmsg_len)
{
    struct fake *f = data;

    (void)path;
    (void)term;
    (void)errmsg;
    (void)errmsg_len;
    f->n_installs++;
    f->install_index = index;
    ++f->calls;
    *out_installed = !f->not_covering;
    return 0;
}

/* fake_entry_term gives held_term for every index (0 by default: after
 * an install the log is reset). */
static int fake_entry_term(void *data, raft_index index, raft_index *out_first,
                           raft_term *out_term, char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;

    (void)index;
    if (f->entry_term_rc != 0) {
        snprintf(errmsg, errmsg_len, "entry unreadable");
        return f->entry_term_rc;
    }
    *out_first = f->base + 1;
    *out_term = f->held_term;
    return 0;
}

/* fake_reset resets the log to start after @index. */
static int fake_reset(void *data, raft_index index, raft_term term,
                      char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;

    (void)term;
    f->n_resets++;
    if (f->reset_rc != 0) {
        snprintf(errmsg, errmsg_len, "reset failed");
        return f->reset_rc;
    }
    f->base = index;
    f->last = index;
    return 0;
}

/* A queue with its fake storage. */
struct fixture {
    struct raft_persist p;
    struct fake f;
    struct raft_persist_storage s;
    struct raft_entry e[16];       /* entries, index i + 1 at e[i], term 1 */
    struct raft_persist_job *done; /* the last job finished (its result
                                      points into it), or NULL */
    struct raft *core;             /* asked whether an install resets the log */
};

/* new_core makes @x's core a follower of three whose durable log holds
 * entries 1..@n of term 1 (fresh when 0), none applied. */
static void new_core(struct fixture *x, unsigned n)
{
    static const raft_id voters[3] = {1, 2, 3};
    struct raft_config cfg;
    struct raft_hard_state hs = {.term = 1, .vote = 0};

    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    cfg.voters = voters;
    cfg.n_voters = 3;
    cfg.election_timeout = 100;
    cfg.heartbeat_interval = 20;
    cfg.max_inflight_msgs = 4;
    if (x->core != NULL) {
        raft_close(x->core);
        x->core = NULL;
    }
    assert_int_equal(raft_new(&cfg, &hs, 1, x->e, n, 0, &x->core), 0);
}

static int setup(void **state)
{
    static struct fixture x;
    unsigned i;

    memset(&x, 0, sizeof x);
    raft_persist_init(&x.p);
    x.s.log.data = &x.f;
    x.s.log.append = fake_append;
    x.s.log.compact = fake_compact;
    x.s.log.entry_term = fake_entry_term;
    x.s.log.reset = fake_reset;
    x.s.fsm.data = &x.f;
    x.s.fsm.snapshot_install = fake_install;
    for (i = 0; i < 16; i++) {
        x.e[i].index = i + 1;
        x.e[i].term = 1;
        x.e[i].type = RAFT_ENTRY_NORMAL;
    }
    new_core(&x, 0);
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *x = *state;

    raft_persist_job_free(x->done);
    raft_persist_close(&x->p);
    raft_close(x->core);
    return 0;
}

/* merge merges an update of entries [first, last] (none when first is
 * 0), with hard state term @term (unchanged when 0) and @n_msgs
 * messages. */
static void merge(struct fixture *x, raft_index first, raft_index last,
                  raft_term term, const struct raft_message *msgs,
                  unsigned n_msgs)
{
    struct raft_update u;

    memset(&u, 0, sizeof u);
    if (first > 0) {
        u.entries = &x->e[first - 1];
        u.n_entries = (unsigned)(last - first + 1);
    }
    if (term > 0) {
        u.hard_state_changed = true;
        u.hard_state.term = term;
    }
    u.messages = msgs;
    u.n_messages = n_msgs;
    assert_int_equal(raft_persist_merge(&x->p, &u), 0);
}

/* run_next hands out, runs and finishes the next job into @res; the job
 * is kept until the next call (unless requeued). Returns false when there
 * was none. */
static bool run_next(struct fixture *x, struct raft_persist_result *res)
{
    struct raft_persist_job *j = raft_persist_next(&x->p);

    raft_persist_job_free(x->done);
    x->done = NULL;
    if (j == NULL) {
        return false;
    }
    raft_persist_run(j, &x->s);
    raft_persist_done(&x->p, j, true, x->core, res);
    if (res->outcome != RAFT_PERSIST_REQUEUED) {
        x->done = j;
    }
    return true;
}

/* Updates that arrive while nothing runs merge into one job: one write of
 * all their entries, with the latest hard state; PERSISTED for the last. */
static void test_merge_into_tail(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 2, 1, NULL, 0);
    merge(x, 3, 3, 0, NULL, 0);
    merge(x, 4, 5, 2, NULL, 0);
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(x->f.n_appends, 1);
    assert_int_equal(x->f.append_first, 1);
    assert_int_equal(x->f.append_n, 5);
    assert_int_equal(x->f.hs.term, 2);
    assert_true(res.wrote);
    assert_true(res.persisted);
    assert_int_equal(res.persisted_index, 5);
    assert_int_equal(res.persisted_term, 1);
    assert_false(run_next(x, &res));
}

/* A later update whose entries start inside the tail job replaces the
 * job's entries from there on (a conflicting suffix). */
static void test_merge_replaces_suffix(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 4, 1, NULL, 0);
    x->e[2].term = 2;
    merge(x, 3, 3, 0, NULL, 0);
    assert_true(run_next(x, &res));
    assert_int_equal(x->f.append_n, 3);
    assert_int_equal(res.persisted_index, 3);
    assert_int_equal(res.persisted_term, 2);
}

/* The running job takes no merges: what arrives meanwhile is the next
 * write. */
static void test_running_job_takes_no_merges(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_persist_job *j;

    merge(x, 1, 2, 1, NULL, 0);
    j = raft_persist_next(&x->p);
    assert_non_null(j);
    assert_null(raft_persist_next(&x->p)); /* one at a time */
    merge(x, 3, 4, 0, NULL, 0);
    raft_persist_run(j, &x->s);
    raft_persist_done(&x->p, j, true, x->core, &res);
    assert_int_equal(res.persisted_index, 2);
    assert_int_equal(x->f.append_n, 2);
    raft_persist_job_free(j);
    assert_true(run_next(x, &res));
    assert_int_equal(x->f.n_appends, 2);
    assert_int_equal(x->f.append_first, 3);
    assert_int_equal(res.persisted_index, 4);
}

/* An install job is alone and sealed: the write queued before it and the
 * one merged after it stay two writes around it. (The core holds entry 2:
 * the install keeps the log after it.) */
static void test_install_job_alone(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_install in;
    struct raft_persist_result res;

    new_core(x, 4);

    memset(&in, 0, sizeof in);
    snprintf(in.path, sizeof in.path, "snap");
    in.index = 2;
    in.last_term = 1;
    in.leader = 2;
    in.leader_term = 3;
    merge(x, 1, 2, 1, NULL, 0);
    assert_int_equal(raft_persist_install(&x->p, &in), 0);
    merge(x, 3, 4, 0, NULL, 0);
    assert_true(run_next(x, &res));
    assert_null(res.install);
    assert_int_equal(res.persisted_index, 2);
    assert_true(run_next(x, &res));
    assert_non_null(res.install);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(res.install->index, 2);
    assert_int_equal(res.install->leader_term, 3);
    assert_false(res.persisted);
    assert_int_equal(x->f.n_installs, 1);
    assert_int_equal(x->f.n_appends, 1);
    assert_int_equal(x->p.install_boundary, 2);
    assert_true(run_next(x, &res));
    assert_null(res.install);
    assert_int_equal(x->f.append_first, 3);
    assert_int_equal(res.persisted_index, 4);
    assert_true(res.after_install);
}

/* fake_configuration gives the configuration of server 7 alone, or
 * RAFT_NOTFOUND / RAFT_CORRUPT for the paths "none" / "bad". */
static int fake_configuration(void *data, const char *path,
                              struct raft_configuration *out, char *errmsg,
                              size_t errmsg_len)
{
    struct fake *f = data;

    f->n_configurations++;
    if (strcmp(path, "none") == 0) {
        return RAFT_NOTFOUND;
    }
    if (strcmp(path, "bad") == 0) {
        snprintf(errmsg, errmsg_len, "bad configuration");
        return RAFT_CORRUPT;
    }
    memset(out, 0, sizeof *out);
    out->n = 1;
    out->servers[0].id = 7;
    out->servers[0].role = RAFT_VOTER;
    return 0;
}

/* install_path runs an install job of snapshot @path (index 2) into
 * @res. */
static void install_path(struct fixture *x, const char *path,
                         struct raft_persist_result *res)
{
    struct raft_persist_install in;

    memset(&in, 0, sizeof in);
    snprintf(in.path, sizeof in.path, "%s", path);
    in.index = 2;
    in.last_term = 1;
    in.leader = 2;
    in.leader_term = 3;
    assert_int_equal(raft_persist_install(&x->p, &in), 0);
    assert_true(run_next(x, res));
    assert_non_null(res->install);
}

/* An install job reads the snapshot's configuration first (kept in the
 * job for SNAPSHOT_INSTALLED); a snapshot without one installs with none;
 * one whose configuration does not decode is refused, nothing
 * installed. */
static void test_install_reads_configuration(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    new_core(x, 4);
    x->s.fsm.snapshot_configuration = fake_configuration;
    install_path(x, "snap", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_true(res.install->has_configuration);
    assert_int_equal(res.install->configuration.servers[0].id, 7);
    assert_int_equal(x->f.n_installs, 1);

    install_path(x, "none", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_false(res.install->has_configuration);
    assert_int_equal(x->f.n_installs, 2);

    install_path(x, "bad", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_FAILED);
    assert_int_equal(res.rc, RAFT_CORRUPT);
    assert_int_equal(x->f.n_installs, 2);
    assert_int_equal(x->f.n_configurations, 3);
}

/* Messages of an update that changed the hard state are held (deep
 * copies) and handed back only once their job is durable; the others
 * are the caller's to send at once. */
static void test_held_messages(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_persist_job *j;
    struct raft_message m[2];
    struct raft_entry ae;

    memset(m, 0, sizeof m);
    memset(&ae, 0, sizeof ae);
    ae.index = 1;
    ae.term = 1;
    ae.data = raft_buf_copy("abc", 3);
    m[0].type = RAFT_MSG_REQUEST_VOTE_RESULT;
    m[0].to = 2;
    m[0].request_vote_result.vote_granted = true;
    m[1].type = RAFT_MSG_APPEND_ENTRIES;
    m[1].to = 3;
    m[1].append_entries.entries = &ae;
    m[1].append_entries.n_entries = 1;
    merge(x, 0, 0, 1, m, 2);
    merge(x, 1, 1, 0, m, 1); /* hard state unchanged: not held */
    raft_buf_unref(ae.data); /* the job holds its own reference */
    j = raft_persist_next(&x->p);
    assert_int_equal(j->n_held, 2);
    raft_persist_run(j, &x->s);
    raft_persist_done(&x->p, j, true, x->core, &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(res.n_messages, 2);
    assert_int_equal(res.messages[0].type, RAFT_MSG_REQUEST_VOTE_RESULT);
    assert_int_equal(res.messages[1].append_entries.n_entries, 1);
    assert_ptr_not_equal(res.messages[1].append_entries.entries, &ae);
    assert_memory_equal(res.messages[1].append_entries.entries[0].data->data,
                        "abc", 3);
    raft_persist_job_free(j);
}

/* A job that fails for another reason than a full log hands its messages
 * to nobody: the caller stops. */
static void test_failed_job_sends_nothing(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_message m;

    memset(&m, 0, sizeof m);
    m.type = RAFT_MSG_REQUEST_VOTE_RESULT;
    merge(x, 5, 6, 1, &m, 1); /* a gap after the empty log */
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_FAILED);
    assert_int_equal(res.rc, RAFT_INVALID);
    assert_string_equal(res.errmsg, "gap");
    assert_int_equal(res.n_messages, 0);
    assert_false(res.persisted);
}

/* install queues the install of a snapshot through (@index, term 1). */
static void install(struct fixture *x, raft_index index)
{
    struct raft_persist_install in;

    memset(&in, 0, sizeof in);
    in.index = index;
    in.last_term = 1;
    in.leader = 2;
    assert_int_equal(raft_persist_install(&x->p, &in), 0);
}

/* write_behind_install: the core holds entries 1..@n_core durably (none
 * when 0); the install of a snapshot through @index is queued, then a
 * write of entries [@first, @last] with hard state term @term (handed out
 * before the core learns of the install); both run. The install must
 * reset the log exactly when @reset; @res is the write's result. */
static void write_behind_install(struct fixture *x, unsigned n_core,
                                 raft_index index, raft_index first,
                                 raft_index last, raft_term term, bool reset,
                                 struct raft_persist_result *res)
{
    new_core(x, n_core);
    install(x, index);
    merge(x, first, last, term, NULL, 0);
    assert_true(run_next(x, res));
    assert_non_null(res->install);
    assert_int_equal(res->reset, reset);
    assert_true(run_next(x, res));
    assert_int_equal(res->outcome, RAFT_PERSIST_DONE);
    assert_true(res->after_install);
}

/* When the install resets the log, a write handed out before it (queued
 * behind it) drops all its entries, even those that would follow the
 * snapshot contiguously: the core reset its log too. Its hard state is
 * written; no PERSISTED. */
static void test_stale_after_reset(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    /* The fresh core does not hold entry 6. */
    write_behind_install(x, 0, 6, 5, 8, 2, true, &res);
    assert_int_equal(res.n_skipped, 4);
    assert_false(res.persisted);
    assert_true(x->f.append_hs);
    assert_int_equal(x->f.append_n, 0);
    assert_int_equal(x->f.hs.term, 2);
    assert_int_equal(x->f.last, 6);
}

/* Entries merged after the install (the core's new log) replace the old
 * ones from their first index on, and are written. */
static void test_new_entries_after_reset(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    install(x, 6);
    merge(x, 3, 8, 2, NULL, 0);
    assert_true(run_next(x, &res));
    assert_true(res.reset);
    merge(x, 7, 9, 0, NULL, 0); /* the core's log after the snapshot */
    assert_true(run_next(x, &res));
    assert_int_equal(res.n_skipped, 4); /* 3..6 */
    assert_int_equal(x->f.append_first, 7);
    assert_int_equal(x->f.append_n, 3);
    assert_true(res.persisted);
    assert_int_equal(res.persisted_index, 9);
}

/* When the core holds the snapshot's last entry durably the log keeps
 * what follows: a queued write keeps its entries after the snapshot and
 * drops those at or below it. */
static void test_stale_at_boundary(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    write_behind_install(x, 8, 6, 5, 8, 2, false, &res);
    assert_int_equal(x->f.append_first, 7);
    assert_int_equal(x->f.append_n, 2);
    assert_int_equal(res.n_skipped, 2);
    assert_false(res.stale);
    assert_true(res.persisted);
    assert_int_equal(res.persisted_index, 8);
}

/* When what such a write keeps leaves a gap after the log, the whole
 * write is stale: the hard state alone is written and no PERSISTED is
 * stepped. */
static void test_stale_gap(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    /* The fake install leaves the fake log ending at 10. */
    write_behind_install(x, 12, 10, 13, 15, 3, false, &res);
    assert_true(res.stale);
    assert_false(res.persisted);
    assert_int_equal(x->f.n_appends, 2); /* refused, then hs alone */
    assert_true(x->f.append_hs);
    assert_int_equal(x->f.append_n, 0);
    assert_int_equal(x->f.hs.term, 3);
    assert_int_equal(x->f.last, 10);
}

/* Without an install, a write that does not follow the log is a failure,
 * not a stale write. */
static void test_gap_without_install_fails(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 3, 4, 0, NULL, 0);
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_FAILED);
    assert_false(res.stale);
}

/* A refused append (log full) stays first, with nothing written; the
 * compaction it carried becomes a job of its own ahead of it, which runs
 * first; then the append is retried. */
static void test_nospace_requeue_compaction_first(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 4, 1, NULL, 0);
    assert_true(run_next(x, &res));
    merge(x, 5, 6, 0, NULL, 0);
    assert_int_equal(raft_persist_compact(&x->p, 3), 0);
    x->f.nospace = 1;
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    assert_int_equal(res.rc, RAFT_NOSPACE);
    assert_false(res.log_full); /* its compaction runs first */
    assert_false(raft_persist_log_full(&x->p));
    assert_int_equal(raft_persist_compact(&x->p, 4), RAFT_BUSY);
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(res.compact_index, 3);
    assert_false(res.wrote);
    /* The refused write comes back as two halves. */
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(res.compact_index, 0);
    assert_int_equal(res.persisted_index, 5);
    assert_true(x->f.compact_seq < x->f.append_seq);
    assert_true(run_next(x, &res));
    assert_int_equal(res.persisted_index, 6);
    assert_false(run_next(x, &res));
}

/* A refused append without a compaction waits first in line: nothing
 * runs until the retry. It takes no more merges (they go to a later job:
 * before, the retried write grew past what the log could ever take, and
 * a node stayed full for good), and it is retried with half its
 * entries. */
static void test_nospace_waits_for_retry(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 2, 0, NULL, 0);
    x->f.nospace = 1;
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    assert_true(res.log_full);
    assert_true(raft_persist_log_full(&x->p));
    assert_null(raft_persist_next(&x->p));
    merge(x, 3, 3, 0, NULL, 0);
    assert_null(raft_persist_next(&x->p));
    assert_true(raft_persist_retry(&x->p));
    assert_false(raft_persist_retry(&x->p));
    for (raft_index i = 1; i <= 3; i++) {
        assert_true(run_next(x, &res));
        assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
        assert_int_equal(x->f.append_first, i);
        assert_int_equal(x->f.append_n, 1);
        assert_int_equal(res.persisted_index, i);
    }
    assert_false(run_next(x, &res));
}

/* A full log does not hold up a new term or vote (else a full log
 * stops the cluster from electing a leader): when an append with a
 * hard state is refused, the hard state and the held messages go first
 * in a job of their own and are written at once; a hard state merged
 * while the append waits goes first at once too, ending the wait; no
 * older hard state is written after a newer one. */
static void test_hard_state_ahead_of_refused_append(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_message m;

    memset(&m, 0, sizeof m);
    m.type = RAFT_MSG_REQUEST_VOTE_RESULT;
    m.from = 1;
    m.to = 2;
    merge(x, 1, 2, 4, &m, 1);
    x->f.nospace = 3;
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    assert_false(res.log_full); /* the hard state goes first */
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_true(res.wrote && !res.persisted);
    assert_int_equal(res.n_messages, 1); /* sendable now */
    assert_int_equal(x->f.hs.term, 4);
    assert_int_equal(x->f.append_n, 0);
    /* The entries are refused again, without a hard state: they wait. */
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    assert_true(res.log_full);
    assert_null(raft_persist_next(&x->p));
    /* A vote of a newer term while they wait: written at once. */
    merge(x, 0, 0, 5, &m, 1);
    assert_false(raft_persist_log_full(&x->p));
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(res.n_messages, 1);
    assert_int_equal(x->f.hs.term, 5);
    /* The entries are tried again (refused once more, then they fit) and
     * carry no hard state: the term never goes back. */
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    assert_true(raft_persist_retry(&x->p));
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_true(res.persisted && res.persisted_index == 1);
    assert_true(run_next(x, &res));
    assert_true(res.persisted && res.persisted_index == 2);
    assert_false(x->f.append_hs);
    assert_int_equal(x->f.hs.term, 5);
}

/* A compaction queued while a refused append waits goes ahead of it and
 * ends the wait. */
static void test_compaction_ahead_of_refused(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 4, 1, NULL, 0);
    assert_true(run_next(x, &res));
    merge(x, 5, 5, 0, NULL, 0);
    x->f.nospace = 1;
    assert_true(run_next(x, &res));
    assert_true(res.log_full);
    assert_int_equal(raft_persist_compact(&x->p, 2), 0);
    assert_false(raft_persist_log_full(&x->p));
    assert_true(run_next(x, &res));
    assert_int_equal(res.compact_index, 2);
    assert_false(res.wrote);
    assert_true(run_next(x, &res));
    assert_int_equal(res.persisted_index, 5);
    assert_true(x->f.compact_seq < x->f.append_seq);
}

/* A compaction asked for while a new term's hard state, gone ahead of a
 * refused append, is being written lands behind that append; the append's
 * next refusal must put it first, or the append waits for good (the log
 * stays full although compaction could empty it: found with 250 KB
 * requests in a 1 MB log). */
static void test_compaction_queued_during_hard_state(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_persist_job *j;

    merge(x, 1, 4, 1, NULL, 0);
    assert_true(run_next(x, &res));
    merge(x, 5, 5, 0, NULL, 0);
    x->f.nospace = 100; /* no room until compacted */
    assert_true(run_next(x, &res));
    assert_true(res.log_full);
    /* A new term: its hard state goes first and runs... */
    merge(x, 0, 0, 2, NULL, 0);
    assert_false(raft_persist_log_full(&x->p));
    assert_true(raft_persist_room_wanted(&x->p)); /* the append waits */
    j = raft_persist_next(&x->p);
    assert_non_null(j);
    /* ...while the store asks for a compaction. */
    assert_int_equal(raft_persist_compact(&x->p, 4), 0);
    x->f.nospace = 0; /* the hard state fits (the reserve) */
    raft_persist_run(j, &x->s);
    raft_persist_done(&x->p, j, true, x->core, &res);
    raft_persist_job_free(j);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(x->f.hs.term, 2);
    /* The refused append runs again and is refused again. */
    x->f.nospace = 100;
    assert_true(run_next(x, &res));
    assert_int_equal(res.outcome, RAFT_PERSIST_REQUEUED);
    /* The compaction must run now, ahead of it, with no retry needed. */
    assert_true(run_next(x, &res));
    assert_int_equal(res.compact_index, 4);
    x->f.nospace = 0;
    assert_true(run_next(x, &res));
    assert_int_equal(res.persisted_index, 5);
    assert_false(raft_persist_room_wanted(&x->p));
}

/* Without @requeue (a driver stopping), a refused append just fails. */
static void test_nospace_no_requeue(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;
    struct raft_persist_job *j;

    merge(x, 1, 1, 1, NULL, 0);
    x->f.nospace = 1;
    j = raft_persist_next(&x->p);
    raft_persist_run(j, &x->s);
    raft_persist_done(&x->p, j, false, x->core, &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_FAILED);
    assert_int_equal(res.rc, RAFT_NOSPACE);
    raft_persist_job_free(j);
    assert_null(raft_persist_next(&x->p));
}

/* A compaction goes in order with the writes (in the open tail job, after
 * its append), one at a time. */
static void test_compaction_in_order(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    merge(x, 1, 3, 1, NULL, 0);
    assert_int_equal(raft_persist_compact(&x->p, 2), 0);
    assert_int_equal(raft_persist_compact(&x->p, 3), RAFT_BUSY);
    assert_true(run_next(x, &res));
    assert_int_equal(res.persisted_index, 3);
    assert_int_equal(res.compact_index, 2);
    assert_true(x->f.append_seq < x->f.compact_seq);
    assert_int_equal(raft_persist_compact(&x->p, 3), 0);
}

/* An update with nothing durable leaves an empty job, which is dropped
 * rather than run. */
static void test_empty_job_dropped(void **state)
{
    struct fixture *x = *state;

    merge(x, 0, 0, 0, NULL, 0);
    assert_non_null(x->p.head);
    assert_null(raft_persist_next(&x->p));
    assert_null(x->p.head);
    assert_null(x->p.tail);
    assert_int_equal(x->f.calls, 0);
}

/* After the state machine installed a snapshot, the stored log that holds
 * its last entry (same term) keeps its suffix: a compaction through the
 * snapshot's index, no reset (paper §7). */
static void test_install_keeps_suffix(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    new_core(x, 4);
    x->f.last = 4;
    x->f.held_term = 1;
    install_path(x, "snap", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(x->f.n_installs, 1);
    assert_int_equal(x->f.n_compacts, 1);
    assert_int_equal(x->f.compact_index, 2);
    assert_int_equal(x->f.n_resets, 0);
    assert_int_equal(x->f.last, 4);
}

/* A snapshot the state machine did not install (it does not cover the
 * applied index), or one below the log's first index, leaves the log as
 * it is. */
static void test_install_changes_log_only_when_installed(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    new_core(x, 4);
    x->f.last = 4;
    x->f.not_covering = true;
    install_path(x, "snap", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(x->f.n_compacts + x->f.n_resets, 0);

    x->f.not_covering = false;
    x->f.base = 3; /* compacted past the snapshot's index 2 */
    install_path(x, "snap", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_DONE);
    assert_int_equal(x->f.n_installs, 2);
    assert_int_equal(x->f.n_compacts + x->f.n_resets, 0);
    assert_int_equal(x->f.base, 3);
}

/* A log that cannot be read at the snapshot's index fails the install
 * before the state machine installs anything: RAFT_BUSY, nothing changed
 * (the leader sends it again). */
static void test_install_log_unreadable(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    new_core(x, 4);
    x->f.last = 4;
    x->f.entry_term_rc = RAFT_IOERR;
    install_path(x, "snap", &res);
    assert_int_equal(res.rc, RAFT_BUSY);
    assert_non_null(strstr(res.errmsg, "read the log at the snapshot's index"));
    assert_int_equal(x->f.n_installs, 0);
    assert_int_equal(x->f.n_compacts + x->f.n_resets, 0);
    assert_int_equal(x->f.last, 4);
}

/* A log that cannot follow the installed snapshot fails the install with
 * an I/O error (the state machine is ahead of the log: the driver stops
 * writing). */
static void test_install_log_change_fails(void **state)
{
    struct fixture *x = *state;
    struct raft_persist_result res;

    new_core(x, 4);
    x->f.last = 4;
    x->f.reset_rc = RAFT_IOERR;
    install_path(x, "snap", &res);
    assert_int_equal(res.outcome, RAFT_PERSIST_FAILED);
    assert_int_equal(res.rc, RAFT_IOERR);
    assert_non_null(strstr(res.errmsg, "change the log after the snapshot"));
    assert_non_null(strstr(res.errmsg, "reset failed"));
    assert_int_equal(x->f.n_resets, 1);
}

/* Paper §7: keep the suffix exactly when the log holds the snapshot's
 * last entry. */
static void test_log_after_install(void **state)
{
    (void)state;
    assert_int_equal(raft_snapshot_log_action(3, 3), RAFT_SNAPSHOT_KEEP_SUFFIX);
    assert_int_equal(raft_snapshot_log_action(2, 3), RAFT_SNAPSHOT_RESET);
    assert_int_equal(raft_snapshot_log_action(0, 3), RAFT_SNAPSHOT_RESET);
    assert_int_equal(raft_snapshot_log_action(0, 0), RAFT_SNAPSHOT_RESET);
}

/* Closing frees queued jobs with their references (LeakSanitizer). */
static void test_close_frees(void **state)
{
    struct fixture *x = *state;
    struct raft_entry e = {.index = 1, .term = 1};

    e.data = raft_buf_copy("x", 1);
    x->e[0] = e;
    merge(x, 1, 1, 1, NULL, 0);
    raft_buf_unref(e.data);
    assert_non_null(raft_persist_next(&x->p));
    merge(x, 2, 2, 0, NULL, 0);
    raft_persist_close(&x->p);
    assert_null(x->p.head);
    assert_false(x->p.running);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_merge_into_tail),
        T(test_merge_replaces_suffix),
        T(test_running_job_takes_no_merges),
        T(test_install_job_alone),
        T(test_install_reads_configuration),
        T(test_held_messages),
        T(test_failed_job_sends_nothing),
        T(test_stale_after_reset),
        T(test_new_entries_after_reset),
        T(test_stale_at_boundary),
        T(test_stale_gap),
        T(test_gap_without_install_fails),
        T(test_nospace_requeue_compaction_first),
        T(test_nospace_waits_for_retry),
        T(test_hard_state_ahead_of_refused_append),
        T(test_compaction_ahead_of_refused),
        T(test_compaction_queued_during_hard_state),
        T(test_nospace_no_requeue),
        T(test_compaction_in_order),
        T(test_empty_job_dropped),
        T(test_install_keeps_suffix),
        T(test_install_changes_log_only_when_installed),
        T(test_install_log_change_fails),
        T(test_install_log_unreadable),
        T(test_log_after_install),
        T(test_close_frees),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
