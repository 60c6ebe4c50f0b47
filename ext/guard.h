/* The write guard: an authorizer on host connections that refuses direct
 * writes to a database replicated by a running node. */

#ifndef EXT_GUARD_H
#define EXT_GUARD_H

#include <sqlite3ext.h>

/* ext_guard_install sets the guard as @db's authorizer (replacing any
 * other: see https://sqlite.org/c3ref/set_authorizer.html). While a node
 * runs (or ran earlier in this process) for a database file, INSERT,
 * UPDATE, DELETE and schema changes on it (as "main" or ATTACHed under any
 * name) are denied at prepare time (SQLite reports "not authorized"; a
 * line naming raft_exec() is logged to stderr); TEMP objects and reads stay
 * allowed. Returns SQLITE_OK or SQLite's error. Any thread. */
int ext_guard_install(sqlite3 *db);

#endif /* EXT_GUARD_H */
