/* Tests of the write lease (ext/runtime/lease.h) through node.h's three
 * calls, on real three-node clusters on 127.0.0.1 in this process: one
 * holder at a time, a follower's refusal, raft_exec held back behind a
 * lease (and "not applied" when its deadline passes there), a changeset
 * committed under a lease and applied on every node with equal
 * checksums, and an expired lease whose commit is refused. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ext/runtime/change_codec.h"
#include "ext/runtime/lease_core.h"
#include "ext/runtime/node.h"
#include "sql/changeset.h"
#include "tests/ext/helpers.h"

/* A cluster of three nodes. */
struct cluster {
    struct tmpdb db[3];
    struct ext_node *n[3];
};

/* start starts three nodes with the extra keys @more. */
static void start(struct cluster *c, const char *more)
{
    int port[3];
    char members[256];
    for (int i = 0; i < 3; i++) {
        struct tmpdb t;
        port[i] = ext_free_port();
        tmpdb_init(&t);
        c->db[i] = t;
    }
    snprintf(members, sizeof members,
             "1@127.0.0.1:%d,2@127.0.0.1:%d,3@127.0.0.1:%d", port[0], port[1],
             port[2]);
    for (int i = 0; i < 3; i++) {
        struct ext_config cfg;
        char text[1024], msg[512] = "";
        snprintf(text, sizeof text,
                 "id=%d listen=127.0.0.1:%d cluster=%s "
                 "election_timeout_ms=300 heartbeat_ms=20 log_level=error %s",
                 i + 1, port[i], members, more);
        if (ext_config_parse(text, c->db[i].path, &cfg, msg, sizeof msg) != 0) {
            fail_msg("ext_config_parse '%s': %s", text, msg);
        }
        if (ext_node_start(c->db[i].path, &cfg, &c->n[i], msg, sizeof msg) !=
            0) {
            fail_msg("ext_node_start: %s", msg);
        }
    }
}

