/* Tests of ext/runtime/exec.c, the callers' side of writes, through exec.h
 * on a real driver (tests/uv/fake.h: an in-memory store and transport)
 * running a one-voter core, or a core of two voters whose peer never
 * answers (no leader). The test thread plays the apply thread: it hands
 * exec_applied the results of the entries the driver committed. What is
 * checked: the refusals before the queue, the answers of waiting callers
 * failed before and after their request left the node, results handed
 * to the waiter of each request id, and a removed node's refusals. */

#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/raftsql.h"
#include "ext/runtime/exec.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* Entries the driver committed that carry a request, by request id. */
#define MAX_IDS 64

/* The node: a driver, the status and proposer exec needs, and exec. */
struct node {
    struct fake fk;
    struct ext_config cfg;
    struct ext_status *st;
    struct ext_propose p;
    struct ext_exec *e;
    bool hold_wake; /* the loop leaves the submission queue alone */
    pthread_mutex_t mu;
    uint64_t ids[MAX_IDS][2]; /* committed requests' ids (mu) */
    raft_index index[MAX_IDS];
    unsigned n_ids;
};

static void app_wake(void *data)
{
    struct node *n = data;
    if (!__atomic_load_n(&n->hold_wake, __ATOMIC_SEQ_CST)) {
        exec_on_wake(n->e, n->fk.d);
    }
}

static void app_stepped(void *data)
{
    struct node *n = data;
    status_refresh(n->st, raft_uv_node_core(n->fk.d), n->fk.d, NULL);
}

static void app_tick(void *data)
{
    struct node *n = data;
    app_stepped(n);
    exec_on_tick(n->e, n->fk.d);
}

static void app_apply(void *data, const struct raft_entry *entries, unsigned k)
{
    struct node *n = data;
    pthread_mutex_lock(&n->mu);
    for (unsigned i = 0; i < k; i++) {
        uint64_t id[2];
        const struct raft_buf *b = entries[i].data;
        if (b == NULL || entries[i].type != RAFT_ENTRY_NORMAL ||
            sql_request_id(b->data, b->len, id) != 0 || n->n_ids == MAX_IDS) {
            continue;
        }
        n->ids[n->n_ids][0] = id[0];
        n->ids[n->n_ids][1] = id[1];
        n->index[n->n_ids] = entries[i].index;
        n->n_ids++;
    }
    pthread_mutex_unlock(&n->mu);
}

/* start starts node 1 with @n_voters voters (1: it leads; 2: the other
 * never answers, so nobody leads) and exec_timeout_ms @timeout_ms. */
static void start(struct node *n, unsigned n_voters, unsigned timeout_ms)
{
    static const raft_id voters[2] = {1, 2};
    struct raft_uv_node_callbacks app = {
        .data = n,
        .wake = app_wake,
        .tick = app_tick,
        .stepped = app_stepped,
        .apply = app_apply,
    };
    struct fake_opts o = {
        .peers = &voters[1], .n_peers = n_voters - 1, .app = &app};

    memset(n, 0, sizeof *n);
    pthread_mutex_init(&n->mu, NULL);
    n->cfg.id = 1;
    n->cfg.exec_timeout_ms = timeout_ms;
    n->cfg.heartbeat_ms = 10;
    n->cfg.max_request_bytes = 4096;
    n->cfg.log_max_bytes = 16u << 20;
    assert_int_equal(status_new(&n->cfg, "build", &n->st), 0);
    propose_init(&n->p, 7, 0);
    assert_int_equal(exec_new(&n->cfg, n->st, &n->p, 1000, &n->e), 0);
    fake_init(&n->fk, 1);
    fake_start(&n->fk, fake_core(1, voters, n_voters, 50), &o);
    exec_attach(n->e, n->fk.d);
}

static void stop(struct node *n)
{
    exec_fail_all(n->e, "the test ends");
    fake_free(&n->fk);
    exec_free(n->e);
    status_free(n->st);
    pthread_mutex_destroy(&n->mu);
}

