/* Finding the node of a call (func_acquire.h). */

#include "func_acquire.h"

#include <stdio.h>
#include <string.h>

#include "../raftsql.h"
#include "attach_client.h"
#include "attach_server.h"
#include "func_call.h"
#include "guard.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

void func_acquire_settings_follow(sqlite3_context *ctx, int argc,
                                  sqlite3_value **argv)
{
    const char *sql;
    if (argc < 1 || sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        return;
    }
    sql = (const char *)sqlite3_value_text(argv[0]);
    if (sql != NULL && strcasestr(sql, "pragma") != NULL) {
        ext_guard_settings_sync(sqlite3_context_db_handle(ctx));
    }
}

struct ext_node *func_acquire(sqlite3_context *ctx, const char *fn, int argc,
                              sqlite3_value **argv, int64_t *out_rowid)
{
    const char *file = func_call_main_file(ctx, fn);
    struct ext_node *n;
    char msg[512];
    if (file == NULL) {
        return NULL;
    }
    n = ext_registry_acquire(file);
    if (n != NULL) {
        return n;
    }
    /* A thread of this process's attach server never forwards: its node
     * is stopping. */
    if (!attach_server_serving() &&
        attach_client_call(ctx, file, fn, argc, argv, out_rowid)) {
        func_acquire_settings_follow(ctx, argc, argv);
        return NULL;
    }
    snprintf(msg, sizeof msg,
             "%s: no raftsql node runs for %s, in this process or another "
             "of this machine; start one first (raft_start(config), or "
             "raftsql-node)",
             fn, file);
    func_call_error(ctx, RAFTSQL_NO_NODE, msg);
    return NULL;
}