static void stop(struct cluster *c)
{
    for (int i = 0; i < 3; i++) {
        char cmd[256];
        ext_node_shutdown(c->n[i]);
        ext_node_stop(c->n[i]);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->db[i].dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* leader_of returns the node that leads, -1 while none does. */
static int leader_of(struct cluster *c)
{
    for (int i = 0; i < 3; i++) {
        if (ext_node_leader(c->n[i]) == ext_node_id(c->n[i])) {
            return i;
        }
    }
    return -1;
}

/* acquire takes the lease for @holder on @n, retried while the leader
 * does not know its members' wire versions yet (just elected). */
static uint64_t acquire(struct ext_node *n, uint64_t holder)
{
    char why[256] = "";
    uint64_t id = 0;
    int rc;
    for (int k = 0;; k++) {
        rc = ext_node_lease_acquire(n, holder, 0, &id, why, sizeof why);
        if (rc != RAFT_FORMAT || k == EXT_WAIT_MS) {
            break;
        }
        usleep(1000);
    }
    if (rc != 0) {
        fail_msg("acquire: %d %s", rc, why);
    }
    return id;
}

static void exec_ok(struct ext_node *n, const char *sql)
{
    struct ext_exec_result r;
    int rc = ext_node_exec(n, sql, strlen(sql), NULL, 0, NULL, NULL, &r);
    if (rc != 0) {
        fail_msg("exec %s: %d %s", sql, rc, r.errmsg);
    }
    ext_exec_result_clear(&r);
}

/* count_rows returns count(*) of table t in @path, -1 on error. */
static int count_rows(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* has_in_status says whether @n's raft_status() holds @text. */
static bool has_in_status(struct ext_node *n, const char *text)
{
    char *s = ext_node_status(n);
    bool has = s != NULL && strstr(s, text) != NULL;
    free(s);
    return has;
}

/* with_table waits for @c's leader, creates table t through it and
 * returns the leader's index. */
static int with_table(struct cluster *c)
{
    int l;
    EXT_WAIT((l = leader_of(c)) >= 0, "no leader");
    exec_ok(c->n[l], "CREATE TABLE t(k INTEGER PRIMARY KEY, v)");
    return l;
}

/* A raft_exec (@sql set) or a membership change (@q) on another
 * thread. */
struct call {
    pthread_t t;
    struct ext_node *n;
    const char *sql;
    int rc;
    struct ext_exec_result r;
    struct ext_change_request q;
    struct ext_change_result cr;
    bool done;
    pthread_mutex_t mu;
};

static void *call_main(void *arg)
{
    struct call *k = arg;
    struct ext_change_result cr;
    int rc = k->sql != NULL ? ext_node_exec(k->n, k->sql, strlen(k->sql), NULL,
                                            0, NULL, NULL, &k->r)
                            : ext_node_change(k->n, &k->q, NULL, &cr);
    pthread_mutex_lock(&k->mu);
    k->rc = rc;
    if (k->sql == NULL) {
        k->cr = cr;
    }
    k->done = true;
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void call_start(struct call *k, struct ext_node *n, const char *sql)
{
    memset(k, 0, sizeof *k);
    k->n = n;
    k->sql = sql;
    pthread_mutex_init(&k->mu, NULL);
    assert_int_equal(pthread_create(&k->t, NULL, call_main, k), 0);
}

/* change_start adds server @id (a learner nobody runs: it commits with
 * the voters alone) through @n on another thread. */
static void change_start(struct call *k, struct ext_node *n, raft_id id)
{
    memset(k, 0, sizeof *k);
    k->n = n;
    k->q.op = EXT_CHANGE_ADD;
    k->q.manual = true;
    k->q.id = id;
    snprintf(k->q.address, sizeof k->q.address, "127.0.0.1:%d",
             ext_free_port());
    pthread_mutex_init(&k->mu, NULL);
    assert_int_equal(pthread_create(&k->t, NULL, call_main, k), 0);
}

static bool call_done(struct call *k)
{
    bool d;
    pthread_mutex_lock(&k->mu);
    d = k->done;
    pthread_mutex_unlock(&k->mu);
    return d;
}

static void call_join(struct call *k)
{
    pthread_join(k->t, NULL);
    pthread_mutex_destroy(&k->mu);
}

/* One holder at a time: a second gets RAFT_BUSY naming the first until
 * the first releases; ids increase; raft_status shows the lease; a
 * commit under a released lease is not applied; a follower's holder
 * takes the lease from the leader, in turn with the leader's own. */
static void test_one_holder(void **state)
{
    struct cluster c;
    char why[256] = "", want[64];
    uint64_t id1, id2, id = 0;
    int l, f;
    (void)state;

    start(&c, "");
    EXT_WAIT((l = leader_of(&c)) >= 0, "no leader");
    f = (l + 1) % 3;
    id1 = acquire(c.n[l], 11);
    assert_int_equal(
        ext_node_lease_acquire(c.n[l], 12, 0, &id, why, sizeof why), RAFT_BUSY);
    assert_non_null(strstr(why, "held by connection 11"));
    snprintf(want, sizeof want, "\"holder\":11");
    assert_true(has_in_status(c.n[l], "\"lease\":{") &&
                has_in_status(c.n[l], want));
    ext_node_lease_release(c.n[l], id1, NULL);
    ext_node_lease_release(c.n[l], id1, NULL); /* idempotent */
    assert_true(has_in_status(c.n[l], "\"lease\":null"));
    id2 = acquire(c.n[l], 12);
    assert_true(id2 > id1);
    ext_node_lease_release(c.n[l], id2, NULL);
    assert_int_equal(ext_node_lease_commit(c.n[l], id2, "CS", 2, NULL, NULL,
                                           why, sizeof why),
                     RAFT_INVALID);
    /* A follower's holder asks the leader: busy while another holds it,
     * naming the server; the leader's own holders meet the follower's
     * lease the same way; its release frees it at the leader. */
    id1 = acquire(c.n[l], 14);
    assert_int_equal(
        ext_node_lease_acquire(c.n[f], 13, 0, &id, why, sizeof why), RAFT_BUSY);
    snprintf(want, sizeof want, "held by a connection of server %d", l + 1);
    assert_non_null(strstr(why, want));
    ext_node_lease_release(c.n[l], id1, NULL);
    id2 = acquire(c.n[f], 13);
    assert_true(id2 > id1);
    snprintf(want, sizeof want, "\"server\":%d", f + 1);
    assert_true(has_in_status(c.n[l], want));
    assert_int_equal(
        ext_node_lease_acquire(c.n[l], 15, 0, &id, why, sizeof why), RAFT_BUSY);
    snprintf(want, sizeof want, "held by a connection of server %d", f + 1);
    assert_non_null(strstr(why, want));
    ext_node_lease_release(c.n[f], id2, NULL);
    EXT_WAIT(has_in_status(c.n[l], "\"lease\":null"),
             "the follower's release did not reach the leader");
    ext_node_lease_release(c.n[l], acquire(c.n[l], 16), NULL);
    stop(&c);
}

static void assert_replicas_equal(struct cluster *c, int rows);

/* A raft_exec submitted while a lease is out applies only after the
 * lease ends; one whose exec_timeout_ms passes behind the lease ends
 * "not applied", never "outcome unknown", on the leader and forwarded
 * from a follower. */
static void test_exec_behind_lease(void **state)
{
    struct cluster c;
    struct call k;
    uint64_t id;
    int l, f;
    (void)state;

    start(&c, "exec_timeout_ms=1500");
    l = with_table(&c);
    id = acquire(c.n[l], 21);
    call_start(&k, c.n[l], "INSERT INTO t VALUES (1, 'a')");
    EXT_WAIT(has_in_status(c.n[l], "\"waiting\":1"), "no waiting caller");
    assert_false(call_done(&k));
    assert_int_equal(count_rows(c.db[l].path), 0);
    ext_node_lease_release(c.n[l], id, NULL);
    call_join(&k);
    assert_int_equal(k.rc, 0);
    assert_int_equal(count_rows(c.db[l].path), 1);
    ext_exec_result_clear(&k.r);

    id = acquire(c.n[l], 22);
    call_start(&k, c.n[l], "INSERT INTO t VALUES (2, 'b')");
    call_join(&k); /* its exec_timeout_ms passes behind the lease */
    assert_int_equal(k.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_non_null(strstr(k.r.errmsg, "not applied"));
    assert_non_null(strstr(k.r.errmsg, "write lease"));
    ext_exec_result_clear(&k.r);
    ext_node_lease_release(c.n[l], id, NULL);
    exec_ok(c.n[l], "INSERT INTO t VALUES (3, 'c')");
    assert_int_equal(count_rows(c.db[l].path), 2);

    /* Forwarded from a follower: the leader refuses it while the lease
     * holds (its follower sends it again), so its deadline finds it not
     * applied too, never "outcome unknown"; and it goes once the lease
     * ended. */
    f = (l + 1) % 3;
    id = acquire(c.n[l], 23);
    call_start(&k, c.n[f], "INSERT INTO t VALUES (4, 'd')");
    call_join(&k);
    assert_int_equal(k.r.kind, EXT_EXEC_NOT_APPLIED);
    assert_non_null(strstr(k.r.errmsg, "not applied"));
    assert_non_null(strstr(k.r.errmsg, "write lease"));
    ext_exec_result_clear(&k.r);
    call_start(&k, c.n[f], "INSERT INTO t VALUES (5, 'e')");
    EXT_WAIT(has_in_status(c.n[f], "\"waiters\":1"), "no waiting caller");
    ext_node_lease_release(c.n[l], id, NULL);
    call_join(&k);
    assert_int_equal(k.rc, 0);
    ext_exec_result_clear(&k.r);
    assert_replicas_equal(&c, 3);
    stop(&c);
}

/* The capture of one transaction on a scratch file whose table t is the
 * cluster's: its changeset, taken in the commit hook as the guard's. */
struct scratch {
    struct sql_capture *cap;
    void *p;
    size_t len;
    uint64_t lease;
};

static int on_commit(void *data)
{
    struct scratch *s = data;
    uint64_t rid[2] = {1, 99};
    char msg[256];
    if (sql_capture_take(s->cap, rid, s->lease, &s->p, &s->len, msg,
                         sizeof msg) != 0) {
        fail_msg("sql_capture_take: %s", msg);
    }
    return 1; /* vetoed: the scratch file stays as it was */
}

/* changeset returns the changeset of @sql (malloc'd, *@len bytes) run on
 * a scratch file holding table t, under lease @lease. */
static void *changeset(const char *sql, uint64_t lease, size_t *len)
{
    struct tmpdb t;
    struct scratch s = {.lease = lease};
    sqlite3 *db;
    char msg[256] = "";
    char cmd[160];

    tmpdb_init(&t);
    assert_int_equal(sqlite3_open(t.path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v)", NULL, NULL,
                     NULL),
        SQLITE_OK);
    if (sql_capture_open(db, 1u << 20, &s.cap, msg, sizeof msg) != 0) {
        fail_msg("sql_capture_open: %s", msg);
    }
    sqlite3_commit_hook(db, on_commit, &s);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL) & 0xff,
                     SQLITE_CONSTRAINT);
    sql_capture_close(s.cap, 0);
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t.dir);
    assert_int_equal(system(cmd), 0);
    assert_non_null(s.p);
    *len = s.len;
    return s.p;
}

/* verify checks @path's file against the replica checksum it stores,
 * failing the test when its rows differ from it, and returns that
 * checksum, at the applied index the file stores (*@index). */
static uint64_t verify(const char *path, uint64_t *index)
{
    struct sql_verify v;
    char msg[256] = "";
    uint64_t sum;
    memset(&v, 0, sizeof v);
    if (sql_checksum_verify(path, &v, msg, sizeof msg) != 0) {
        fail_msg("verify %s: %s", path, msg);
    }
    assert_int_equal(v.n_differ, 0);
    *index = v.index;
    sum = v.stored;
    sql_verify_clear(&v);
    return sum;
}

/* node_applied reads @n's applied index and running checksum (16 hex
 * digits into @sum, "" without one) from its raft_status(). */
static uint64_t node_applied(struct ext_node *n, char sum[17])
{
    char *st = ext_node_status(n);
    json_t *o = st != NULL ? json_loads(st, 0, NULL) : NULL;
    const char *v = o != NULL ? json_string_value(json_object_get(
                                    json_object_get(o, "checksum"), "value"))
                              : NULL;
    uint64_t applied =
        o != NULL ? (uint64_t)json_integer_value(json_object_get(o, "applied"))
                  : 0;

    snprintf(sum, 17, "%s", v != NULL ? v : "");
    json_decref(o);
    free(st);
    return applied;
}

/* same_applied says whether every node of @c applied the same index with
 * the same running checksum. */
static bool same_applied(struct cluster *c)
{
    char s0[17], s1[17], s2[17];
    uint64_t a0 = node_applied(c->n[0], s0), a1 = node_applied(c->n[1], s1),
             a2 = node_applied(c->n[2], s2);
    return a0 == a1 && a1 == a2 && strcmp(s0, s1) == 0 && strcmp(s1, s2) == 0 &&
           s0[0] != '\0';
}

/* assert_replicas_equal waits until every node of @c holds @rows rows
 * in t, applied the same index and holds the same running checksum there,
 * then checks each file against the checksum it stores (verify). */
static void assert_replicas_equal(struct cluster *c, int rows)
{
    uint64_t index;
    bool same = false;
    for (int i = 0; i < 3; i++) {
        EXT_WAIT(count_rows(c->db[i].path) == rows, "node %d: %d rows", i + 1,
                 count_rows(c->db[i].path));
    }
    /* Up to 60 s of wall time, polled every 10 ms: followers learn the
     * last commit index from the leader's next heartbeat, which a loaded
     * machine (three nodes under a sanitizer) may delay. Judged on the
     * reading that ended the wait: asked again, a term's first entry
     * applied meanwhile (an election on a loaded machine) could make it
     * differ for a while (it failed so in a loaded CI run, with no
     * status printed). */
    for (int k = 0; k < 6000 && !(same = same_applied(c)); k++) {
        usleep(10000);
    }
    if (!same) {
        for (int i = 0; i < 3; i++) {
            char *st = ext_node_status(c->n[i]);
            fprintf(stderr, "node %d: %.600s\n", i + 1,
                    st != NULL ? st : "(no status)");
            free(st);
        }
        fail_msg("applied indexes or checksums differ after 60 s");
    }
    for (int i = 0; i < 3; i++) {
        (void)verify(c->db[i].path, &index);
    }
}

/* A changeset committed under a lease is applied on every node (no host
 * commit happened: replayed on the leader too, once released), with equal
 * checksums; a raft_exec behind it applies after it. */
static void test_commit_applies_everywhere(void **state)
{
    struct cluster c;
    struct call k;
    char why[256] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    id = acquire(c.n[l], 31);
    p = changeset("INSERT INTO t VALUES (1, 'x'); ", id, &len);
    call_start(&k, c.n[l], "UPDATE t SET v = 'y' WHERE k = 1");
    EXT_WAIT(has_in_status(c.n[l], "\"waiting\":1"), "no waiting caller");
    if (ext_node_lease_commit(c.n[l], id, p, len, NULL, NULL, why,
                              sizeof why) != 0) {
        fail_msg("commit: %s", why);
    }
    free(p);
    /* Committed, but held from the leader's applier until released. */
    assert_int_equal(count_rows(c.db[l].path), 0);
    ext_node_lease_release(c.n[l], id, NULL);
    call_join(&k);
    assert_int_equal(k.rc, 0);
    assert_int_equal(k.r.changes, 1);
    ext_exec_result_clear(&k.r);
    assert_replicas_equal(&c, 1);
    stop(&c);
}

/* A follower's holder commits a changeset under its lease: the leader
 * appends it and answers once committed; every node applies it (the
 * follower once released), with equal checksums. */
static void test_follower_commit(void **state)
{
    struct cluster c;
    char why[256] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l, f;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[f], 51);
    /* Granted after this node applied the leader's last index: the
     * table is here. */
    assert_int_equal(count_rows(c.db[f].path), 0);
    p = changeset(
        "BEGIN; INSERT INTO t VALUES (1, 'x'); INSERT INTO t "
        "VALUES (2, 'y'); COMMIT",
        id, &len);
    if (ext_node_lease_commit(c.n[f], id, p, len, NULL, NULL, why,
                              sizeof why) != 0) {
        fail_msg("commit: %s", why);
    }
    free(p);
    assert_non_null(strstr(why, "committed at index"));
    /* Held from the follower's applier until released. */
    assert_int_equal(count_rows(c.db[f].path), 0);
    ext_node_lease_release(c.n[f], id, NULL);
    assert_int_equal(count_rows(c.db[f].path), 2); /* applied on return */
    assert_replicas_equal(&c, 2);
    /* The next writer, on the leader, goes at once. */
    ext_node_lease_release(c.n[l], acquire(c.n[l], 52), NULL);
    stop(&c);
}

