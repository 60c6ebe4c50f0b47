/* The raftsql SQL functions (raft_start, raft_exec, ...); see raftsql.h
 * and the README for what each takes and returns. */

#ifndef EXT_FUNC_H
#define EXT_FUNC_H

#include <stdbool.h>

#include <sqlite3ext.h>

#include "node.h"

/* ext_func_register registers every raftsql SQL function on @db, with
 * per-connection state freed when the connection closes. The admin
 * functions are SQLITE_DIRECTONLY (not callable from triggers or views).
 * Returns SQLITE_OK, SQLITE_NOMEM, or SQLite's error. Any thread. */
int ext_func_register(sqlite3 *db);

/* func_acquire returns the node of @ctx's main database file with a
 * reference (release it with ext_registry_release), or reports through
 * sqlite3_result_error, naming function @fn, that the database is not a
 * file or that no node runs for it, and returns NULL. The caller's
 * thread. */
struct ext_node *func_acquire(sqlite3_context *ctx, const char *fn);

/* func_interrupted is the probe of a waiting call (struct
 * ext_exec_probe) on connection @arg (a sqlite3 *): true once
 * sqlite3_interrupt was called on it. The caller's thread. */
bool func_interrupted(void *arg);

#endif /* EXT_FUNC_H */
