/* The raftsql SQL functions. Each reports bad input through
 * sqlite3_result_error with a message naming the function and what is
 * wrong (https://sqlite.org/c3ref/result_blob.html). */

#include "func.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/err.h"
#include "../raftsql.h"
#include "../../sql/sql.h"
#include "../runtime/config.h"
#include "attach_client.h"
#include "attach_server.h"
#include "func_acquire.h"
#include "func_call.h"
#include "func_data.h"
#include "guard.h"
#include "members.h"
#include "precheck.h"
#include "registry.h"
#include "verify.h"

SQLITE_EXTENSION_INIT3

/* Most parameters one raft_exec takes (SQLite's own default limit). */
#define EXT__MAX_PARAMS 32766

/* Per-connection state of the functions. */
struct conn_state {
    sqlite3_int64 last_insert_rowid;   /* of this connection's last raft_exec */
    struct ext_precheck_cache checked; /* requests checked fine */
};

sqlite3_int64 *func_conn_rowid(void *cs)
{
    return &((struct conn_state *)cs)->last_insert_rowid;
}

struct ext_precheck_cache *func_conn_checked(void *cs)
{
    return &((struct conn_state *)cs)->checked;
}

/* conn_init sets up a connection the attach server opened to serve the
 * calls of other processes: raftsql's functions and guard, as
 * sqlite3_raftsql_init does. A client thread of the server. */
static int conn_init(sqlite3 *db)
{
    int rc = ext_func_register(db);
    if (rc == SQLITE_OK) {
        rc = ext_guard_install(db);
    }
    return rc;
}

static void fn_start(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *file = func_call_main_file(ctx, "raft_start");
    const char *text;
    struct ext_config *cfg;
    char errmsg[1024];
    char msg[8192];
    int rc;
    (void)argc;

    if (file == NULL) {
        return;
    }
    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        func_call_error(ctx, RAFTSQL_INVALID,
                        "raft_start: config must be text, e.g. 'id=1 "
                        "cluster=1@127.0.0.1:7001,2@127.0.0.1:7002,"
                        "3@127.0.0.1:7003'");
        return;
    }
    if (sql_fsm_host_check(errmsg, sizeof errmsg) != 0) {
        snprintf(msg, sizeof msg, "raft_start: %s", errmsg);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return;
    }
    text = (const char *)sqlite3_value_text(argv[0]);
    cfg = malloc(sizeof *cfg);
    if (cfg == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    rc = ext_config_parse(text, file, cfg, errmsg, sizeof errmsg);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "raft_start: %s", errmsg);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        free(cfg);
        return;
    }
    rc = ext_registry_start(file, cfg, conn_init, errmsg, sizeof errmsg);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "raft_start: %s", errmsg);
        /* RAFT_INVALID: the configuration cannot work with what is on
         * disk (a bootstrap_from= file that is missing or no database,
         * cluster= disagreeing with the log...). */
        func_call_error(
            ctx, rc == RAFT_INVALID ? RAFTSQL_INVALID : SQLITE_ERROR, msg);
    } else {
        /* Where it listens in effect: listen= may come from the stored
         * configuration. */
        struct ext_node *n = ext_registry_acquire(file);
        char listen[EXT_ADDRESS_MAX + 1];
        ext_config_listen_format(cfg, listen, sizeof listen);
        if (n != NULL) {
            ext_node_listen(n, listen, sizeof listen);
            ext_registry_release(n);
        }
        ext_guard_plain_start(sqlite3_context_db_handle(ctx));
        snprintf(msg, sizeof msg,
                 "node %llu started, listening on %s, log in %s",
                 (unsigned long long)cfg->id, listen, cfg->dir);
        sqlite3_result_text(ctx, msg, -1, SQLITE_TRANSIENT);
    }
    free(cfg);
}