/* A follower's lease that expired at the leader: its commit is refused
 * there, not applied, and nothing is appended. */
static void test_follower_expired(void **state)
{
    struct cluster c;
    char why[256] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l, f;
    (void)state;

    start(&c, "lease_timeout_ms=300");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[f], 61);
    p = changeset("INSERT INTO t VALUES (5, 'z')", id, &len);
    EXT_WAIT(has_in_status(c.n[l], "\"lease\":null"),
             "the lease did not expire at the leader");
    assert_int_not_equal(
        ext_node_lease_commit(c.n[f], id, p, len, NULL, NULL, why, sizeof why),
        0);
    assert_non_null(strstr(why, "not applied"));
    free(p);
    ext_node_lease_release(c.n[f], id, NULL);
    exec_ok(c.n[l], "INSERT INTO t VALUES (2, 'b')");
    assert_int_equal(count_rows(c.db[l].path), 1);
    stop(&c);
}

/* raft_lease_end: an operator ends the lease in force on the leader (a
 * follower's holder, stuck): its commit is then not applied, and the
 * next writer gets the lease at once; on a follower it names the
 * leader; with none in force it says so. */
static void test_operator_ends_lease(void **state)
{
    struct cluster c;
    char why[256] = "", msg[512] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l, f;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[f], 71);
    p = changeset("INSERT INTO t VALUES (7, 'x')", id, &len);
    assert_int_equal(ext_node_lease_end(c.n[f], NULL, msg, sizeof msg),
                     RAFT_NOTFOUND);
    assert_non_null(strstr(msg, "call raft_lease_end() there"));
    assert_int_equal(ext_node_lease_end(c.n[l], NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "ended: the write lease is held by"));
    assert_true(has_in_status(c.n[l], "\"lease\":null"));
    assert_int_not_equal(
        ext_node_lease_commit(c.n[f], id, p, len, NULL, NULL, why, sizeof why),
        0);
    assert_non_null(strstr(why, "not applied"));
    free(p);
    ext_node_lease_release(c.n[f], id, NULL);
    assert_int_equal(ext_node_lease_end(c.n[l], NULL, msg, sizeof msg),
                     RAFT_NOTFOUND);
    ext_node_lease_release(c.n[l], acquire(c.n[l], 72), NULL);
    assert_int_equal(count_rows(c.db[l].path), 0);
    stop(&c);
}

