/* raft_load_sql's check of a whole script before its first chunk: the
 * script runs on a private temporary database that holds the replica's
 * schema, as the sqlite3 shell would run it, so that a statement that
 * cannot load is refused, naming its line, before anything changes; and
 * the rows of the virtual tables a .dump declares are read back there,
 * to be loaded through the tables themselves. */

#ifndef EXT_LOAD_CHECK_H
#define EXT_LOAD_CHECK_H

#include <stddef.h>

#include "load_plan.h"

/* load_check_run checks plan @p of script @text (load_plan_split), loaded
 * into the replica whose file is @db_path:
 *   - a private temporary database (SQLite's "" file: in memory, spilled
 *     to a temporary file as it grows) gets the schema of @db_path (its
 *     tables, indexes, views, triggers and virtual tables, raftsql's
 *     internal ones and their rows left out; an object that does not
 *     create there is left out, and one the script creates itself is
 *     dropped before the script's CREATE);
 *   - every statement of the script (@p->script, the raftsql_* ones left
 *     out by the plan) runs there in order, in one transaction, as the
 *     shell runs it (PRAGMA writable_schema honoured; other PRAGMAs not
 *     run: their settings are the cluster's);
 *   - then, for each virtual table of @p->vtabs, its rows are read back
 *     and added to @p (load_plan_add) as INSERT statements into the
 *     table itself (rowid or docid, then its columns, values written by
 *     SQLite's quote()), after FTS5's configuration (INSERT INTO
 *     ft(ft, rank) VALUES(key, value), but its version), so that each
 *     node builds the table's shadow tables through its module.
 * The replica's rows are not copied: what depends on them (a UNIQUE
 * constraint against a row already there, a foreign key) is found by
 * the load itself, which stops at that chunk. Returns 0, or RAFT_INVALID
 * with @errmsg (@errmsg_len bytes) "line L: <statement, shortened>:
 * <SQLite's error>"; RAFT_NOMEM; RAFT_IOERR when the temporary database
 * cannot be made. Thread: any (it blocks for the script's run). */
int load_check_run(const char *db_path, struct ext_load_plan *p,
                   const char *text, char *errmsg, size_t errmsg_len);

#endif /* EXT_LOAD_CHECK_H */