static void fn_exec(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    struct conn_state *cs = sqlite3_user_data(ctx);
    struct ext_node *n;
    struct ext_exec_result *res;
    struct sql_param *params = NULL;
    const char *sql;
    unsigned n_params;
    int64_t rowid;

    if (argc < 1 || sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        func_call_error(ctx, RAFTSQL_INVALID,
                        "raft_exec: the first argument must be the SQL text of "
                        "the write");
        return;
    }
    if (argc - 1 > EXT__MAX_PARAMS) {
        func_call_error(ctx, RAFTSQL_INVALID, "raft_exec: too many parameters");
        return;
    }
    if (!sqlite3_get_autocommit(sqlite3_context_db_handle(ctx))) {
        /* The node's own connection applies the write: it would wait for
         * this connection's transaction, which waits for it; and a read
         * transaction would not see the write. */
        func_call_error(
            ctx, RAFTSQL_INVALID,
            "raft_exec: not applied: this connection is inside a "
            "transaction (BEGIN); commit or roll it back first: each "
            "raft_exec is a transaction of its own");
        return;
    }
    rowid = cs->last_insert_rowid;
    n = func_acquire(ctx, "raft_exec", argc, argv, &rowid);
    if (n == NULL) {
        cs->last_insert_rowid = rowid; /* forwarded, or unchanged */
        return;
    }
    res = malloc(sizeof *res);
    if (res == NULL) {
        sqlite3_result_error_nomem(ctx);
        goto out;
    }
    if (func_call_params(ctx, "raft_exec", argc, argv, 0, &cs->checked,
                         res->errmsg, sizeof res->errmsg, &params,
                         &n_params) != 0) {
        goto out;
    }
    sql = (const char *)sqlite3_value_text(argv[0]);
    ext_node_exec(n, sql, (size_t)sqlite3_value_bytes(argv[0]), params,
                  n_params, NULL, &probe, res);
    if (res->kind == EXT_EXEC_OK) {
        cs->last_insert_rowid = res->last_insert_rowid;
        sqlite3_result_int64(ctx, res->changes);
        func_acquire_settings_follow(ctx, argc, argv);
    } else {
        func_call_error(
            ctx, res->sqlite_rc != SQLITE_OK ? res->sqlite_rc : SQLITE_ERROR,
            res->errmsg);
    }
out:
    ext_registry_release(n);
    free(params);
    free(res);
}

static void fn_last_insert_rowid(sqlite3_context *ctx, int argc,
                                 sqlite3_value **argv)
{
    struct conn_state *cs = sqlite3_user_data(ctx);
    (void)argc;
    (void)argv;
    sqlite3_result_int64(ctx, cs->last_insert_rowid);
}

/* fn_last_error answers raft_last_error(): the reason of the guard's
 * latest refusal on the calling connection (ext_guard_last_error), or
 * NULL. */
static void fn_last_error(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    char *why = ext_guard_last_error(sqlite3_context_db_handle(ctx));
    (void)argc;
    (void)argv;
    if (why == NULL) {
        sqlite3_result_null(ctx);
        return;
    }
    sqlite3_result_text(ctx, why, -1, sqlite3_free);
}

/* answer_text answers SQL function @name with the text @render makes of
 * the node the call runs on (malloc'd, freed here; NULL: out of memory):
 * the node this process runs for the calling connection's file, or
 * another process's through its socket (func_acquire). */