/* A lease older than lease_timeout_ms ends: the raft_exec calls waiting
 * behind it go, and its commit is refused, not applied. */
static void test_expired(void **state)
{
    struct cluster c;
    struct call k;
    char why[256] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l;
    (void)state;

    start(&c, "lease_timeout_ms=300");
    l = with_table(&c);
    id = acquire(c.n[l], 41);
    p = changeset("INSERT INTO t VALUES (5, 'z')", id, &len);
    call_start(&k, c.n[l], "INSERT INTO t VALUES (1, 'a')");
    call_join(&k); /* goes once the lease expired */
    assert_int_equal(k.rc, 0);
    ext_exec_result_clear(&k.r);
    assert_true(has_in_status(c.n[l], "\"lease\":null"));
    assert_int_equal(
        ext_node_lease_commit(c.n[l], id, p, len, NULL, NULL, why, sizeof why),
        RAFT_TIMEOUT);
    assert_non_null(strstr(why, "not applied"));
    assert_non_null(strstr(why, "expired"));
    free(p);
    ext_node_lease_release(c.n[l], id, NULL);
    exec_ok(c.n[l], "INSERT INTO t VALUES (2, 'b')");
    assert_int_equal(count_rows(c.db[l].path), 2);
    stop(&c);
}

/* A writer asking for the lease on another thread until granted (or
 * 200 answers), its grant kept. */
