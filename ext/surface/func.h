/* The raftsql SQL functions (raft_start, raft_exec, ...); see raftsql.h
 * and docs/functions.md for what each takes and returns. */

#ifndef EXT_FUNC_H
#define EXT_FUNC_H

#include <sqlite3ext.h>

/* ext_func_register registers every raftsql SQL function on @db, with
 * per-connection state freed when the connection closes. The admin
 * functions are SQLITE_DIRECTONLY (not callable from triggers or views).
 * Returns SQLITE_OK, SQLITE_NOMEM, or SQLite's error. Any thread. */
int ext_func_register(sqlite3 *db);

struct ext_precheck_cache; /* precheck.h */

/* func_conn_rowid returns where connection state @cs (the user data of
 * raft_exec) keeps raft_last_insert_rowid(). The connection's thread. */
sqlite3_int64 *func_conn_rowid(void *cs);

/* func_conn_checked returns the precheck cache of connection state @cs.
 * The connection's thread. */
struct ext_precheck_cache *func_conn_checked(void *cs);

/* func_query_register registers raft_query, raft_exec_id and
 * raft_query_id (func_query.c) on @db with connection state @cs (owned
 * by raft_exec's registration). Returns SQLITE_OK or SQLite's error. */
int func_query_register(sqlite3 *db, void *cs);

#endif /* EXT_FUNC_H */