/* wait_leader waits until node 1 leads and its term's first entry (the
 * no-op, index 1) is in the store and committed: the role shows before
 * that entry's append, so a store failure planned right after the role
 * would fail that append instead of the test's first write. */
static void wait_leader(struct node *n)
{
    EXT_WAIT(status_role(n->st) == RAFT_LEADER, "role %d", status_role(n->st));
    FAKE_WAIT(&n->fk, n->fk.obs.commit >= 1);
}

/* queued returns the submission queue's length, waiting the callers
 * waiting. */
static unsigned queued(struct node *n)
{
    unsigned q, w;
    exec_counts(n->e, &q, &w);
    return q;
}

static unsigned waiting(struct node *n)
{
    unsigned q, w;
    exec_counts(n->e, &q, &w);
    return w;
}

static unsigned n_committed(struct node *n)
{
    unsigned k;
    pthread_mutex_lock(&n->mu);
    k = n->n_ids;
    pthread_mutex_unlock(&n->mu);
    return k;
}

/* committed returns the id and index of the @i-th committed request. */
static raft_index committed(struct node *n, unsigned i, uint64_t id[2])
{
    raft_index index;
    pthread_mutex_lock(&n->mu);
    assert_true(i < n->n_ids);
    id[0] = n->ids[i][0];
    id[1] = n->ids[i][1];
    index = n->index[i];
    pthread_mutex_unlock(&n->mu);
    return index;
}

/* One caller of exec_submit on a thread of its own. */
struct call {
    struct node *n;
    const char *sql;
    const char *client_id; /* a request id, or NULL */
    const struct ext_exec_probe *probe;
    int rc;
    struct ext_exec_result r;
    pthread_t th;
};

static void *call_main(void *arg)
{
    struct call *c = arg;
    struct ext_exec_opts opts = {
        .request_id = c->client_id,
        .request_id_len = c->client_id ? strlen(c->client_id) : 0,
    };
    c->rc = exec_submit(c->n->e, c->sql, strlen(c->sql), NULL, 0, &opts,
                        c->probe, &c->r);
    return NULL;
}

static void call_start(struct call *c, struct node *n, const char *sql)
{
    c->n = n;
    c->sql = sql;
    assert_int_equal(pthread_create(&c->th, NULL, call_main, c), 0);
}

static void call_join(struct call *c)
{
    assert_int_equal(pthread_join(c->th, NULL), 0);
}

/* submit runs one write on this thread and returns exec_submit's code. */
static int submit(struct node *n, const char *sql, const char *client_id,
                  size_t client_id_len, struct ext_exec_result *r)
{
    struct ext_exec_opts opts = {.request_id = client_id,
                                 .request_id_len = client_id_len};
    return exec_submit(n->e, sql, strlen(sql), NULL, 0, &opts, NULL, r);
}

static void has(const char *text, const char *words)
{
    if (strstr(text, words) == NULL) {
        fail_msg("'%s' does not say '%s'", text, words);
    }
}

/* A request id of no or too many bytes and a request over
 * max_request_bytes are refused before anything is queued, as not
 * applied, with the code and the words of the limit. */
static void test_refused_malformed(void **state)
{
    struct node n;
    struct ext_exec_result r;
    char big[5000];
    char id[EXT_REQUEST_ID_MAX + 1];
    (void)state;

    start(&n, 1, 2000);
    assert_int_equal(submit(&n, "SELECT 1", "", 0, &r), RAFT_INVALID);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_INVALID);
    assert_string_equal(r.errmsg,
                        "raft_exec: not applied: the request id "
                        "must be 1 to 256 bytes, not 0");
    memset(id, 'a', sizeof id);
    assert_int_equal(submit(&n, "SELECT 1", id, sizeof id, &r), RAFT_INVALID);
    assert_int_equal(r.sqlite_rc, RAFTSQL_INVALID);
    has(r.errmsg, "must be 1 to 256 bytes, not 257");

    memset(big, ' ', sizeof big - 1);
    memcpy(big, "SELECT 1", 8);
    big[sizeof big - 1] = '\0';
    assert_int_equal(submit(&n, big, NULL, 0, &r), RAFT_TOOBIG);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_TOOBIG);
    has(r.errmsg, "raft_exec: not applied: request of ");
    has(r.errmsg, "bytes exceeds max_request_bytes (4096)");
    assert_int_equal(waiting(&n), 0);
    assert_int_equal(queued(&n), 0);
    stop(&n);
}