struct asker {
    pthread_t t;
    struct ext_node *n;
    uint64_t holder;
    uint64_t id;
    int rc;
    char why[256];
};

static void *asker_main(void *arg)
{
    struct asker *a = arg;

    for (int k = 0; k < 200; k++) {
        a->rc = ext_node_lease_acquire(a->n, a->holder, 0, &a->id, a->why,
                                       sizeof a->why);
        if (a->rc != RAFT_BUSY) {
            break;
        }
    }
    return NULL;
}

/* The leader's line (LEASE_CORE_TURN_MS): a follower's writer answered
 * busy while the leader's own holds the lease is in line, and
 * raft_status() on the leader shows it there (lease_line: its server,
 * how long it waited); a follower shows an empty line. The writer gets
 * the lease once the holder lets it go. */
static void test_lease_line(void **state)
{
    struct cluster c;
    struct asker a = {0};
    char want[64];
    uint64_t id;
    int l, f;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[l], 91);
    a.n = c.n[f];
    a.holder = 92;
    assert_int_equal(pthread_create(&a.t, NULL, asker_main, &a), 0);
    snprintf(want, sizeof want, "\"lease_line\":[{\"server\":%d,", f + 1);
    EXT_WAIT(has_in_status(c.n[l], want),
             "the follower's writer is not in the leader's line");
    assert_true(has_in_status(c.n[f], "\"lease_line\":[]"));
    ext_node_lease_release(c.n[l], id, NULL);
    pthread_join(a.t, NULL);
    if (a.rc != 0) {
        fail_msg("the follower's writer: %d %s", a.rc, a.why);
    }
    ext_node_lease_release(c.n[f], a.id, NULL);
    exec_ok(c.n[l], "INSERT INTO t VALUES (9, 'z')");
    assert_replicas_equal(&c, 1);
    stop(&c);
}

