/* Tests of the durable point and of snapshots of the state machine
 * (sql/sql.h "The durable point" and "Snapshots", sql/snapshot.c): a
 * "bank" of two accounts whose balances always sum to 1000, where every
 * entry moves one unit and logs it, so any copy or reader that mixed two
 * states would break one of the invariants checked by check_bank. */

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

#define MAX_BATCH 16
#define TERM 3

/* One node: a database file and its apply connection. */
struct node {
    struct tmpdb tmp;    /* the database file */
    struct sql_fsm *fsm; /* its apply connection */
};

/* The fixture: two nodes and the snapshot files made in the first's
 * directory (removed by the teardown). */
struct fixture {
    struct node a;      /* the source of snapshots */
    struct node b;      /* where they get installed */
    char snaps[8][128]; /* snapshot paths in use, "" when free */
};

static atomic_uint_fast64_t next_seq = 1;

static void node_open(struct node *n)
{
    char msg[256] = "";

    if (sql_fsm_open(n->tmp.path, NULL, 0, &n->fsm, msg, sizeof msg) != 0) {
        fail_msg("open %s: %s", n->tmp.path, msg);
    }
}

static void node_close(struct node *n)
{
    sql_fsm_close(n->fsm);
    n->fsm = NULL;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);

    assert_non_null(f);
    tmpdb_init(&f->a.tmp);
    tmpdb_init(&f->b.tmp);
    node_open(&f->a);
    node_open(&f->b);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    node_close(&f->a);
    node_close(&f->b);
    for (unsigned i = 0; i < 8; i++) {
        if (f->snaps[i][0] != '\0') {
            unlink(f->snaps[i]);
        }
    }
    tmpdb_remove(&f->a.tmp);
    tmpdb_remove(&f->b.tmp);
    free(f);
    return 0;
}

/* snap_path names snapshot file @i of @f (not created). */
static const char *snap_path(struct fixture *f, unsigned i)
{
    char buf[sizeof f->snaps[0]];

    assert_true(i < 8);
    snprintf(buf, sizeof buf, "%s/snap-%u", f->a.tmp.dir, i);
    memcpy(f->snaps[i], buf, sizeof buf);
    return f->snaps[i];
}

/* apply_batch applies one request per SQL text of @sqls (@n) in one batch
 * of term TERM. Returns sql_fsm_apply's code; every request must succeed
 * (as SQL) when it returns 0, unless @results is given to receive them. */
static int apply_batch(struct sql_fsm *fsm, const char *const *sqls, unsigned n,
                       struct sql_result *results)
{
    struct sql_fsm_entry e[MAX_BATCH];
    struct buf *bufs[MAX_BATCH];
    struct sql_result own[MAX_BATCH];
    struct sql_result *res = results != NULL ? results : own;
    uint64_t next = sql_fsm_applied(fsm) + 1;
    unsigned i;
    int rc;

    for (i = 0; i < n; i++) {
        e[i].index = next + i;
        e[i].term = TERM;
        bufs[i] = make_request(atomic_fetch_add(&next_seq, 1), sqls[i]);
        entry_set_payload(&e[i], bufs[i]);
    }
    rc = sql_fsm_apply(fsm, e, n, res);
    for (i = 0; i < n; i++) {
        buf_free(bufs[i]);
        if (rc == 0 && results == NULL) {
            if (res[i].rc != SQLITE_OK) {
                rc = -1;
            }
            sql_result_clear(&res[i]);
        }
    }
    return rc;
}

static void apply_ok(struct sql_fsm *fsm, const char *sql)
{
    int rc = apply_batch(fsm, &sql, 1, NULL);

    if (rc != 0) {
        fail_msg("apply %s: %d %s", sql, rc, sql_fsm_errmsg(fsm));
    }
}

static const char bank_sql[] =
    "CREATE TABLE acct(id INTEGER PRIMARY KEY, v INTEGER NOT NULL);"
    "INSERT INTO acct VALUES (1, 1000), (2, 0);"
    "CREATE TABLE hist(i INTEGER PRIMARY KEY, note TEXT NOT NULL);";

static const char transfer_sql[] =
    "UPDATE acct SET v = v - 1 WHERE id = 1;"
    "UPDATE acct SET v = v + 1 WHERE id = 2;"
    "INSERT INTO hist(note) VALUES (hex(randomblob(8)));";

/* transfers applies @n transfers in batches of up to @batch. */
static int transfers(struct sql_fsm *fsm, unsigned n, unsigned batch)
{
    const char *sqls[MAX_BATCH];
    int rc;

    for (unsigned i = 0; i < MAX_BATCH; i++) {
        sqls[i] = transfer_sql;
    }
    while (n > 0) {
        unsigned k = n < batch ? n : batch;
        rc = apply_batch(fsm, sqls, k, NULL);
        if (rc != 0) {
            return rc;
        }
        n -= k;
    }
    return 0;
}

static void bank_init(struct sql_fsm *fsm, unsigned n_transfers)
{
    apply_ok(fsm, bank_sql);
    assert_int_equal(transfers(fsm, n_transfers, 10), 0);
}