/* A node that stops refuses new callers at once; a plain request is
 * not applied, one with a client id of outcome unknown (an earlier try
 * under that id may have applied). */
static void test_refused_shutdown(void **state)
{
    struct node n;
    struct ext_exec_result r;
    (void)state;

    start(&n, 1, 2000);
    exec_fail_all(n.e, "stopping");
    assert_int_equal(submit(&n, "SELECT 1", NULL, 0, &r), RAFT_SHUTDOWN);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_NOT_APPLIED);
    assert_string_equal(r.errmsg,
                        "raft_exec: not applied: the node is shutting down");
    assert_int_equal(submit(&n, "SELECT 1", "k1", 2, &r), RAFT_SHUTDOWN);
    assert_int_equal(r.kind, EXT_EXEC_UNKNOWN);
    assert_int_equal(r.sqlite_rc, RAFTSQL_UNKNOWN);
    has(r.errmsg,
        "raft_exec: outcome unknown: the node is shutting down; "
        "this request was not sent, but one sent earlier under "
        "the same request id may have applied");
    assert_int_equal(waiting(&n), 0);
    stop(&n);
}

/* A log refusing writes for lack of room for an election timeout (the
 * node stopped leading) refuses writes at once, as full: "the log is
 * full" naming log_max_mb, or "disk full" when the filesystem is. */
static void test_refused_log_full(void **state)
{
    struct node n;
    struct call first = {0};
    struct ext_exec_result r;
    char why[256];
    (void)state;

    start(&n, 1, 60000);
    wait_leader(&n);
    fake_fail(&n.fk, FAKE_APPEND, RAFT_NOSPACE, UINT_MAX);
    fake_fail_text(&n.fk, FAKE_APPEND, "append: log full: MDB_MAP_FULL");
    /* A write the log refuses, retried until the node stops. */
    call_start(&first, &n, "INSERT INTO t VALUES (1)");
    EXT_WAIT(status_log_full(n.st, why, sizeof why), "'%s'", why);
    assert_string_equal(why, "append: log full: MDB_MAP_FULL");
    assert_int_equal(submit(&n, "SELECT 2", NULL, 0, &r), RAFT_NOSPACE);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_FULL);
    assert_string_equal(r.errmsg,
                        "raft_exec: not applied: the log is full "
                        "(log_max_mb=16); writes resume once compaction "
                        "frees space, or raise log_max_mb and restart the "
                        "node");
    assert_int_equal(waiting(&n), 1);

    fake_fail_text(&n.fk, FAKE_APPEND, "append: disk full: ENOSPC");
    EXT_WAIT(status_log_full(n.st, why, sizeof why) &&
                 strstr(why, "disk full") != NULL,
             "'%s'", why);
    assert_int_equal(submit(&n, "SELECT 3", NULL, 0, &r), RAFT_NOSPACE);
    assert_int_equal(r.sqlite_rc, RAFTSQL_FULL);
    has(r.errmsg,
        "raft_exec: not applied: disk full: the log's filesystem "
        "has no room");
    exec_fail_all(n.e, "the node stops");
    call_join(&first);
    assert_int_equal(first.r.kind, EXT_EXEC_UNKNOWN);
    fake_fail(&n.fk, FAKE_APPEND, 0, 0);
    stop(&n);
}

/* A full submission queue (the loop took none of EXT_SUBMIT_QUEUE_MAX
 * requests) answers "busy" at once; the queued callers, never seen by
 * the loop, are not applied when the node stops. */
