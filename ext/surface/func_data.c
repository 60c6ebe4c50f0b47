/* The SQL functions that bring data in and out of a replica:
 * raft_backup(path) (backup.h) and raft_load_sql(path) (load_sql.h).
 * A bootstrap from a file is a configuration key (bootstrap_from=,
 * boot.h).
 *
 *   .load ./build/raftsql
 *   SELECT raft_backup('/backups/app-2026-12-01.db');
 *   -- {"index":1234,"term":3,"path":"/backups/app-2026-12-01.db",
 *   --  "bytes":8851456}
 *   SELECT raft_load_sql('/data/dump.sql');
 *   -- {"path":"/data/dump.sql","chunks":12,"statements":11874,
 *   --  "applied":12,"skipped":0,"bytes":2841723}
 *
 * Both run on the node's process: a call on a process that runs no node
 * for the file goes to the process that does (attach_client.h), so a
 * relative path is refused there (it would name a file of the other
 * process's working directory).
 * Usage errors (arguments, paths, a transaction) are RAFTSQL_INVALID, a
 * diverged replica's backup RAFTSQL_DIVERGED, a second load RAFTSQL_BUSY.
 * LIMITATIONS: a backup of a diverged replica is refused (it would copy
 * the foreign write), and so is a copy that differs from the running
 * checksum (a foreign write not seen yet: the replica is then marked
 * diverged); with checksum=off the copy is not checked. A load resumes within the request id window only,
 * and after its chunks that are unchanged, their chunks before too. */

#include "func_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/err.h"
#include "../raftsql.h"
#include "../runtime/attach_sock.h"
#include "../runtime/node.h"
#include "attach_server.h"
#include "backup.h"
#include "func_acquire.h"
#include "func_call.h"
#include "load_sql.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

/* path_arg returns the one argument (@argc, @argv) of @fn as a path, or
 * reports an error (RAFTSQL_INVALID) and returns NULL: another number of
 * arguments, no text, an empty text; a relative path when the call is
 * about to go to another process's node (this process runs none for
 * @ctx's file). @what says what the path names. */
static const char *path_arg(sqlite3_context *ctx, const char *fn,
                            const char *what, int argc, sqlite3_value **argv)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    const char *file = sqlite3_db_filename(db, "main");
    const char *path;
    struct ext_attach_pointer p;
    struct ext_node *n;
    char msg[600];

    if (argc != 1) {
        snprintf(msg, sizeof msg,
                 "%s: takes one argument, the path of %s (%d given)", fn, what,
                 argc);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return NULL;
    }
    path = (const char *)sqlite3_value_text(argv[0]);
    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT || path == NULL ||
        path[0] == '\0') {
        snprintf(msg, sizeof msg, "%s: the path must be non-empty text", fn);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return NULL;
    }
    if (path[0] == '/' || file == NULL || file[0] == '\0') {
        return path;
    }
    n = ext_registry_acquire(file);
    if (n != NULL) {
        ext_registry_release(n);
        return path;
    }
    if (!attach_server_serving() && attach_sock_find(file, &p) == 0) {
        snprintf(msg, sizeof msg,
                 "%s: '%s' is relative, but the node of process %ld runs "
                 "this call and has another working directory: give an "
                 "absolute path",
                 fn, path, p.pid);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return NULL;
    }
    return path;
}

/* raft_backup(path): backup.h; the JSON text is the result. */
static void fn_backup(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *path = path_arg(ctx, "raft_backup", "the new file", argc, argv);
    struct ext_node *n;
    char why[600], msg[1400];
    const char *file;
    char *json = NULL;
    int rc;

    if (path == NULL) {
        return;
    }
    n = func_acquire(ctx, "raft_backup", argc, argv, NULL);
    if (n == NULL) {
        return;
    }
    file = sqlite3_db_filename(sqlite3_context_db_handle(ctx), "main");
    if (ext_node_diverged(n, why, sizeof why)) {
        ext_registry_release(n);
        snprintf(msg, sizeof msg,
                 "raft_backup: this replica is diverged (%s): it would copy "
                 "a write the cluster never made; back up another node, or "
                 "after the repair",
                 why);
        func_call_error(ctx, RAFTSQL_DIVERGED, msg);
        return;
    }
    rc = backup_write(n, file, path, &json, why, sizeof why);
    ext_registry_release(n);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "raft_backup: %s", why);
        func_call_error(ctx,
                        rc == RAFT_INVALID    ? RAFTSQL_INVALID
                        : rc == RAFT_DIVERGED ? RAFTSQL_DIVERGED
                        : rc == RAFT_NOMEM    ? SQLITE_NOMEM
                                              : SQLITE_ERROR,
                        msg);
        return;
    }
    sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    free(json);
}

/* raft_load_sql(path): load_sql.h; the JSON text is the result. */
static void fn_load_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    const char *path =
        path_arg(ctx, "raft_load_sql", "the SQL script", argc, argv);
    char why[1400], msg[1500];
    char *json = NULL;
    struct ext_node *n;
    int code = SQLITE_ERROR;

    if (path == NULL) {
        return;
    }
    if (!sqlite3_get_autocommit(sqlite3_context_db_handle(ctx))) {
        func_call_error(
            ctx, RAFTSQL_INVALID,
            "raft_load_sql: not applied: this connection is inside a "
            "transaction (BEGIN); commit or roll it back first");
        return;
    }
    n = func_acquire(ctx, "raft_load_sql", argc, argv, NULL);
    if (n == NULL) {
        return;
    }
    if (load_sql_run(
            n, ext_node_load_status(n), ext_node_max_request_bytes(n),
            sqlite3_db_filename(sqlite3_context_db_handle(ctx), "main"), path,
            &probe, &json, &code, why, sizeof why) != 0) {
        ext_registry_release(n);
        snprintf(msg, sizeof msg, "raft_load_sql: %s", why);
        func_call_error(ctx, code, msg);
        return;
    }
    ext_registry_release(n);
    sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    free(json);
}

int func_data_register(sqlite3 *db)
{
    const int admin = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    /* Any number of arguments: a wrong one is RAFTSQL_INVALID (path_arg),
     * not SQLite's own error when the call is prepared. */
    int rc = sqlite3_create_function_v2(db, "raft_backup", -1, admin, NULL,
                                        fn_backup, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function_v2(db, "raft_load_sql", -1, admin, NULL,
                                        fn_load_sql, NULL, NULL, NULL);
    }
    return rc;
}
