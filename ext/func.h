/* The raftsql SQL functions (raft_start, raft_exec, ...); see raftsql.h
 * and the README for what each takes and returns. */

#ifndef EXT_FUNC_H
#define EXT_FUNC_H

#include <sqlite3ext.h>

/* ext_func_register registers every raftsql SQL function on @db, with
 * per-connection state freed when the connection closes. The admin
 * functions are SQLITE_DIRECTONLY (not callable from triggers or views).
 * Returns SQLITE_OK, SQLITE_NOMEM, or SQLite's error. Any thread. */
int ext_func_register(sqlite3 *db);

#endif /* EXT_FUNC_H */