static void test_refused_queue_full(void **state)
{
    struct node n;
    struct ext_exec_result r;
    struct call *calls;
    pthread_attr_t attr;
    (void)state;

#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer takes minutes to start this many threads. */
    skip();
#endif
    calls = calloc(EXT_SUBMIT_QUEUE_MAX, sizeof *calls);

    assert_non_null(calls);
    start(&n, 1, 60000);
    __atomic_store_n(&n.hold_wake, true, __ATOMIC_SEQ_CST);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (unsigned i = 0; i < EXT_SUBMIT_QUEUE_MAX; i++) {
        calls[i].n = &n;
        calls[i].sql = "SELECT 1";
        assert_int_equal(
            pthread_create(&calls[i].th, &attr, call_main, &calls[i]), 0);
    }
    pthread_attr_destroy(&attr);
    EXT_WAIT(queued(&n) == EXT_SUBMIT_QUEUE_MAX, "%u queued", queued(&n));
    assert_int_equal(submit(&n, "SELECT 2", NULL, 0, &r), RAFT_BUSY);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_BUSY);
    assert_string_equal(r.errmsg,
                        "raft_exec: not applied: busy, 4096 writes already "
                        "queued on this node; retry later");
    exec_fail_all(n.e, "the node stops");
    for (unsigned i = 0; i < EXT_SUBMIT_QUEUE_MAX; i++) {
        call_join(&calls[i]);
        assert_int_equal(calls[i].r.kind, EXT_EXEC_NOT_APPLIED);
        assert_int_equal(calls[i].r.sqlite_rc, RAFTSQL_NOT_APPLIED);
    }
    assert_string_equal(calls[0].r.errmsg,
                        "raft_exec: not applied: the node stops");
    assert_int_equal(waiting(&n), 0);
    free(calls);
    stop(&n);
}

/* Waiting callers failed by exec_fail_all: one whose request was
 * proposed learns "outcome unknown", one whose request never left the
 * node "not applied" (with a client id: outcome unknown, as it cannot
 * tell about an earlier try). exec_fail_waiting answers the same and
 * still takes later callers; exec_fail_all takes none. */