/* The invariant query: in one statement (one read transaction), the sum
 * of the balances, account 2, the history length and the applied index. */
static const char check_sql[] =
    "SELECT (SELECT sum(v) FROM acct), (SELECT v FROM acct WHERE id = 2),"
    " (SELECT count(*) FROM hist),"
    " (SELECT idx FROM raftsql_applied WHERE id = 0)";

/* bank_read runs check_sql on @db: returns 0 and the applied index in
 * *@out_index when the invariants hold (sum 1000, account 2 = history
 * length = applied index - 1), or a non-zero code saying which broke.
 * Thread-safe (no cmocka calls). */
static int bank_read(sqlite3 *db, int64_t *out_index)
{
    sqlite3_stmt *s;
    int64_t sum, v2, n, idx;
    int rc;

    rc = sqlite3_prepare_v2(db, check_sql, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        return 1;
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        return 2;
    }
    sum = sqlite3_column_int64(s, 0);
    v2 = sqlite3_column_int64(s, 1);
    n = sqlite3_column_int64(s, 2);
    idx = sqlite3_column_int64(s, 3);
    sqlite3_finalize(s);
    if (sum != 1000) {
        return 3;
    }
    if (v2 != n || v2 != idx - 1) {
        return 4;
    }
    *out_index = idx;
    return 0;
}

/* bank_check asserts the invariants on @db and returns its index. */
static int64_t bank_check(sqlite3 *db)
{
    int64_t idx = -1;
    int rc = bank_read(db, &idx);

    if (rc != 0) {
        fail_msg("bank invariant %d broken: %s", rc, sqlite3_errmsg(db));
    }
    return idx;
}

/* bank_check_file is bank_check on a new read-only connection to @path. */
static int64_t bank_check_file(const char *path)
{
    sqlite3 *db;
    int64_t idx;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    idx = bank_check(db);
    sqlite3_close(db);
    return idx;
}

