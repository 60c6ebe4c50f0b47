/* Helpers shared by the tests of ext/ (header-only, static inline), on top
 * of tests/sql/helpers.h: request payloads in raft_bufs, as the runtime
 * carries them, and the apply connection opened as the runtime opens it.
 * Include after <cmocka.h>. */

#ifndef TESTS_EXT_HELPERS_H
#define TESTS_EXT_HELPERS_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ext/runtime/applier.h"
#include "ext/runtime/node_log.h"
#include "ext/runtime/sqlbridge.h"
#include "ext/runtime/store.h"
#include "tests/sql/helpers.h"

/* Longest a test waits for a condition another thread makes true, ms. */
#define EXT_WAIT_MS 5000

/* EXT_WAIT polls @cond every millisecond until it holds; after
 * EXT_WAIT_MS it fails the test, naming @cond and what the printf-style
 * rest (a format and its values, read at that moment) says was seen. */
#define EXT_WAIT(cond, ...)                                                    \
    do {                                                                       \
        int n_ = 0;                                                            \
        while (!(cond) && n_++ < EXT_WAIT_MS) {                                \
            usleep(1000);                                                      \
        }                                                                      \
        if (!(cond)) {                                                         \
            char seen_[512];                                                   \
            snprintf(seen_, sizeof seen_, __VA_ARGS__);                        \
            fail_msg("%s:%d: timed out waiting for %s; saw %s", __FILE__,      \
                     __LINE__, #cond, seen_);                                  \
        }                                                                      \
    } while (0)

/* ext_free_port returns a loopback TCP port nobody listened on a moment
 * ago. */
static inline int ext_free_port(void)
{
    /* The ports handed out lately: the kernel may give a port again once
     * it is closed, and a cluster whose two nodes got the same one fails
     * to start (test_lease, once, under ThreadSanitizer). */
    static int given[64];
    static unsigned n_given;

    for (int tries = 0;; tries++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t len = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        bool again = false;
        int port;
        assert_true(fd >= 0);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
        close(fd);
        port = ntohs(a.sin_port);
        for (unsigned i = 0; i < 64 && i < n_given; i++) {
            again = again || given[i] == port;
        }
        if (!again || tries == 100) {
            given[n_given++ % 64] = port;
            return port;
        }
    }
}

/* request_buf returns request (@origin, @seq) of @sql, stamped, in a new
 * raft_buf owned by the caller (raft_buf_unref). */
static inline struct raft_buf *request_buf(uint64_t origin, uint64_t seq,
                                           const char *sql)
{
    struct buf *b =
        make_request_ex(origin, seq, sql, NULL, 0, 1700000000000LL, seq);
    struct raft_buf *r = raft_buf_copy(b->data, b->len);
    assert_non_null(r);
    buf_free(b);
    return r;
}

/* open_fsm opens the apply connection to @path as the runtime does
 * (sqlbridge_open), failing the test on error. */
static inline struct sql_fsm *open_fsm(const char *path)
{
    struct sql_fsm *fsm = NULL;
    char msg[256] = "";
    if (sqlbridge_open(path, &fsm, msg, sizeof msg) != 0) {
        fail_msg("sqlbridge_open %s: %s", path, msg);
    }
    return fsm;
}

/* store_dir_init makes a temporary directory with a database file @db
 * and names the log directory inside it in @dir (@dir_len bytes, not
 * created), with a quiet node log @log. */
static inline void store_dir_init(struct tmpdb *db, char *dir, size_t dir_len,
                                  struct ext_node_log *log)
{
    tmpdb_init(db);
    snprintf(dir, dir_len, "%s/log", db->dir);
    node_log_init(log, 1, RAFT_LOG_ERROR + 1); /* quiet */
}

/* store_dir_remove removes what store_dir_init made (and the log
 * directory). */
static inline void store_dir_remove(struct tmpdb *db, const char *dir,
                                    struct ext_node_log *log)
{
    char cmd[256];
    node_log_close(log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    tmpdb_remove(db);
}

/* store_open_ok opens the store of log directory @dir for database
 * @db_path, lines to @log, failing the test on error. */
static inline struct ext_store *store_open_ok(const char *dir,
                                              const char *db_path,
                                              struct ext_node_log *log)
{
    struct ext_store_config cfg = {
        .dir = dir,
        .db_path = db_path,
        .log_max_bytes = 16u << 20,
        .snapshot_threshold = 100,
        .trailing_entries = 10,
    };
    struct ext_store *s = NULL;
    char msg[512] = "";
    if (store_open(&cfg, log, &s, msg, sizeof msg) != 0) {
        fail_msg("store_open: %s", msg);
    }
    return s;
}

/* one_voter_core returns a new core of server 1, the only voter of its
 * cluster (election timeout 100 ms, heartbeats every 20 ms, check-quorum
 * off), for a test's driver (raft_uv_node_start takes it). */
static inline struct raft *one_voter_core(void)
{
    static const raft_id voters[1] = {1};
    struct raft_config rc = {
        .id = 1,
        .voters = voters,
        .n_voters = 1,
        .election_timeout = 100,
        .heartbeat_interval = 20,
        .max_size_per_msg = 1 << 20,
        .max_inflight_msgs = 8,
        .seed = 7,
        .disable_check_quorum = true,
    };
    struct raft *core = NULL;
    assert_int_equal(raft_new(&rc, NULL, 1, NULL, 0, 0, &core), 0);
    return core;
}

/* applier_start_quiet makes a temporary database @db and starts an apply
 * thread on it that applies every batch at once and calls no hook, its
 * lines to a quiet node log @log; applier_stop_quiet undoes it. */
static inline struct ext_applier *applier_start_quiet(struct tmpdb *db,
                                                      struct ext_node_log *log)
{
    struct ext_applier_config cfg = {.snapshot_threshold = 1u << 30};
    struct ext_applier_hooks hooks = {0};
    struct ext_applier *a = NULL;

    tmpdb_init(db);
    node_log_init(log, 1, RAFT_LOG_ERROR + 1);
    assert_int_equal(applier_start(open_fsm(db->path), &cfg, &hooks, log, &a),
                     0);
    return a;
}

static inline void applier_stop_quiet(struct ext_applier *a, struct tmpdb *db,
                                      struct ext_node_log *log)
{
    applier_stop(a);
    node_log_close(log);
    tmpdb_remove(db);
}

#endif /* TESTS_EXT_HELPERS_H */
