/* The write functions with options (ext_node_exec): RETURNING rows
 * and client request ids.
 *
 *   SELECT raft_query('INSERT INTO t(a) VALUES (?) RETURNING id, a', 'x');
 *     -> {"results":[{"columns":["id","a"],"rows":[[1,"x"]]}],
 *         "changes":1,"last_insert_rowid":1}
 *   SELECT raft_exec_id('order-42', 'INSERT INTO t(a) VALUES (?)', 'x');
 *     -> 1, and 1 again for a retry under 'order-42', applied once
 *   SELECT raft_query_id('order-43', 'DELETE FROM t RETURNING id');
 *
 * The id is TEXT or a BLOB of 1 to 256 bytes, or an INTEGER (taken as
 * its decimal text: 42 and '42' are the same id). Parameters bind as for
 * raft_exec (by position: the i-th value binds parameter index i, also
 * of a named one). From another process these go through the attach
 * socket like raft_exec.
 *
 * LIMITATIONS: the rows are JSON text (sql/rows.c has the shape), capped
 * by the leader's max_result_bytes; a retry outside the leader's window
 * (request_id_window ids, request_id_window_ms) applies again. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../raftsql.h"
#include "func.h"
#include "func_acquire.h"
#include "func_call.h"
#include "precheck.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

/* Most parameters one call takes (SQLite's own default limit). */
#define EXT__QUERY_MAX_PARAMS 32766

/* What one function of this file is. */
struct query_fn {
    const char *name; /* its SQL name */
    bool has_id;      /* the first argument is the request id */
    bool want_rows;   /* it returns the rows as JSON */
};

static const struct query_fn query_fns[] = {
    {"raft_query", false, true},
    {"raft_exec_id", true, false},
    {"raft_query_id", true, true},
};

/* request_id points *@out at the id of argument @v (an INTEGER is
 * written as decimal text into @num), or reports the error. */
static bool request_id(sqlite3_context *ctx, const struct query_fn *q,
                       sqlite3_value *v, char num[32],
                       struct ext_exec_opts *out)
{
    char msg[256];
    int len;

    switch (sqlite3_value_type(v)) {
        case SQLITE_INTEGER:
            len = snprintf(num, 32, "%lld", sqlite3_value_int64(v));
            out->request_id = num;
            out->request_id_len = (size_t)len;
            return true;
        case SQLITE_TEXT:
            out->request_id = (const char *)sqlite3_value_text(v);
            break;
        case SQLITE_BLOB:
            out->request_id = sqlite3_value_blob(v);
            break;
        default:
            snprintf(msg, sizeof msg,
                     "%s: the request id (first argument) must be TEXT, a "
                     "BLOB or an INTEGER, not %s",
                     q->name,
                     sqlite3_value_type(v) == SQLITE_NULL ? "NULL" : "REAL");
            func_call_error(ctx, RAFTSQL_INVALID, msg);
            return false;
    }
    len = sqlite3_value_bytes(v);
    if (len < 1 || len > EXT_REQUEST_ID_MAX || out->request_id == NULL) {
        snprintf(msg, sizeof msg,
                 "%s: the request id must be 1 to %d bytes, not %d", q->name,
                 EXT_REQUEST_ID_MAX, len);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return false;
    }
    out->request_id_len = (size_t)len;
    return true;
}

/* result_error reports failed write @res, naming @q where the message
 * names raft_exec. */
static void result_error(sqlite3_context *ctx, const struct query_fn *q,
                         const struct ext_exec_result *res)
{
    static const char prefix[] = "raft_exec:";
    char msg[sizeof res->errmsg + 32];

    if (strncmp(res->errmsg, prefix, sizeof prefix - 1) == 0) {
        snprintf(msg, sizeof msg, "%s:%s", q->name,
                 res->errmsg + sizeof prefix - 1);
    } else {
        snprintf(msg, sizeof msg, "%s", res->errmsg);
    }
    func_call_error(
        ctx, res->sqlite_rc != SQLITE_OK ? res->sqlite_rc : SQLITE_ERROR, msg);
}