static void test_fail_sent_and_unsent(void **state)
{
    struct node n;
    struct call sent = {0}, unsent = {0}, keyed = {0}, later = {0};
    struct ext_exec_result r;
    (void)state;

    start(&n, 1, 60000);
    wait_leader(&n);
    call_start(&sent, &n, "INSERT INTO t VALUES (1)");
    EXT_WAIT(n_committed(&n) == 1, "%u committed", n_committed(&n));
    __atomic_store_n(&n.hold_wake, true, __ATOMIC_SEQ_CST);
    call_start(&unsent, &n, "INSERT INTO t VALUES (2)");
    EXT_WAIT(queued(&n) == 1, "%u queued", queued(&n));
    keyed.client_id = "key-1";
    call_start(&keyed, &n, "INSERT INTO t VALUES (3)");
    EXT_WAIT(queued(&n) == 2, "%u queued", queued(&n));

    exec_fail_waiting(n.e, "diverged replica");
    call_join(&sent);
    call_join(&unsent);
    call_join(&keyed);
    assert_int_equal(sent.rc, RAFT_UNKNOWN);
    assert_int_equal(sent.r.kind, EXT_EXEC_UNKNOWN);
    assert_int_equal(sent.r.sqlite_rc, RAFTSQL_UNKNOWN);
    assert_string_equal(sent.r.errmsg,
                        "raft_exec: outcome unknown: diverged replica; the "
                        "write will be applied on all nodes or on none");
    assert_int_equal(unsent.rc, RAFT_TIMEOUT);
    assert_int_equal(unsent.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(unsent.r.sqlite_rc, RAFTSQL_NOT_APPLIED);
    assert_string_equal(unsent.r.errmsg,
                        "raft_exec: not applied: diverged replica");
    assert_int_equal(keyed.rc, RAFT_UNKNOWN);
    assert_int_equal(keyed.r.sqlite_rc, RAFTSQL_UNKNOWN);
    has(keyed.r.errmsg,
        "raft_exec: outcome unknown: diverged replica; this "
        "request was not sent");
    assert_int_equal(waiting(&n), 0);

    /* Later callers are still taken, until exec_fail_all. */
    call_start(&later, &n, "INSERT INTO t VALUES (4)");
    EXT_WAIT(waiting(&n) == 1, "%u waiting", waiting(&n));
    exec_fail_all(n.e, "the node stops");
    call_join(&later);
    assert_int_equal(later.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_string_equal(later.r.errmsg,
                        "raft_exec: not applied: the node stops");
    assert_int_equal(submit(&n, "SELECT 1", NULL, 0, &r), RAFT_SHUTDOWN);
    stop(&n);
}

/* entry returns an applied request entry at @index (its bytes are not
 * read by exec_applied). */
static struct sql_fsm_entry entry(raft_index index)
{
    struct sql_fsm_entry e = {.index = index,
                              .term = 1,
                              .data = "x",
                              .len = 1,
                              .kind = SQL_ENTRY_REQUEST};
    return e;
}

/* Each waiter gets the result of its own request id, whatever the order
 * of the batch: rows changed and rowid, SQLite's error, the policy's
 * refusal, a duplicate's outcome unknown; results of another node's ids
 * are ignored. */
static void test_applied_by_request_id(void **state)
{
    struct node n;
    struct call c[4] = {{0}};
    uint64_t id[4][2];
    raft_index index[4];
    struct sql_fsm_entry e[5];
    struct sql_result res[5];
    char constraint[] = "UNIQUE constraint failed: t.x";
    char refused[] = "raft_exec refuses TEMP objects";
    (void)state;

    start(&n, 1, 60000);
    wait_leader(&n);
    for (unsigned i = 0; i < 4; i++) {
        call_start(&c[i], &n, "INSERT INTO t VALUES (1)");
        EXT_WAIT(n_committed(&n) == i + 1, "%u committed", n_committed(&n));
        index[i] = committed(&n, i, id[i]);
        assert_int_equal(id[i][0], 1);
    }
    memset(res, 0, sizeof res);
    /* In reverse order, with another node's id (its caller is there). */
    for (unsigned i = 0; i < 4; i++) {
        e[i] = entry(index[3 - i]);
        res[i].id[0] = id[3 - i][0];
        res[i].id[1] = id[3 - i][1];
    }
    e[4] = entry(index[3] + 1);
    res[4].id[0] = 2;
    res[4].id[1] = id[0][1];
    res[4].rc = SQLITE_ERROR;
    res[3].changes = 3; /* c[0] */
    res[3].last_insert_rowid = 42;
    res[2].rc = SQLITE_CONSTRAINT; /* c[1] */
    res[2].errmsg = constraint;
    res[2].err_at = 5;
    res[1].rc = SQLITE_AUTH; /* c[2] */
    res[1].errmsg = refused;
    res[0].duplicate = 1; /* c[3] */
    exec_applied(n.e, e, res, 5, index[3] + 1);
    for (unsigned i = 0; i < 4; i++) {
        call_join(&c[i]);
    }
    assert_int_equal(c[0].rc, 0);
    assert_int_equal(c[0].r.kind, EXT_EXEC_OK);
    assert_int_equal(c[0].r.sqlite_rc, SQLITE_OK);
    assert_int_equal(c[0].r.changes, 3);
    assert_int_equal(c[0].r.last_insert_rowid, 42);
    assert_int_equal(c[1].rc, RAFT_INVALID);
    assert_int_equal(c[1].r.kind, EXT_EXEC_SQL_ERROR);
    assert_int_equal(c[1].r.sqlite_rc, SQLITE_CONSTRAINT);
    assert_string_equal(c[1].r.errmsg, constraint);
    assert_int_equal(c[1].r.err_at, 5);
    assert_int_equal(c[2].r.kind, EXT_EXEC_SQL_ERROR);
    assert_int_equal(c[2].r.sqlite_rc, RAFTSQL_REFUSED);
    assert_string_equal(c[2].r.errmsg,
                        "raft_exec: not applied: raft_exec refuses TEMP "
                        "objects");
    assert_int_equal(c[3].rc, RAFT_UNKNOWN);
    assert_int_equal(c[3].r.sqlite_rc, RAFTSQL_UNKNOWN);
    assert_string_equal(c[3].r.errmsg,
                        "raft_exec: outcome unknown: the request was applied "
                        "earlier under the same id");
    assert_int_equal(waiting(&n), 0);
    stop(&n);
}

/* A waiter whose index was applied with another request (a new leader
 * overwrote its entry) is proposed again under the same request id, and
 * answered when that id is applied. */
static void test_replaced_entry_retried(void **state)
{
    struct node n;
    struct call c = {0};
    uint64_t id[2], again[2];
    raft_index index, index2;
    struct sql_fsm_entry e[1];
    struct sql_result res[1];
    (void)state;

    start(&n, 1, 60000);
    wait_leader(&n);
    call_start(&c, &n, "INSERT INTO t VALUES (1)");
    EXT_WAIT(n_committed(&n) == 1, "%u committed", n_committed(&n));
    index = committed(&n, 0, id);
    memset(res, 0, sizeof res);
    e[0] = entry(index);
    res[0].id[0] = 3; /* another server's request took its index */
    res[0].id[1] = 1;
    exec_applied(n.e, e, res, 1, index);
    EXT_WAIT(n_committed(&n) == 2, "%u committed", n_committed(&n));
    index2 = committed(&n, 1, again);
    assert_true(index2 > index);
    assert_int_equal(again[0], id[0]);
    assert_int_equal(again[1], id[1]);
    assert_int_equal(waiting(&n), 1);

    e[0] = entry(index2);
    res[0].id[0] = id[0];
    res[0].id[1] = id[1];
    res[0].changes = 1;
    exec_applied(n.e, e, res, 1, index2);
    call_join(&c);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.r.changes, 1);
    stop(&n);
}

/* Without a leader, a request never leaves the node: at the deadline it
 * is not applied, saying so; an interrupted caller learns the same,
 * as interrupted. */
static bool interrupted(void *data)
{
    return __atomic_load_n((bool *)data, __ATOMIC_SEQ_CST);
}

static void test_no_leader(void **state)
{
    struct node n;
    struct ext_exec_result r;
    struct call c = {0};
    bool stop_it = false;
    struct ext_exec_probe probe = {.interrupted = interrupted,
                                   .data = &stop_it};
    (void)state;

    start(&n, 2, 200);
    assert_int_equal(submit(&n, "INSERT INTO t VALUES (1)", NULL, 0, &r),
                     RAFT_TIMEOUT);
    assert_int_equal(r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(r.sqlite_rc, RAFTSQL_NOT_APPLIED);
    assert_string_equal(r.errmsg,
                        "raft_exec: not applied: no leader reachable within "
                        "exec_timeout_ms (200 ms)");
    assert_int_equal(submit(&n, "INSERT INTO t VALUES (1)", "k", 1, &r),
                     RAFT_UNKNOWN);
    assert_int_equal(r.sqlite_rc, RAFTSQL_UNKNOWN);
    has(r.errmsg,
        "outcome unknown: no leader reachable within "
        "exec_timeout_ms (200 ms); this request was not sent");
    stop(&n);

    start(&n, 2, 60000);
    c.probe = &probe;
    call_start(&c, &n, "INSERT INTO t VALUES (1)");
    EXT_WAIT(waiting(&n) == 1, "%u waiting", waiting(&n));
    __atomic_store_n(&stop_it, true, __ATOMIC_SEQ_CST);
    call_join(&c);
    assert_int_equal(c.rc, RAFT_CANCELED);
    assert_int_equal(c.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(c.r.sqlite_rc, RAFTSQL_INTERRUPTED);
    assert_string_equal(c.r.errmsg,
                        "raft_exec: interrupted: not applied: the request "
                        "had not left this node");
    stop(&n);
}

/* What exec_set_removed does on the loop thread. */
struct removal {
    struct node *n;
    bool removed;
    raft_index conf_index;
};

static void set_removed(struct fake *f, void *arg)
{
    struct removal *m = arg;
    (void)f;
    exec_set_removed(m->n->e, m->removed, m->conf_index);
}

static void removed(struct node *n, bool is, raft_index conf_index)
{
    struct removal m = {.n = n, .removed = is, .conf_index = conf_index};
    fake_on_loop(&n->fk, set_removed, &m);
}

/* A removed node refuses writes at once (RAFTSQL_REMOVED) and fails its
 * waiters: never sent, as refused; sent, of outcome unknown; but one
 * whose entry lies before the removal's waits for its result. Added
 * again, it takes writes. */
static void test_removed(void **state)
{
    struct node n;
    struct call before = {0}, after = {0}, unsent = {0};
    struct ext_exec_result r;
    uint64_t id[2];
    raft_index index;
    struct sql_fsm_entry e[1];
    struct sql_result res[1];
    char text[512];
    (void)state;

    start(&n, 1, 60000);
    wait_leader(&n);
    call_start(&before, &n, "INSERT INTO t VALUES (1)");
    EXT_WAIT(n_committed(&n) == 1, "%u committed", n_committed(&n));
    index = committed(&n, 0, id);
    __atomic_store_n(&n.hold_wake, true, __ATOMIC_SEQ_CST);
    call_start(&unsent, &n, "INSERT INTO t VALUES (2)");
    EXT_WAIT(queued(&n) == 1, "%u queued", queued(&n));

    removed(&n, true, index + 1);
    call_join(&unsent);
    assert_int_equal(unsent.rc, RAFT_TIMEOUT);
    assert_int_equal(unsent.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_int_equal(unsent.r.sqlite_rc, RAFTSQL_REMOVED);
    snprintf(text, sizeof text,
             "raft_exec: not applied: this node was removed from the "
             "cluster (configuration entry %llu committed) and takes no "
             "writes: write on a member",
             (unsigned long long)index + 1);
    assert_string_equal(unsent.r.errmsg, text);
    assert_int_equal(submit(&n, "SELECT 1", NULL, 0, &r), RAFT_NOTFOUND);
    assert_int_equal(r.sqlite_rc, RAFTSQL_REMOVED);
    assert_string_equal(r.errmsg, text);
    assert_int_equal(submit(&n, "SELECT 1", "k", 1, &r), RAFT_NOTFOUND);
    assert_int_equal(r.sqlite_rc, RAFTSQL_UNKNOWN);
    /* The entry before the removal's still gets its result. */
    assert_int_equal(waiting(&n), 1);
    memset(res, 0, sizeof res);
    e[0] = entry(index);
    res[0].id[0] = id[0];
    res[0].id[1] = id[1];
    res[0].changes = 1;
    exec_applied(n.e, e, res, 1, index);
    call_join(&before);
    assert_int_equal(before.rc, 0);
    assert_int_equal(before.r.changes, 1);

    /* Added again: taken; removed at its own index: outcome unknown. */
    removed(&n, false, 0);
    __atomic_store_n(&n.hold_wake, false, __ATOMIC_SEQ_CST);
    call_start(&after, &n, "INSERT INTO t VALUES (3)");
    EXT_WAIT(n_committed(&n) == 2, "%u committed", n_committed(&n));
    index = committed(&n, 1, id);
    removed(&n, true, index);
    call_join(&after);
    assert_int_equal(after.rc, RAFT_UNKNOWN);
    assert_int_equal(after.r.sqlite_rc, RAFTSQL_UNKNOWN);
    has(after.r.errmsg,
        "raft_exec: outcome unknown: this node was removed "
        "from the cluster");
    has(after.r.errmsg, "after the request left it");
    stop(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_malformed),
        cmocka_unit_test(test_refused_shutdown),
        cmocka_unit_test(test_refused_log_full),
        cmocka_unit_test(test_refused_queue_full),
        cmocka_unit_test(test_fail_sent_and_unsent),
        cmocka_unit_test(test_applied_by_request_id),
        cmocka_unit_test(test_replaced_entry_retried),
        cmocka_unit_test(test_no_leader),
        cmocka_unit_test(test_removed),
    };
    return cmocka_run_group_tests_name("ext_exec", tests, NULL, NULL);
}
