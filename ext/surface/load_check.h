/* raft_load_sql's check of a whole script before its first chunk: the
 * script runs on a private temporary database that holds the replica's
 * schema, as the sqlite3 shell would run it, so that a statement that
 * cannot load is refused, naming its line, before anything changes; and
 * the rows of the virtual tables a .dump declares are read back there,
 * to be loaded through the tables themselves. Every statement sent also
 * passes raft_exec's own check of a statement (precheck_statement), so
 * that what raft_exec refuses is refused here, before the first chunk,
 * and no chunk is refused when applied. */

#ifndef EXT_LOAD_CHECK_H
#define EXT_LOAD_CHECK_H

#include <stdbool.h>
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
 *     shell runs it (PRAGMA writable_schema honoured; other PRAGMAs
 *     prepared, not run: their settings are the cluster's);
 *   - every statement sent (those of the script sent as written, the
 *     CREATE VIRTUAL TABLE a .dump's declaration is sent as, the rows
 *     rebuilt; not PRAGMA writable_schema nor a virtual table's shadow
 *     tables, which are checked only) passes raft_exec's check of one
 *     statement first, before it runs (precheck_statement, the rules of
 *     sql_refusal_action, sql_refusal_statement and
 *     sql_refusal_setting_alone, noted by an authorizer of the temporary
 *     database as the guard notes them for raft_exec's check): so no
 *     chunk is refused for what raft_exec refuses, and the chunks need
 *     no check of their own on the way;
 *   - then, for each virtual table of @p->vtabs, its rows are read back
 *     and added to @p (load_plan_add) as INSERT statements into the
 *     table itself (rowid or docid, then its columns, values written by
 *     SQLite's quote()), after FTS5's configuration (INSERT INTO
 *     ft(ft, rank) VALUES(key, value), but its version), so that each
 *     node builds the table's shadow tables through its module.
 * The replica's rows are not copied: what depends on them (a UNIQUE
 * constraint against a row already there, a foreign key) is found by
 * the load itself, which stops at that chunk; so is what raft_exec
 * refuses only when it evaluates a value (a 'localtime' modifier read
 * from a column). Returns 0, or RAFT_INVALID with @errmsg (@errmsg_len
 * bytes) "line L: <statement, shortened>: <why>" and *@out_refused
 * (always written):
 *   - true: raft_exec's policy refuses the statement, <why> in its words
 *     ("VACUUM cannot be used in raft_exec: ...");
 *   - false: SQLite's error running it there, or a parameter without a
 *     value ("missing value for parameter 1 (?)": a chunk binds none);
 * RAFT_NOMEM; RAFT_IOERR when the temporary database cannot be made.
 * Thread: any (it blocks for the script's run). */
int load_check_run(const char *db_path, struct ext_load_plan *p,
                   const char *text, bool *out_refused, char *errmsg,
                   size_t errmsg_len);

#endif /* EXT_LOAD_CHECK_H */