/* fn_query is raft_query, raft_exec_id and raft_query_id (user data: the
 * connection's state, func.c). */
static void fn_query(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                     const struct query_fn *q, void *cs)
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    struct ext_exec_opts opts = {.want_rows = q->want_rows};
    struct ext_exec_result *res = NULL;
    struct sql_param *params = NULL;
    struct ext_node *n;
    int first = q->has_id ? 1 : 0;
    unsigned n_params;
    const char *sql;
    char num[32], msg[256];
    int64_t rowid;

    if (argc <= first || sqlite3_value_type(argv[first]) != SQLITE_TEXT) {
        snprintf(msg, sizeof msg,
                 "%s: the %s argument must be the SQL text of the write",
                 q->name, first == 0 ? "first" : "second");
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return;
    }
    if (q->has_id && !request_id(ctx, q, argv[0], num, &opts)) {
        return;
    }
    if (argc - 1 - first > EXT__QUERY_MAX_PARAMS) {
        snprintf(msg, sizeof msg, "%s: too many parameters", q->name);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return;
    }
    if (!sqlite3_get_autocommit(sqlite3_context_db_handle(ctx))) {
        snprintf(msg, sizeof msg,
                 "%s: not applied: this connection is inside a transaction "
                 "(BEGIN); commit or roll it back first: each write is a "
                 "transaction of its own",
                 q->name);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return;
    }
    rowid = *func_conn_rowid(cs);
    n = func_acquire(ctx, q->name, argc, argv, &rowid);
    if (n == NULL) {
        *func_conn_rowid(cs) = rowid; /* forwarded, or unchanged */
        return;
    }
    res = calloc(1, sizeof *res);
    if (res == NULL) {
        sqlite3_result_error_nomem(ctx);
        goto out;
    }
    if (func_call_params(ctx, q->name, argc, argv, first, func_conn_checked(cs),
                         res->errmsg, sizeof res->errmsg, &params,
                         &n_params) != 0) {
        goto out;
    }
    sql = (const char *)sqlite3_value_text(argv[first]);
    ext_node_exec(n, sql, (size_t)sqlite3_value_bytes(argv[first]), params,
                  n_params, &opts, &probe, res);
    if (res->kind != EXT_EXEC_OK) {
        result_error(ctx, q, res);
    } else if (q->want_rows) {
        *func_conn_rowid(cs) = res->last_insert_rowid;
        sqlite3_result_text(ctx, res->rows, -1, SQLITE_TRANSIENT);
    } else {
        *func_conn_rowid(cs) = res->last_insert_rowid;
        sqlite3_result_int64(ctx, res->changes);
    }
out:
    ext_registry_release(n);
    free(params);
    if (res != NULL) {
        ext_exec_result_clear(res);
    }
    free(res);
}

static void fn_raft_query(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    fn_query(ctx, argc, argv, &query_fns[0], sqlite3_user_data(ctx));
}

static void fn_raft_exec_id(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv)
{
    fn_query(ctx, argc, argv, &query_fns[1], sqlite3_user_data(ctx));
}

static void fn_raft_query_id(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv)
{
    fn_query(ctx, argc, argv, &query_fns[2], sqlite3_user_data(ctx));
}

int func_query_register(sqlite3 *db, void *cs)
{
    const int admin = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    void (*const fns[])(sqlite3_context *, int, sqlite3_value **) = {
        fn_raft_query, fn_raft_exec_id, fn_raft_query_id};
    int rc = SQLITE_OK;

    for (size_t i = 0; rc == SQLITE_OK && i < sizeof fns / sizeof fns[0]; i++) {
        rc = sqlite3_create_function_v2(db, query_fns[i].name, -1, admin, cs,
                                        fns[i], NULL, NULL, NULL);
    }
    return rc;
}