/* A writer of the leader that takes the lease again and again, holding
 * it TURN_HOLD_MS each time (at most TURN_MAX_TXNS times, until @halt;
 * or, @one, once): retrying a RAFT_BUSY as SQLite's default busy handler
 * does (sleeps of 1, 2, 5, ... 100 ms, until they add up to
 * TURN_BUSY_TIMEOUT_MS: then SQLITE_BUSY, counted in n_busy_out). */
#define TURN_HOLD_MS 60
#define TURN_BUSY_TIMEOUT_MS 2000
#define TURN_MAX_TXNS 200
struct turn_writer {
    pthread_t t;
    struct ext_node *n;
    uint64_t holder;
    bool one;
    atomic_bool *halt;
    atomic_bool asked;    /* it called ext_node_lease_acquire */
    atomic_bool calling;  /* ... and that call has not returned */
    atomic_int n_done;    /* transactions that had the lease */
    int n_busy_out;       /* ... that met SQLITE_BUSY instead */
    atomic_int n_retries; /* busy answers retried */
    int rc;               /* another error, 0 */
    char why[256];
};

static void sleep_ms(unsigned ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void *turn_writer_main(void *arg)
{
    static const unsigned delays[] = {1,  2,  5,  10, 15, 20,
                                      25, 25, 25, 50, 50, 100};
    struct turn_writer *w = arg;

    for (int k = 0; k < TURN_MAX_TXNS && w->rc == 0; k++) {
        unsigned slept = 0, count = 0;
        uint64_t id = 0;
        if (!w->one && atomic_load(w->halt)) {
            break;
        }
        for (;;) {
            unsigned delay;
            int rc;
            atomic_store(&w->asked, true);
            atomic_store(&w->calling, true);
            rc = ext_node_lease_acquire(w->n, w->holder, 0, &id, w->why,
                                        sizeof w->why);
            atomic_store(&w->calling, false);
            if (rc == 0) {
                break;
            }
            if (rc != RAFT_BUSY) {
                w->rc = rc;
                break;
            }
            delay = delays[count < 12 ? count : 11];
            if (slept + delay > TURN_BUSY_TIMEOUT_MS) {
                delay = TURN_BUSY_TIMEOUT_MS - slept;
            }
            if (delay == 0) {
                w->n_busy_out++;
                id = 0;
                break;
            }
            sleep_ms(delay);
            slept += delay;
            count++;
            atomic_fetch_add(&w->n_retries, 1);
        }
        if (id != 0) {
            sleep_ms(TURN_HOLD_MS);
            ext_node_lease_release(w->n, id, NULL);
            atomic_fetch_add(&w->n_done, 1);
        }
        if (w->one) {
            break;
        }
    }
    return NULL;
}

/* queued_of returns how many writers of @n wait in its queue for the
 * lease in force (raft_status() lease.queued), -1 when none is. */
static int queued_of(struct ext_node *n)
{
    char *s = ext_node_status(n);
    json_t *o = s != NULL ? json_loads(s, 0, NULL) : NULL;
    json_t *q = json_object_get(json_object_get(o, "lease"), "queued");
    int queued = json_is_integer(q) ? (int)json_integer_value(q) : -1;
    json_decref(o);
    free(s);
    return queued;
}

/* The writers of one node take the lease in turn: a writer (SQLite's
 * default busy handler, a 2 s busy timeout) answered busy while another
 * connection of its node held the lease, then two writers that came
 * after it and take the lease back to back, 60 ms each: the first has
 * it within its busy timeout. On the old code it met SQLITE_BUSY: at
 * each retry it went to the back of the queue, behind the writer that
 * waited for the holder, and waited 20 ms there, asleep in its busy
 * handler the rest of the time (a trial: 8 writer processes of one
 * node, three of them starved). */
static void test_writers_of_a_node_in_turn(void **state)
{
    struct cluster c;
    struct turn_writer w[3];
    atomic_bool halt = false;
    uint64_t id;
    int l;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    id = acquire(c.n[l], 1);
    memset(w, 0, sizeof w);
    for (int i = 0; i < 3; i++) {
        w[i].n = c.n[l];
        w[i].holder = 200 + (uint64_t)i;
        w[i].one = i == 0;
        w[i].halt = &halt;
    }
    assert_int_equal(pthread_create(&w[0].t, NULL, turn_writer_main, &w[0]), 0);
    EXT_WAIT(atomic_load(&w[0].n_retries) > 0,
             "the first writer was not answered busy");
    for (int i = 1; i < 3; i++) {
        assert_int_equal(pthread_create(&w[i].t, NULL, turn_writer_main, &w[i]),
                         0);
    }
    /* Both in the queue, and the first asleep in its busy handler (a
     * sleep of 10 ms or more): the lease is let go while it is away. */
    EXT_WAIT(atomic_load(&w[1].asked) && atomic_load(&w[2].asked) &&
                 atomic_load(&w[0].n_retries) >= 4 &&
                 !atomic_load(&w[0].calling) && queued_of(c.n[l]) == 2,
             "%d writers queued, the first retried %d times", queued_of(c.n[l]),
             atomic_load(&w[0].n_retries));
    ext_node_lease_release(c.n[l], id, NULL);
    pthread_join(w[0].t, NULL);
    atomic_store(&halt, true);
    for (int i = 1; i < 3; i++) {
        pthread_join(w[i].t, NULL);
    }
    for (int i = 0; i < 3; i++) {
        print_message(
            "writer %d: %d transactions had the lease, %d met "
            "SQLITE_BUSY, %d busy answers retried\n",
            i + 1, atomic_load(&w[i].n_done), w[i].n_busy_out,
            atomic_load(&w[i].n_retries));
        if (w[i].rc != 0) {
            fail_msg("writer %d: %d %s", i + 1, w[i].rc, w[i].why);
        }
    }
    assert_int_equal(w[0].n_busy_out, 0);
    assert_int_equal(atomic_load(&w[0].n_done), 1);
    stop(&c);
}

/* A membership change (a raft_add sent from a follower) that finds a
 * lease in force waits for its end, and raft_status() shows it waiting:
 * the holder's commit goes through (the change used to be appended at
 * once and the commit refused "not applied"); no lease is granted while
 * the change waits (a follower's ask is answered busy), and the change
 * is committed after the changeset. */
static void test_change_waits_for_lease(void **state)
{
    struct cluster c;
    struct call k;
    char why[256] = "";
    uint64_t id, id2 = 0;
    size_t len;
    void *p;
    int l, f;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[l], 81);
    p = changeset("INSERT INTO t VALUES (8, 'x')", id, &len);
    change_start(&k, c.n[f], 4);
    EXT_WAIT(has_in_status(c.n[l], "\"changes_waiting\":1") || call_done(&k),
             "the change neither waited nor ended");
    assert_false(call_done(&k));
    if (ext_node_lease_commit(c.n[l], id, p, len, NULL, NULL, why,
                              sizeof why) != 0) {
        fail_msg("commit under the lease: %s", why);
    }
    free(p);
    /* The lease ended with the proposal; the change goes before any
     * new grant. */
    assert_int_equal(
        ext_node_lease_acquire(c.n[f], 82, 0, &id2, why, sizeof why),
        RAFT_BUSY);
    ext_node_lease_release(c.n[l], id, NULL);
    call_join(&k);
    if (k.cr.rc != 0) {
        fail_msg("raft_add: %d %s", k.cr.rc, k.cr.errmsg);
    }
    assert_int_equal(count_rows(c.db[l].path), 1);
    ext_node_lease_release(c.n[f], acquire(c.n[f], 83), NULL);
    assert_replicas_equal(&c, 1);
    stop(&c);
}