static void answer_text(sqlite3_context *ctx, const char *name, int argc,
                        sqlite3_value **argv,
                        char *(*render)(struct ext_node *n))
{
    struct ext_node *n = func_acquire(ctx, name, argc, argv, NULL);
    char *text;
    if (n == NULL) {
        return;
    }
    text = render(n);
    ext_registry_release(n);
    if (text == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text(ctx, text, -1, SQLITE_TRANSIENT);
    free(text);
}

static void fn_status(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    answer_text(ctx, "raft_status", argc, argv, ext_node_status);
}

/* fn_metrics answers raft_metrics(): the node's figures as Prometheus
 * text (ext_node_metrics). */
static void fn_metrics(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    answer_text(ctx, "raft_metrics", argc, argv, ext_node_metrics);
}

static void fn_leader(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_node *n = func_acquire(ctx, "raft_leader", argc, argv, NULL);
    uint64_t id;
    (void)argc;
    (void)argv;
    if (n == NULL) {
        return;
    }
    id = ext_node_leader(n);
    ext_registry_release(n);
    if (id == 0) {
        sqlite3_result_null(ctx);
    } else {
        sqlite3_result_int64(ctx, (sqlite3_int64)id);
    }
}

/* text_call runs @op on the node of @ctx's database (@fn names the SQL
 * function): its message is the result, or "@fn: <message>" the error
 * (RAFTSQL_INTERRUPTED when @op was interrupted, else SQLITE_ERROR). */
static void text_call(sqlite3_context *ctx, const char *fn, int argc,
                      sqlite3_value **argv,
                      int (*op)(struct ext_node *n,
                                const struct ext_exec_probe *probe, char *msg,
                                size_t msg_len))
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    struct ext_node *n = func_acquire(ctx, fn, argc, argv, NULL);
    char msg[1024], err[1100];
    int rc;
    if (n == NULL) {
        return;
    }
    rc = op(n, &probe, msg, sizeof msg);
    ext_registry_release(n);
    if (rc != 0) {
        snprintf(err, sizeof err, "%s: %s", fn, msg);
        func_call_error(
            ctx, rc == RAFT_CANCELED ? RAFTSQL_INTERRUPTED : SQLITE_ERROR, err);
        return;
    }
    sqlite3_result_text(ctx, msg, -1, SQLITE_TRANSIENT);
}

static int tls_reload_op(struct ext_node *n, const struct ext_exec_probe *probe,
                         char *msg, size_t msg_len)
{
    (void)probe; /* it does not wait */
    return ext_node_tls_reload(n, msg, msg_len);
}

static void fn_tls_reload(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    text_call(ctx, "raft_tls_reload", argc, argv, tls_reload_op);
}

static void fn_repair(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    text_call(ctx, "raft_repair", argc, argv, ext_node_repair);
}

/* fn_lease_end answers raft_lease_end(): ends the write lease in force
 * (ext_node_lease_end). */
static void fn_lease_end(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    text_call(ctx, "raft_lease_end", argc, argv, ext_node_lease_end);
}

/* busy_statements counts the statements of @db stepped and not yet
 * finished or reset (the one running the caller among them). */
static int busy_statements(sqlite3 *db)
{
    int busy = 0;
    for (sqlite3_stmt *s = sqlite3_next_stmt(db, NULL); s != NULL;
         s = sqlite3_next_stmt(db, s)) {
        busy += sqlite3_stmt_busy(s) != 0;
    }
    return busy;
}

/* barrier_refused says why a barrier on @ctx's connection would not make
 * its next reads fresh, as @ctx's RAFTSQL_INVALID error, and returns
 * true; false when it would. Its reads keep the snapshot of a read
 * transaction open when it runs: one of a BEGIN, of an unfinished
 * statement (a cursor left open), or of the statement calling it when
 * that one reads a table (its snapshot was taken before the call). A
 * statement that holds none (a finished one, SELECT 1 not reset) is no
 * reason. */
static bool barrier_refused(sqlite3_context *ctx)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);

    if (!sqlite3_get_autocommit(db)) {
        func_call_error(ctx, RAFTSQL_INVALID,
                        "raft_barrier: this connection is inside a transaction "
                        "(BEGIN), whose reads keep the snapshot they started "
                        "with; call it outside one");
        return true;
    }
    /* sqlite3_txn_state came with SQLite 3.34: before it, only the
     * unfinished statements are seen. */
    if (sqlite3_libversion_number() >= 3034000
            ? sqlite3_txn_state(db, NULL) == SQLITE_TXN_NONE
            : busy_statements(db) <= 1) {
        return false;
    }
    if (busy_statements(db) > 1) {
        func_call_error(ctx, RAFTSQL_INVALID,
                        "raft_barrier: an unfinished statement on this "
                        "connection holds a read transaction, whose snapshot "
                        "its reads would keep: finish or reset it first (read "
                        "its rows to the end, or close its cursor)");
    } else {
        func_call_error(ctx, RAFTSQL_INVALID,
                        "raft_barrier: this statement reads tables, from a "
                        "snapshot taken before the barrier: call it in a "
                        "statement of its own (SELECT raft_barrier()), then "
                        "read");
    }
    return true;
}