static sqlite3 *open_reader(const char *path)
{
    sqlite3 *db;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* fingerprint returns (malloc'd) every row of the user tables and of the
 * raftsql_* tables of the database @path, in key order. */
static char *fingerprint(const char *path)
{
    static const char *const parts[] = {
        "SELECT group_concat(id || '=' || v, ',') FROM"
        " (SELECT * FROM acct ORDER BY id)",
        "SELECT group_concat(i || '=' || note, ',') FROM"
        " (SELECT * FROM hist ORDER BY i)",
        "SELECT idx || '/' || term FROM raftsql_applied",
        "SELECT group_concat(origin || ':' || seq || ':' || idx, ',') FROM"
        " (SELECT * FROM raftsql_requests ORDER BY origin, seq)",
        "SELECT group_concat(name || '=' || value, ',') FROM"
        " (SELECT * FROM raftsql_settings ORDER BY name)",
        "SELECT group_concat(name, ',') FROM"
        " (SELECT name FROM sqlite_schema ORDER BY name)",
    };
    size_t len = 0;
    char *out = calloc(1, 1);

    assert_non_null(out);
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        char *part = query_text(path, parts[i]);
        const char *p = part != NULL ? part : "(null)";
        size_t plen = strlen(p);

        out = realloc(out, len + plen + 2);
        assert_non_null(out);
        memcpy(out + len, p, plen);
        out[len + plen] = '\n';
        out[len + plen + 1] = '\0';
        len += plen + 1;
        free(part);
    }
    return out;
}

static void assert_same_fingerprint(const char *p1, const char *p2)
{
    char *a = fingerprint(p1);
    char *b = fingerprint(p2);

    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void create_snapshot(struct fixture *f, const char *path,
                            uint64_t *out_index, uint64_t *out_term)
{
    char msg[256] = "";
    int rc = sql_fsm_snapshot_create(f->a.fsm, path, out_index, out_term, msg,
                                     sizeof msg);

    if (rc != 0) {
        fail_msg("snapshot create: %d %s", rc, msg);
    }
}

static void install_ok(struct node *n, const char *path, uint64_t *out_index,
                       uint64_t *out_term)
{
    int rc = sql_fsm_snapshot_install(n->fsm, path, out_index, out_term);

    if (rc != 0) {
        fail_msg("snapshot install: %d %s", rc, sql_fsm_errmsg(n->fsm));
    }
}

static off_t file_size(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0) {
        return -1;
    }
    return st.st_size;
}

/* apply_noop applies one no-op entry (a new leader's first) on @fsm, in
 * term @term. */
static void apply_noop(struct sql_fsm *fsm, uint64_t term)
{
    struct sql_fsm_entry e = {.index = sql_fsm_applied(fsm) + 1, .term = term};
    struct sql_result res;

    assert_int_equal(sql_fsm_apply(fsm, &e, 1, &res), 0);
    sql_result_clear(&res);
}

/* locked_elsewhere says whether another process sees a lock held on
 * @path's SQLite shared range (the lock byte page: PENDING_BYTE + 2, 510
 * bytes), as a closing connection of another process would when it
 * tries the exclusive lock that says it is the last one: asked in a
 * child process (F_GETLK reports no lock of the asking process's own). */
static bool locked_elsewhere(const char *path)
{
    pid_t pid = fork();
    int status = 0;

    assert_true(pid >= 0);
    if (pid == 0) {
        struct flock lk = {.l_type = F_WRLCK,
                           .l_whence = SEEK_SET,
                           .l_start = 0x40000000 + 2,
                           .l_len = 510};
        int fd = open(path, O_RDONLY);
        _exit(fd >= 0 && fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK
                  ? 0
                  : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* An install leaves the apply connection's locks on its file as they
 * were: it never opens and closes the live file outside SQLite (a close
 * of any descriptor drops every POSIX lock of the process on the file:
 * a first write-behind of the checkpoint after the install did, and a
 * closing connection of another process then took itself for the last
 * one and truncated the WAL under the node). */
static void test_install_keeps_locks(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    uint64_t index = 0;
    uint64_t term = 0;

    bank_init(f->a.fsm, 30);
    apply_ok(f->b.fsm, "CREATE TABLE junk(x); INSERT INTO junk VALUES (1)");
    assert_true(locked_elsewhere(f->b.tmp.path));
    create_snapshot(f, path, &index, &term);
    install_ok(&f->b, path, &index, &term);
    assert_true(locked_elsewhere(f->b.tmp.path));
    assert_same_fingerprint(f->b.tmp.path, f->a.tmp.path);
}

/* No-ops applied after the last batch that wrote are not in the file's
 * raftsql_applied (a batch of them writes nothing), but a snapshot made
 * then is at the applied index, in the no-op's term: a diverged follower
 * asks for a repair at least at its own applied index, which the no-ops
 * count. A node that installs it applies the next entry after them. */
static void test_create_after_noops(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    uint64_t index = 0, term = 0, before;

    bank_init(f->a.fsm, 10);
    before = sql_fsm_applied(f->a.fsm);
    apply_noop(f->a.fsm, TERM + 1);
    apply_noop(f->a.fsm, TERM + 2);
    assert_true(sql_fsm_applied(f->a.fsm) == before + 2);
    create_snapshot(f, path, &index, &term);
    assert_true(index == before + 2);
    assert_int_equal(term, TERM + 2);
    {
        static const char rows[] =
            "SELECT group_concat(id || '=' || v, ',') "
            "FROM (SELECT * FROM acct ORDER BY id)";
        char *in_copy = query_text(path, rows);
        char *in_file = query_text(f->a.tmp.path, rows);

        assert_non_null(in_copy);
        assert_non_null(in_file);
        assert_string_equal(in_copy, in_file);
        free(in_copy);
        free(in_file);
    }
    install_ok(&f->b, path, &index, &term);
    assert_true(sql_fsm_applied(f->b.fsm) == before + 2);
    assert_int_equal(transfers(f->b.fsm, 1, 5), 0);
}

/* A snapshot reflects the latest committed state, with its index and
 * term, even while another connection holds an older read transaction
 * open, which keeps seeing its own state; it is a standalone file (no
 * WAL) and an existing path is refused. */
static void test_create_consistent(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    char wal[160];
    char msg[256] = "";
    uint64_t index = 0;
    uint64_t term = 0;
    sqlite3 *r;

    bank_init(f->a.fsm, 50);
    r = open_reader(f->a.tmp.path);
    assert_int_equal(sqlite3_exec(r, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(bank_check(r), 51);
    assert_int_equal(transfers(f->a.fsm, 10, 3), 0);

    create_snapshot(f, path, &index, &term);
    assert_int_equal(index, 61);
    assert_int_equal(term, TERM);
    assert_int_equal(bank_check_file(path), 61);
    assert_same_fingerprint(path, f->a.tmp.path);
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_int_equal(file_size(wal), -1);

    /* The reader's transaction still sees its state, then the new one. */
    assert_int_equal(bank_check(r), 51);
    assert_int_equal(sqlite3_exec(r, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(bank_check(r), 61);
    sqlite3_close(r);

    index = term = 77;
    assert_int_equal(
        sql_fsm_snapshot_create(f->a.fsm, path, &index, &term, msg, sizeof msg),
        SQL_ERR_INVALID);
    assert_non_null(strstr(msg, "exists"));
    assert_int_equal(index, 77);
    assert_int_equal(bank_check_file(path), 61);
}

/* What the apply thread of test_create_during_apply shares. */
struct applier {
    struct sql_fsm *fsm; /* used by this thread only meanwhile */
    unsigned n;          /* transfers to apply */
    atomic_bool done;    /* set when finished */
    int rc;              /* first failure, 0 if none */
};

static void *applier_main(void *arg)
{
    struct applier *a = arg;

    a->rc = transfers(a->fsm, a->n, 4);
    atomic_store(&a->done, true);
    return NULL;
}

/* A test copy gate (struct sql_copy_gate): counts its calls, refuses
 * when @refuse, and at its end commits @transfers transfers through the
 * apply connection, which the copy must not hold. */
struct test_gate {
    struct sql_fsm *fsm;
    bool refuse;
    unsigned begins, ends, transfers;
    const char *path;  /* the copy */
    off_t size_at_end; /* its size at the end (-1: none yet) */
};

static int test_gate_begin(void *arg, char *why, size_t why_len)
{
    struct test_gate *g = arg;

    g->begins++;
    if (g->refuse) {
        snprintf(why, why_len, "test gate: busy");
        return SQL_ERR_BUSY;
    }
    return 0;
}

static void test_gate_end(void *arg)
{
    struct test_gate *g = arg;

    g->ends++;
    g->size_at_end = file_size(g->path);
    assert_int_equal(transfers(g->fsm, g->transfers, 1), 0);
}

/* A copy begins its read transaction through its gate: begin before,
 * end once after, while the copy is being written (a commit made then is
 * not in the copy, which is of the state before it), and a gate that
 * refuses makes no copy. */
static void test_create_through_gate(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    struct test_gate g = {f->a.fsm, false, 0, 0, 3, path, 0};
    struct sql_copy_gate gate = {test_gate_begin, test_gate_end, &g};
    char msg[256] = "";
    uint64_t index = 0, term = 0;

    bank_init(f->a.fsm, 50);
    sql_fsm_set_copy_gate(f->a.fsm, &gate);
    create_snapshot(f, path, &index, &term);
    assert_int_equal(g.begins, 1);
    assert_int_equal(g.ends, 1);
    assert_int_equal(index, 51);
    assert_int_equal(bank_check_file(path), 51);
    assert_int_equal(bank_check_file(f->a.tmp.path), 54);
    /* The end came while VACUUM INTO ran, not after it. */
    assert_true(g.size_at_end < file_size(path));
    assert_int_equal(unlink(path), 0);

    g.refuse = true;
    assert_int_equal(
        sql_fsm_snapshot_create(f->a.fsm, path, &index, &term, msg, sizeof msg),
        SQL_ERR_BUSY);
    assert_non_null(strstr(msg, "test gate: busy"));
    assert_int_equal(g.begins, 2);
    assert_int_equal(g.ends, 1);
    assert_int_equal(file_size(path), -1);
    sql_fsm_set_copy_gate(f->a.fsm, NULL);
}

/* What the writer of test_create_paced shares: it applies one transfer
 * after another until told to stop. */
struct writer {
    struct sql_fsm *fsm; /* used by this thread only meanwhile */
    atomic_bool stop;    /* set by the test */
    atomic_uint applied; /* transfers applied so far */
    int rc;              /* first failure, 0 if none */
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;

    while (!atomic_load(&w->stop) && w->rc == 0) {
        w->rc = transfers(w->fsm, 1, 1);
        atomic_fetch_add(&w->applied, 1);
    }
    return NULL;
}

/* Table big of the paced tests: BIG_ROWS rows of 4000 random bytes,
 * about 20 MB. */
#define BIG_ROWS 5000
static const char big_sql[] =
    "CREATE TABLE big(b BLOB);"
    "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
    "SELECT i + 1 FROM c WHERE i < 5000) "
    "INSERT INTO big SELECT randomblob(4000) FROM c;";

/* big_rows counts the rows of table big in the database @path. */
static int64_t big_rows(const char *path)
{
    sqlite3 *db = open_reader(path);
    sqlite3_stmt *s;
    int64_t n = -1;

    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM big", -1, &s, NULL),
        SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW) {
        n = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return n;
}

/* The pace of test_create_paced's copy, bytes a second. */
#define PACE_RATE (8u << 20)

static double since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) +
           (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A copy made while the node takes writes keeps to its pace
 * (sql_fsm_set_pace, sql/copy_pace.h): it pauses, and it ends no
 * sooner than its size, less the window it may run ahead and what it
 * wrote before the pace held, allows at the rate. The same copy with no
 * writes going on does not pause. Both copies are consistent. */
static void test_create_paced(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    struct writer w = {.fsm = f->a.fsm};
    struct sql_pace pace = {PACE_RATE, NULL, NULL};
    struct timespec t0;
    uint64_t index = 0, term = 0;
    pthread_t th;
    double secs, floor_s;
    off_t size;

    apply_ok(f->a.fsm, big_sql);
    bank_init(f->a.fsm, 0);
    sql_fsm_set_pace(f->a.fsm, &pace);

    create_snapshot(f, path, &index, &term);
    assert_int_equal(f->a.fsm->copy_slept_ms, 0);
    assert_int_equal(index, 2);
    assert_int_equal(big_rows(path), BIG_ROWS);
    assert_int_equal(unlink(path), 0);

    atomic_init(&w.stop, false);
    atomic_init(&w.applied, 0);
    assert_int_equal(pthread_create(&th, NULL, writer_main, &w), 0);
    for (int i = 0; i < 100000 && atomic_load(&w.applied) < 2; i++) {
        usleep(1000);
    }
    assert_true(atomic_load(&w.applied) >= 2);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    create_snapshot(f, path, &index, &term);
    secs = since(&t0);
    atomic_store(&w.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    size = file_size(path);
    assert_true(size > (off_t)(16u << 20));
    floor_s = (double)(size - (off_t)(12u << 20)) / PACE_RATE;
    if (f->a.fsm->copy_slept_ms == 0 || secs < floor_s) {
        fail_msg(
            "copy of %lld bytes at %u bytes/s took %.3f s (at least "
            "%.3f s expected), paused %llu ms",
            (long long)size, PACE_RATE, secs, floor_s,
            (unsigned long long)f->a.fsm->copy_slept_ms);
    }
    assert_true(index > 2);
    assert_int_equal(big_rows(path), BIG_ROWS);
    sql_fsm_set_pace(f->a.fsm, NULL);
}

/* A commit index that moves at each look (test_install_paced's cluster
 * takes writes), or stays (@arg NULL). */
static uint64_t moving_commit(void *arg)
{
    static uint64_t commit;

    return arg != NULL ? ++commit : 7;
}

/* An install while the cluster takes writes keeps to its pace
 * (sql_fsm_set_pace), both as it copies the pages into the WAL and as it
 * checkpoints them into the file: it pauses, and ends no sooner than
 * those bytes, less the window each may run ahead, allow at the rate;
 * with the cluster idle it does not pause. Both installs are complete. */
static void test_install_paced(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    struct sql_pace pace = {PACE_RATE, moving_commit, NULL};
    struct timespec t0;
    uint64_t index = 0, term = 0;
    double secs, floor_s;
    off_t size;

    apply_ok(f->a.fsm, big_sql);
    create_snapshot(f, path, &index, &term);
    size = file_size(path);
    assert_true(size > (off_t)(16u << 20));

    sql_fsm_set_pace(f->b.fsm, &pace);
    install_ok(&f->b, path, &index, &term);
    assert_int_equal(f->b.fsm->install_slept_ms, 0);
    assert_int_equal(big_rows(f->b.tmp.path), BIG_ROWS);

    pace.arg = &pace;
    sql_fsm_set_pace(f->b.fsm, &pace);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    install_ok(&f->b, path, &index, &term);
    secs = since(&t0);
    /* The pages go at the pace twice: into the WAL, then from it into
     * the database file (checkpoint_paced). */
    floor_s = 2 * (double)(size - (off_t)(12u << 20)) / PACE_RATE;
    if (f->b.fsm->install_slept_ms == 0 || secs < floor_s) {
        fail_msg(
            "install of %lld bytes at %u bytes/s took %.3f s (at least "
            "%.3f s expected), paused %llu ms",
            (long long)size, PACE_RATE, secs, floor_s,
            (unsigned long long)f->b.fsm->install_slept_ms);
    }
    assert_int_equal(big_rows(f->b.tmp.path), BIG_ROWS);
    sql_fsm_set_pace(f->b.fsm, NULL);
}

/* Snapshots taken on another thread while the apply thread keeps applying
 * are each consistent (invariants hold, index and term as reported), and
 * applying never fails meanwhile. */
static void test_create_during_apply(void **state)
{
    struct fixture *f = *state;
    struct applier a = {0};
    pthread_t th;
    unsigned n_snaps = 0;
    uint64_t lowest = UINT64_MAX;
    uint64_t highest = 0;
    char msg[256];

    bank_init(f->a.fsm, 0);
    a.fsm = f->a.fsm;
    a.n = 400;
    atomic_init(&a.done, false);
    assert_int_equal(pthread_create(&th, NULL, applier_main, &a), 0);
    while (!atomic_load(&a.done) || n_snaps < 3) {
        const char *path = snap_path(f, n_snaps % 2);
        uint64_t index = 0;
        uint64_t term = 0;
        int rc = sql_fsm_snapshot_create(f->a.fsm, path, &index, &term, msg,
                                         sizeof msg);

        if (rc != 0) {
            atomic_store(&a.done, true);
            pthread_join(th, NULL);
            fail_msg("snapshot create: %d %s", rc, msg);
        }
        assert_int_equal(term, TERM);
        assert_int_equal(bank_check_file(path), (int64_t)index);
        lowest = index < lowest ? index : lowest;
        highest = index > highest ? index : highest;
        unlink(path);
        n_snaps++;
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(a.rc, 0);
    assert_int_equal(sql_fsm_applied(f->a.fsm), 401);
    print_message("%u snapshots, indexes %llu..%llu\n", n_snaps,
                  (unsigned long long)lowest, (unsigned long long)highest);
    assert_true(highest <= 401);
    assert_true(lowest >= 1);
}

/* apply_stamped applies request @sql stamped @time_ms alone in a batch of
 * term TERM, and expects it to succeed. */
static void apply_stamped(struct sql_fsm *fsm, const char *sql, int64_t time_ms)
{
    struct buf *b = make_request_ex(1, atomic_fetch_add(&next_seq, 1), sql,
                                    NULL, 0, time_ms, 1);
    struct sql_fsm_entry e = {.index = sql_fsm_applied(fsm) + 1, .term = TERM};
    struct sql_result r = {0};

    entry_set_payload(&e, b);
    if (sql_fsm_apply(fsm, &e, 1, &r) != 0 || r.rc != SQLITE_OK) {
        fail_msg("apply %s: %s %s", sql, sql_fsm_errmsg(fsm),
                 r.errmsg != NULL ? r.errmsg : "");
    }
    sql_result_clear(&r);
    buf_free(b);
}

/* A snapshot installed into another node's database replaces its content
 * entirely (tables, applied index and term, request ids, settings, the
 * latest request stamp applied); the
 * cluster-wide settings take effect on the apply connection; the index is
 * durable; and both nodes then apply the same entries alike. */
static void test_install_other_node(void **state)
{
    struct fixture *f = *state;
    const char *path = snap_path(f, 0);
    struct sql_result ra = {0};
    struct sql_result rb = {0};
    const char *fk_insert = "INSERT INTO child(pid) VALUES (999)";
    uint64_t index = 0;
    uint64_t term = 0;
    uint64_t index2 = 0;
    uint64_t term2 = 0;
    int64_t stamp = 0;

    bank_init(f->a.fsm, 30);
    apply_ok(f->a.fsm, "PRAGMA foreign_keys = ON");
    apply_ok(f->a.fsm,
             "CREATE TABLE parent(id INTEGER PRIMARY KEY);"
             "CREATE TABLE child(id INTEGER PRIMARY KEY,"
             " pid INTEGER REFERENCES parent(id));");
    apply_ok(f->b.fsm, "CREATE TABLE junk(x); INSERT INTO junk VALUES (1)");
    apply_ok(f->b.fsm, "INSERT INTO junk VALUES (2)");
    apply_stamped(f->a.fsm, "CREATE TABLE later(x)", 1800000000000LL);
    apply_stamped(f->b.fsm, "CREATE TABLE later(x)", 1900000000000LL);

    create_snapshot(f, path, &index, &term);
    assert_int_equal(index, 34);
    install_ok(&f->b, path, &index2, &term2);
    assert_int_equal(index2, index);
    assert_int_equal(term2, term);
    assert_int_equal(sql_fsm_applied(f->b.fsm), index);
    assert_int_equal(sql_fsm_applied_term(f->b.fsm), TERM);
    assert_int_equal(sql_fsm_durable(f->b.fsm), index);
    assert_true(sql_fsm_applied_time(f->b.fsm, &stamp));
    assert_true(stamp == 1800000000000LL);
    assert_same_fingerprint(f->b.tmp.path, f->a.tmp.path);
    assert_query(f->b.tmp.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'junk'", "0");
    /* The snapshot file itself is left as it was. */
    assert_same_fingerprint(path, f->a.tmp.path);

    /* foreign_keys came with the snapshot and is in force on B. */
    assert_int_equal(apply_batch(f->a.fsm, &fk_insert, 1, &ra), 0);
    assert_int_equal(apply_batch(f->b.fsm, &fk_insert, 1, &rb), 0);
    assert_int_equal(ra.rc & 0xff, SQLITE_CONSTRAINT);
    assert_int_equal(rb.rc, ra.rc);
    sql_result_clear(&ra);
    sql_result_clear(&rb);
    /* Same seeds, same entries: the nodes stay identical. The request ids
     * differ per node here, so compare without raftsql_requests. */
    assert_int_equal(transfers(f->a.fsm, 7, 3), 0);
    assert_int_equal(transfers(f->b.fsm, 7, 3), 0);
    assert_int_equal(sql_fsm_applied(f->b.fsm), sql_fsm_applied(f->a.fsm));
    {
        char *da = dump_table(f->a.tmp.path, "acct");
        char *db = dump_table(f->b.tmp.path, "acct");
        assert_string_equal(da, db);
        free(da);
        free(db);
    }

    /* Survives reopening, and the reopened node is durable at once. */
    node_close(&f->b);
    node_open(&f->b);
    assert_int_equal(sql_fsm_applied(f->b.fsm), 42);
    assert_int_equal(sql_fsm_durable(f->b.fsm), 42);
}

/* What the reader thread of test_install_readers shares. */
struct reader {
    const char *path;  /* the database being replaced under it */
    atomic_bool stop;  /* set when the installs are done */
    unsigned n_reads;  /* successful reads */
    int64_t seen_mask; /* bit 0: index 21 seen, bit 1: index 41 seen */
    int failure;       /* first broken invariant or odd index, 0 if none */
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    sqlite3 *db;
    int64_t idx;
    int rc;

    if (sqlite3_open_v2(r->path, &db, SQLITE_OPEN_READONLY, NULL) !=
        SQLITE_OK) {
        r->failure = 100;
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    while (!atomic_load(&r->stop) && r->failure == 0) {
        rc = bank_read(db, &idx);
        if (rc != 0) {
            r->failure = rc;
        } else if (idx == 21) {
            r->seen_mask |= 1;
        } else if (idx == 41) {
            r->seen_mask |= 2;
        } else {
            r->failure = 50;
        }
        r->n_reads++;
    }
    sqlite3_close(db);
    return NULL;
}

/* Readers on other connections see the old or the new database, never a
 * mix: a read transaction open during the install keeps the old state
 * until it ends; a thread reading continuously while snapshots of two
 * different states are installed back and forth always finds the
 * invariants intact and one of the two indexes. */
static void test_install_readers(void **state)
{
    struct fixture *f = *state;
    const char *s20 = snap_path(f, 0);
    const char *s40 = snap_path(f, 1);
    struct reader r = {0};
    uint64_t index = 0;
    uint64_t term = 0;
    pthread_t th;
    sqlite3 *db;

    bank_init(f->a.fsm, 20);
    create_snapshot(f, s20, &index, &term);
    assert_int_equal(index, 21);
    assert_int_equal(transfers(f->a.fsm, 20, 7), 0);
    create_snapshot(f, s40, &index, &term);
    assert_int_equal(index, 41);
    bank_init(f->b.fsm, 5);

    db = open_reader(f->b.tmp.path);
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(bank_check(db), 6);
    install_ok(&f->b, s20, &index, &term);
    assert_int_equal(index, 21);
    assert_int_equal(bank_check(db), 6);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(bank_check(db), 21);
    sqlite3_close(db);

    r.path = f->b.tmp.path;
    atomic_init(&r.stop, false);
    assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
    for (unsigned i = 0; i < 12; i++) {
        install_ok(&f->b, i % 2 == 0 ? s40 : s20, &index, &term);
        assert_int_equal(index, i % 2 == 0 ? 41 : 21);
        /* Give the reader a chance to see this state. */
        usleep(2000);
    }
    atomic_store(&r.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("reader: %u reads, states seen mask %lld\n", r.n_reads,
                  (long long)r.seen_mask);
    assert_int_equal(r.failure, 0);
    assert_true(r.n_reads > 0);
    assert_int_equal(sql_fsm_applied(f->b.fsm), 21);
    assert_int_equal(bank_check_file(f->b.tmp.path), 21);
}

/* copy_file copies @n bytes of @from (all when @n is -1) to @to. */
static void copy_file(const char *from, const char *to, long n)
{
    FILE *in = fopen(from, "rb");
    FILE *out = fopen(to, "wb");
    char buf[4096];
    long total = 0;
    size_t k;

    assert_non_null(in);
    assert_non_null(out);
    while (
        (n < 0 || total < n) &&
        (k = fread(buf, 1,
                   n < 0 || n - total > (long)sizeof buf ? sizeof buf
                                                         : (size_t)(n - total),
                   in)) > 0) {
        assert_int_equal(fwrite(buf, 1, k, out), k);
        total += (long)k;
    }
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* patch_file overwrites @len bytes at @offset of @path with @byte. */
static void patch_file(const char *path, long offset, int byte, size_t len)
{
    FILE *fp = fopen(path, "r+b");

    assert_non_null(fp);
    assert_int_equal(fseek(fp, offset, SEEK_SET), 0);
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(fputc(byte, fp), byte);
    }
    assert_int_equal(fclose(fp), 0);
}

/* expect_refused installs @path into B, expects @rc with @needle in the
 * message, and checks that B's database and state are unchanged. */
static void expect_refused(struct fixture *f, const char *path, int rc,
                           const char *needle, const char *before)
{
    uint64_t index = 99;
    uint64_t term = 99;
    char *now;

    assert_int_equal(sql_fsm_snapshot_install(f->b.fsm, path, &index, &term),
                     rc);
    if (strstr(sql_fsm_errmsg(f->b.fsm), needle) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", sql_fsm_errmsg(f->b.fsm),
                 needle);
    }
    assert_int_equal(index, 99);
    assert_int_equal(term, 99);
    assert_int_equal(sql_fsm_applied(f->b.fsm), 11);
    now = fingerprint(f->b.tmp.path);
    assert_string_equal(now, before);
    free(now);
}

/* Missing, truncated, garbage, corrupted, foreign and incompatible files
 * are refused, each with a message saying why, as is a copy that cannot
 * get the write lock; the live database is unchanged and keeps applying. */
static void test_install_refuses_bad_files(void **state)
{
    struct fixture *f = *state;
    const char *good = snap_path(f, 0);
    const char *bad = snap_path(f, 1);
    uint64_t index = 0;
    uint64_t term = 0;
    char *before;
    long size;
    sqlite3 *db;

    bank_init(f->a.fsm, 60);
    create_snapshot(f, good, &index, &term);
    bank_init(f->b.fsm, 10);
    before = fingerprint(f->b.tmp.path);
    size = (long)file_size(good);
    assert_true(size > 8192);

    expect_refused(f, bad, SQL_ERR_NOTFOUND, "snap-1", before);

    copy_file(good, bad, size / 2);
    expect_refused(f, bad, SQL_ERR_CORRUPT, "snap-1", before);
    unlink(bad);

    {
        FILE *fp = fopen(bad, "wb");
        uint64_t x = 88172645463325252ull;
        assert_non_null(fp);
        for (unsigned i = 0; i < 2048; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            fwrite(&x, sizeof x, 1, fp);
        }
        fclose(fp);
    }
    expect_refused(f, bad, SQL_ERR_CORRUPT, "not a", before);
    unlink(bad);

    /* Pages 2 and 4: b-tree page headers overwritten. */
    copy_file(good, bad, -1);
    patch_file(bad, 4096, 0x7f, 8);
    patch_file(bad, 3 * 4096, 0x7f, 8);
    expect_refused(f, bad, SQL_ERR_CORRUPT, "snap-1", before);
    unlink(bad);

    /* A sound database that is not a raftsql snapshot. */
    assert_int_equal(sqlite3_open(bad, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    expect_refused(f, bad, SQL_ERR_CORRUPT, "raftsql_applied", before);
    unlink(bad);

    /* A snapshot with another page size cannot be copied into WAL. */
    copy_file(good, bad, -1);
    assert_int_equal(sqlite3_open(bad, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "PRAGMA page_size = 1024; VACUUM", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    expect_refused(f, bad, SQL_ERR_INVALID, "page", before);
    unlink(bad);

    /* A failure during the copy itself (here: another connection holds
     * the write lock) changes nothing either. */
    assert_int_equal(sqlite3_open(f->b.tmp.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(f->b.fsm->db, 20);
    expect_refused(f, good, SQL_ERR_BUSY, "backup", before);
    sqlite3_busy_timeout(f->b.fsm->db, 5000);
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(before);

    assert_int_equal(transfers(f->b.fsm, 3, 2), 0);
    assert_int_equal(bank_check_file(f->b.tmp.path), 14);
    install_ok(&f->b, good, &index, &term);
    assert_int_equal(index, 61);
}

/* now_ms returns CLOCK_MONOTONIC in ms. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The durable index: equal to the applied index right after open (open
 * checkpoints), behind it after applies (synchronous=NORMAL commits are
 * not fsynced), raised to it by a checkpoint, which empties the WAL; a
 * reader holding old WAL frames makes the checkpoint give up with
 * SQL_ERR_BUSY (at once under SQL_CHECKPOINT_NOWAIT, after 100 ms under
 * SQL_CHECKPOINT_WAIT) and the durable index stays. */
static void test_durable_index(void **state)
{
    struct fixture *f = *state;
    char wal[160];
    uint64_t durable = 0, t0;
    sqlite3 *r;

    assert_int_equal(sql_fsm_durable(f->a.fsm), 0);
    bank_init(f->a.fsm, 4);
    assert_int_equal(sql_fsm_applied(f->a.fsm), 5);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 0);
    snprintf(wal, sizeof wal, "%s-wal", f->a.tmp.path);
    assert_true(file_size(wal) > 0);
    assert_int_equal(
        sql_fsm_checkpoint(f->a.fsm, SQL_CHECKPOINT_NOWAIT, &durable), 0);
    assert_int_equal(durable, 5);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 5);
    assert_int_equal(file_size(wal), 0);

    assert_int_equal(transfers(f->a.fsm, 3, 1), 0);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 5);
    node_close(&f->a);
    node_open(&f->a);
    assert_int_equal(sql_fsm_applied(f->a.fsm), 8);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 8);

    r = open_reader(f->a.tmp.path);
    assert_int_equal(sqlite3_exec(r, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(bank_check(r), 8);
    assert_int_equal(transfers(f->a.fsm, 2, 2), 0);
    durable = 42;
    t0 = now_ms();
    assert_int_equal(
        sql_fsm_checkpoint(f->a.fsm, SQL_CHECKPOINT_NOWAIT, &durable),
        SQL_ERR_BUSY);
    /* At once: the reader (a snapshot's copy, maybe for a minute) is not
     * waited for; the old code slept 100 ms in the busy handler, at every
     * batch while the copy ran. */
    assert_true(now_ms() - t0 < 100);
    assert_int_equal(durable, 42);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 8);
    assert_non_null(strstr(sql_fsm_errmsg(f->a.fsm), "durable index stays"));
    /* A caller that needs the durable point waits for the reader, 100 ms
     * at most, and gives up alike. */
    t0 = now_ms();
    assert_int_equal(
        sql_fsm_checkpoint(f->a.fsm, SQL_CHECKPOINT_WAIT, &durable),
        SQL_ERR_BUSY);
    assert_true(now_ms() - t0 >= 90);
    assert_int_equal(durable, 42);
    assert_int_equal(sql_fsm_durable(f->a.fsm), 8);
    assert_non_null(strstr(sql_fsm_errmsg(f->a.fsm), "durable index stays"));
    assert_int_equal(sqlite3_exec(r, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(r);
    assert_int_equal(
        sql_fsm_checkpoint(f->a.fsm, SQL_CHECKPOINT_NOWAIT, &durable), 0);
    assert_int_equal(durable, 10);
    assert_int_equal(file_size(wal), 0);
    assert_true(sql_fsm_durable(f->a.fsm) <= sql_fsm_applied(f->a.fsm));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_after_noops, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_consistent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_through_gate, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_during_apply, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_install_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_install_other_node, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_install_readers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_install_keeps_locks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_install_refuses_bad_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_durable_index, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