/* mono_ms returns CLOCK_MONOTONIC in ms. */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A second membership change while one waits for the lease in force is
 * refused at once, "another membership change is pending": the first
 * goes first once the lease ends, and the core takes one change at a
 * time (it waited up to LEASE_CORE_CHANGE_WAIT_MS before, only to be
 * refused so). The first still goes after the holder's commit. */
static void test_second_change_refused_at_once(void **state)
{
    struct cluster c;
    struct call k1, k2;
    uint64_t id, t0, waited;
    int l, f, g;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    g = (l + 2) % 3;
    id = acquire(c.n[l], 85);
    change_start(&k1, c.n[f], 4);
    EXT_WAIT(has_in_status(c.n[l], "\"changes_waiting\":1") || call_done(&k1),
             "the change neither waited nor ended");
    assert_false(call_done(&k1));
    t0 = mono_ms();
    change_start(&k2, c.n[g], 5);
    EXT_WAIT(call_done(&k2), "the second change was not answered");
    waited = mono_ms() - t0;
    /* Before the first change's wait (2 s from before t0) could end:
     * the old code answered it only when it stepped the first. */
    if (waited >= LEASE_CORE_CHANGE_WAIT_MS - 100) {
        fail_msg("the second change was answered after %llu ms",
                 (unsigned long long)waited);
    }
    call_join(&k2);
    assert_int_equal(k2.cr.rc, RAFT_BUSY);
    assert_non_null(strstr(k2.cr.errmsg,
                           "another membership change is "
                           "pending"));
    ext_node_lease_release(c.n[l], id, NULL);
    call_join(&k1);
    if (k1.cr.rc != 0) {
        fail_msg("raft_add: %d %s", k1.cr.rc, k1.cr.errmsg);
    }
    stop(&c);
}

