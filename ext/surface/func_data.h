/* The SQL functions that bring data in and out: raft_backup(path) and
 * raft_load_sql(path) (docs/data.md). */

#ifndef EXT_FUNC_DATA_H
#define EXT_FUNC_DATA_H

#include <sqlite3ext.h>

/* func_data_register registers raft_backup and raft_load_sql on @db, both
 * SQLITE_DIRECTONLY. Returns SQLITE_OK or SQLite's error. Any thread. */
int func_data_register(sqlite3 *db);

#endif /* EXT_FUNC_DATA_H */
