/* The virtual-table modules of SQLite's own build that keep their content
 * in shadow tables, and the names of those tables: what the write guard
 * leaves to SQLite (guard.c) and what raft_load_sql rebuilds from a dump
 * (load_plan.c). Pure (SQLite's string helpers only). */

#ifndef EXT_SHADOW_H
#define EXT_SHADOW_H

#include <stdbool.h>
#include <stddef.h>

/* shadow_module writes into @out (@out_len bytes) the module name of the
 * CREATE VIRTUAL TABLE text @sql (@len bytes: the word after USING, as
 * written), or "" when there is none. Pure; any thread. */
void shadow_module(const char *sql, size_t len, char *out, size_t out_len);

/* shadow_known tells whether @module (any case) is one of SQLite's own
 * modules with shadow tables: fts3, fts4, fts5, rtree, rtree_i32,
 * geopoly. Pure; any thread. */
bool shadow_known(const char *module);

/* shadow_suffix tells whether a table named <virtual table>_@suffix is a
 * shadow table of a virtual table of module @module (any case), as the
 * module's xShadowName says: "node", "parent", "rowid" for R*Tree and
 * geopoly, "content", "segments", "segdir", "docsize", "stat" for FTS3
 * and FTS4, "data", "idx", "content", "docsize", "config" for FTS5;
 * false for any other module. Pure; any thread. */
bool shadow_suffix(const char *module, const char *suffix);

#endif /* EXT_SHADOW_H */