/* A change waits LEASE_CORE_CHANGE_WAIT_MS at most: behind a follower's
 * transaction left open, it is appended then; that lease ends at once
 * (the next writer gets the lease without waiting for the doomed
 * holder: before, it waited until that holder ended, up to
 * lease_timeout_ms), and its commit is refused, not applied, saying a
 * membership change came after the grant. */
static void test_change_waits_bounded(void **state)
{
    struct cluster c;
    struct call k;
    char why[256] = "";
    uint64_t id;
    size_t len;
    void *p;
    int l, f;
    (void)state;

    start(&c, "");
    l = with_table(&c);
    f = (l + 1) % 3;
    id = acquire(c.n[f], 91);
    p = changeset("INSERT INTO t VALUES (9, 'x')", id, &len);
    change_start(&k, c.n[l], 4);
    call_join(&k);
    if (k.cr.rc != 0) {
        fail_msg("raft_add: %d %s", k.cr.rc, k.cr.errmsg);
    }
    EXT_WAIT(has_in_status(c.n[l], "\"lease\":null"),
             "the doomed lease still in force at the leader");
    assert_int_equal(
        ext_node_lease_commit(c.n[f], id, p, len, NULL, NULL, why, sizeof why),
        RAFT_NOTLEADER);
    assert_non_null(strstr(why, "not applied"));
    assert_non_null(strstr(why, "membership change"));
    free(p);
    /* The next writer goes while the doomed holder has not released. */
    ext_node_lease_release(c.n[l], acquire(c.n[l], 92), NULL);
    ext_node_lease_release(c.n[f], id, NULL);
    exec_ok(c.n[l], "INSERT INTO t VALUES (2, 'b')");
    assert_int_equal(count_rows(c.db[l].path), 1);
    stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_holder),
        cmocka_unit_test(test_exec_behind_lease),
        cmocka_unit_test(test_commit_applies_everywhere),
        cmocka_unit_test(test_expired),
        cmocka_unit_test(test_follower_commit),
        cmocka_unit_test(test_follower_expired),
        cmocka_unit_test(test_operator_ends_lease),
        cmocka_unit_test(test_lease_line),
        cmocka_unit_test(test_writers_of_a_node_in_turn),
        cmocka_unit_test(test_change_waits_for_lease),
        cmocka_unit_test(test_change_waits_bounded),
        cmocka_unit_test(test_second_change_refused_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
