/* The node a raftsql SQL function call runs on: this process's node for
 * the caller's main database file, or, through its attach socket
 * (attach_client.h), the one another process of the machine runs. */

#ifndef EXT_FUNC_ACQUIRE_H
#define EXT_FUNC_ACQUIRE_H

#include <stdint.h>

#include <sqlite3ext.h>

#include "../runtime/node.h"

/* func_acquire returns the node of @ctx's main database file with a
 * reference (release it with ext_registry_release) when this process runs
 * it. Else it returns NULL with @ctx's result set: the answer of the node
 * another process of the machine runs for the file, to which the call of
 * @fn with its @argc arguments @argv was forwarded (attach_client.h), or
 * an error naming @fn: the database is not a file, or no node runs for
 * it. For a write function, @out_rowid (NULL for the others) receives the
 * raft_last_insert_rowid() of the other process's node after a forwarded
 * call (left as it was otherwise). The caller's thread; blocks while a
 * forwarded call runs. */
struct ext_node *func_acquire(sqlite3_context *ctx, const char *fn, int argc,
                              sqlite3_value **argv, int64_t *out_rowid);

/* func_acquire_settings_follow sets on the caller's connection the
 * cluster-wide settings its node has in force (ext_guard_settings_sync),
 * after a call whose first argument is SQL text naming a PRAGMA
 * (raft_exec('PRAGMA foreign_keys=ON'), ...): the notice is written before
 * the call's answer (applier.h), so the caller reads at once what it set.
 * Other calls pay one strcasestr. SQLite's thread of @ctx. */
void func_acquire_settings_follow(sqlite3_context *ctx, int argc,
                                  sqlite3_value **argv);

#endif /* EXT_FUNC_ACQUIRE_H */