/* raft_barrier(): the read index, once this node applied it (node.h,
 * ext_node_barrier); RAFTSQL_STALE when no leader confirmed it in time,
 * RAFTSQL_INTERRUPTED when interrupted, RAFTSQL_BUSY when too many
 * barriers wait, RAFTSQL_DIVERGED at once on a diverged replica; refused (RAFTSQL_INVALID) when the connection's reads
 * would keep an older snapshot (barrier_refused). */
static void fn_barrier(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    struct ext_node *n;
    char msg[512];
    uint64_t index = 0;
    int rc;
    if (barrier_refused(ctx)) {
        return;
    }
    n = func_acquire(ctx, "raft_barrier", argc, argv, NULL);
    if (n == NULL) {
        return;
    }
    rc = ext_node_barrier(n, &probe, &index, msg, sizeof msg);
    ext_registry_release(n);
    if (rc != 0) {
        /* Nothing is written: every failure is a read that could not
         * be made fresh (no confirmed leader, not applied in time). */
        func_call_error(ctx,
                        rc == RAFT_CANCELED   ? RAFTSQL_INTERRUPTED
                        : rc == RAFT_BUSY     ? RAFTSQL_BUSY
                        : rc == RAFT_DIVERGED ? RAFTSQL_DIVERGED
                                              : RAFTSQL_STALE,
                        msg);
        return;
    }
    sqlite3_result_int64(ctx, (sqlite3_int64)index);
}

static void fn_cluster_id(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_node *n = func_acquire(ctx, "raft_cluster_id", argc, argv, NULL);
    char hex[EXT_CLUSTER_ID_HEX];
    bool known;
    (void)argc;
    (void)argv;
    if (n == NULL) {
        return;
    }
    known = ext_node_cluster_id(n, hex);
    ext_registry_release(n);
    if (known) {
        sqlite3_result_text(ctx, hex, -1, SQLITE_TRANSIENT);
    } else {
        sqlite3_result_null(ctx);
    }
}

/* raft_verify(): the replica checksum recomputed from the file (verify.h);
 * it needs no node, but the node that serves the file (in this process,
 * or another's, to which the call goes) is marked diverged when the file
 * differs from its running checksum. */
static void fn_verify(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *file = func_call_main_file(ctx, "raft_verify");
    char msg[600], err[700], differ[300];
    struct sql_copy_gate gate;
    struct ext_node *n;
    char *json;
    if (file == NULL) {
        return;
    }
    n = ext_registry_acquire(file);
    if (n == NULL && !attach_server_serving() &&
        attach_client_call(ctx, file, "raft_verify", argc, argv, NULL)) {
        return;
    }
    if (n != NULL) {
        /* A plain write of this node committed to the file but not yet
         * recorded would show as a difference (ext_node_copy_gate). */
        ext_node_copy_gate(n, &gate);
    }
    json = verify_json(file, n != NULL ? &gate : NULL, differ, sizeof differ,
                       msg, sizeof msg);
    if (n != NULL && json != NULL && differ[0] != '\0') {
        snprintf(err, sizeof err,
                 "raft_verify found the database file differs from the "
                 "running checksum in %s (bit rot, or a write that bypassed "
                 "every hook)",
                 differ);
        ext_node_mark_diverged(n, err);
    }
    if (n != NULL) {
        ext_registry_release(n);
    }
    if (json == NULL) {
        snprintf(err, sizeof err, "raft_verify: %s", msg);
        sqlite3_result_error(ctx, err, -1);
        return;
    }
    sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    free(json);
}

