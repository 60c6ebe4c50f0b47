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
 * LIMITATIONS: a backup of a diverged replica is refused (it would copy
 * the foreign write). A load resumes only for the same file content
 * within the request id window (an edited script is a new load). */

#include "func_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach_server.h"
#include "attach_sock.h"
#include "backup.h"
#include "func.h"
#include "node.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

/* path_arg returns argument @v of @fn as a path, or reports an error and
 * returns NULL. A relative path is refused when the call is about to go
 * to another process's node (this process runs none for @ctx's file). */
static const char *path_arg(sqlite3_context *ctx, const char *fn,
                            sqlite3_value *v)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    const char *file = sqlite3_db_filename(db, "main");
    const char *path = (const char *)sqlite3_value_text(v);
    struct ext_attach_pointer p;
    struct ext_node *n;
    char msg[600];

    if (sqlite3_value_type(v) != SQLITE_TEXT || path == NULL ||
        path[0] == '\0') {
        snprintf(msg, sizeof msg, "%s: the path must be non-empty text", fn);
        sqlite3_result_error(ctx, msg, -1);
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
        sqlite3_result_error(ctx, msg, -1);
        return NULL;
    }
    return path;
}

/* raft_backup(path): backup.h; the JSON text is the result. */
static void fn_backup(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *path = path_arg(ctx, "raft_backup", argv[0]);
    struct ext_node *n;
    char why[600], msg[1400];
    const char *file;
    char *json;

    if (path == NULL) {
        return;
    }
    n = func_acquire(ctx, "raft_backup", argc, argv);
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
        sqlite3_result_error(ctx, msg, -1);
        return;
    }
    json = backup_write(file, path, why, sizeof why);
    ext_registry_release(n);
    if (json == NULL) {
        snprintf(msg, sizeof msg, "raft_backup: %s", why);
        sqlite3_result_error(ctx, msg, -1);
        return;
    }
    sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    free(json);
}

/* raft_load_sql(path): load_sql.h; the JSON text is the result. */
static void fn_load_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_exec_probe probe = {func_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    const char *path = path_arg(ctx, "raft_load_sql", argv[0]);
    char why[1400], msg[1500];
    char *json = NULL;
    struct ext_node *n;
    int code = SQLITE_ERROR;

    if (path == NULL) {
        return;
    }
    if (!sqlite3_get_autocommit(sqlite3_context_db_handle(ctx))) {
        sqlite3_result_error(ctx,
                             "raft_load_sql: not applied: this connection "
                             "is inside a transaction (BEGIN); commit or "
                             "roll it back first",
                             -1);
        return;
    }
    n = func_acquire(ctx, "raft_load_sql", argc, argv);
    if (n == NULL) {
        return;
    }
    if (ext_node_load_sql(n, path, &probe, &json, &code, why, sizeof why) !=
        0) {
        ext_registry_release(n);
        snprintf(msg, sizeof msg, "raft_load_sql: %s", why);
        sqlite3_result_error(ctx, msg, -1);
        sqlite3_result_error_code(ctx, code);
        return;
    }
    ext_registry_release(n);
    sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    free(json);
}

int func_data_register(sqlite3 *db)
{
    const int admin = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    int rc = sqlite3_create_function_v2(db, "raft_backup", 1, admin, NULL,
                                        fn_backup, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function_v2(db, "raft_load_sql", 1, admin, NULL,
                                        fn_load_sql, NULL, NULL, NULL);
    }
    return rc;
}