static void fn_stop(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *file = func_call_main_file(ctx, "raft_stop");
    char msg[512];
    (void)argc;
    (void)argv;
    if (file == NULL) {
        return;
    }
    if (ext_registry_stop(file) != 0) {
        if (!attach_server_serving() &&
            attach_client_call(ctx, file, "raft_stop", argc, argv, NULL)) {
            return;
        }
        snprintf(msg, sizeof msg,
                 "raft_stop: no raftsql node runs for %s, in this process "
                 "or another of this machine",
                 file);
        func_call_error(ctx, RAFTSQL_NO_NODE, msg);
        return;
    }
    /* Statements prepared while the node served the file are authorized
     * again at their next step: the guard now refuses their writes, no
     * node serving it (a host's cached INSERT included). */
    ext_guard_expire_all();
    sqlite3_result_text(ctx, "stopped", -1, SQLITE_STATIC);
}

/* register_members and register_data register their groups of functions
 * (members.h, func_data.h), which need no connection state. */
static int register_members(sqlite3 *db, void *cs)
{
    (void)cs;
    return members_register(db);
}

static int register_data(sqlite3 *db, void *cs)
{
    (void)cs;
    return func_data_register(db);
}

/* What a function's user data is. */
enum func_user_data {
    FUNC_NONE,      /* NULL */
    FUNC_CONN,      /* the connection state */
    FUNC_CONN_OWNER /* the connection state, freed with the function */
};

/* The functions ext_func_register registers, in this order. A row either
 * names one function (SQLITE_UTF8 | SQLITE_DIRECTONLY) or registers a
 * group of them (@group, with the connection state). */
static const struct func_def {
    const char *name;
    int n_arg;
    enum func_user_data data;
    void (*fn)(sqlite3_context *ctx, int argc, sqlite3_value **argv);
    int (*group)(sqlite3 *db, void *cs);
} func_defs[] = {
    {"raft_exec", -1, FUNC_CONN_OWNER, fn_exec, NULL},
    {"raft_last_insert_rowid", 0, FUNC_CONN, fn_last_insert_rowid, NULL},
    {"raft_last_error", 0, FUNC_NONE, fn_last_error, NULL},
    {"raft_start", 1, FUNC_NONE, fn_start, NULL},
    {"raft_status", 0, FUNC_NONE, fn_status, NULL},
    {"raft_metrics", 0, FUNC_NONE, fn_metrics, NULL},
    {"raft_leader", 0, FUNC_NONE, fn_leader, NULL},
    {"raft_stop", 0, FUNC_NONE, fn_stop, NULL},
    {"raft_tls_reload", 0, FUNC_NONE, fn_tls_reload, NULL},
    {"raft_repair", 0, FUNC_NONE, fn_repair, NULL},
    {"raft_lease_end", 0, FUNC_NONE, fn_lease_end, NULL},
    {"raft_cluster_id", 0, FUNC_NONE, fn_cluster_id, NULL},
    {"raft_verify", 0, FUNC_NONE, fn_verify, NULL},
    {NULL, 0, FUNC_NONE, NULL, func_query_register},
    {"raft_barrier", 0, FUNC_NONE, fn_barrier, NULL},
    {NULL, 0, FUNC_NONE, NULL, register_members},
    {NULL, 0, FUNC_NONE, NULL, register_data},
};

int ext_func_register(sqlite3 *db)
{
    const int admin = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    struct conn_state *cs = sqlite3_malloc(sizeof *cs);
    int rc = SQLITE_OK;
    if (cs == NULL) {
        return SQLITE_NOMEM;
    }
    memset(cs, 0, sizeof *cs);
    /* The apply connection must not have these functions: add a new one
     * to the list in sqlbridge.c too. raft_exec, first, owns the state:
     * SQLite frees it when the connection closes or the function is
     * replaced, or at once when its registration fails. The first failure
     * ends the walk; the functions before it stay registered. */
    for (size_t i = 0;
         rc == SQLITE_OK && i < sizeof func_defs / sizeof func_defs[0]; i++) {
        const struct func_def *d = &func_defs[i];
        if (d->group != NULL) {
            rc = d->group(db, cs);
            continue;
        }
        rc = sqlite3_create_function_v2(
            db, d->name, d->n_arg, admin, d->data == FUNC_NONE ? NULL : cs,
            d->fn, NULL, NULL,
            d->data == FUNC_CONN_OWNER ? sqlite3_free : NULL);
    }
    return rc;
}
