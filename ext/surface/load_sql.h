/* raft_load_sql(path): a SQL script written through the node in bounded
 * chunks (load_plan.h), each a request with an id chained over the
 * chunks' content, so that a rerun after a failure (a kill, a timeout,
 * "outcome unknown", a SQL error fixed in the script) resumes: chunks
 * applied before, unchanged and after unchanged ones, come back as
 * duplicates and are not applied again. Its progress shows in
 * raft_status() (load). */

#ifndef EXT_LOAD_SQL_H
#define EXT_LOAD_SQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../runtime/exec.h"
#include "../runtime/load_status.h"
#include "../runtime/node.h"

/* Bounds of a chunk: statements and SQL bytes (at most half of the
 * node's max_request_bytes). */
#define EXT_LOAD_CHUNK_STMTS 1000
#define EXT_LOAD_CHUNK_BYTES (256u * 1024)

/* load_sql_run reads the script file @path, plans it (load_plan_split:
 * a replica's raftsql_* tables left out, a .dump's virtual tables
 * created through their modules), checks the whole of it on a temporary
 * database holding the schema of @n's database file @db_path
 * (load_check_run: nothing is written when a statement fails there),
 * makes its chunks (load_plan_finish, chunks of EXT_LOAD_CHUNK_STMTS
 * statements and EXT_LOAD_CHUNK_BYTES bytes, or half of
 * @max_request_bytes when less) and writes each chunk
 * through @n (ext_node_exec with the chunk's request id; none for
 * a PRAGMA's chunk, applied again on every run), in order,
 * recording the progress in @ls. On success returns 0 and *@out_json,
 * malloc'd (the caller frees it):
 *   {"path": ..., "chunks": N, "statements": S, "applied": A,
 *    "skipped": D, "bytes": B}
 * (D: chunks found applied by an earlier run). Otherwise returns an
 * error with @errmsg (@errmsg_len bytes) saying why and *@out_sqlite_rc
 * the caller's result code; the chunks before stay applied and a rerun
 * resumes after them (after those unchanged, with their chunks before):
 *   - the file: missing, unreadable, no regular file, empty, or a plan
 *     refused (load_plan_split's errors, naming the line): RAFT_INVALID
 *     (RAFTSQL_INVALID), RAFT_IOERR (SQLITE_IOERR) or RAFT_NOMEM,
 *     nothing written;
 *   - a statement that fails the check: "<path>: line L: <the
 *     statement, shortened>: <SQLite's error>", RAFT_INVALID
 *     (RAFTSQL_INVALID), nothing written; one that raft_exec's policy
 *     refuses (VACUUM, ATTACH, a TEMP object, sqlite_version(), a
 *     'localtime' literal, a PRAGMA that is not replicated, ...):
 *     "<path>: line L: <the statement, shortened>: <raft_exec's
 *     reason>", RAFT_INVALID (RAFTSQL_REFUSED, raft_exec's code for the
 *     same statement), nothing written; a parameter without a value:
 *     "... missing value for parameter 1 (?)", RAFTSQL_INVALID;
 *   - a chunk's SQL error: "chunk K of N (<path> line L: <the failing
 *     statement, shortened>): <SQLite's error>", RAFT_INVALID with
 *     SQLite's code of it; the statement is the chunk's first when the
 *     error is the first outcome of an earlier run (a duplicate);
 *   - a chunk not applied or of unknown outcome (no leader, timeout,
 *     interrupted, diverged): "chunk K of N (<path> line L: <its first
 *     statement>): <why>; run raft_load_sql again to resume",
 *     RAFT_TIMEOUT with the exec's RAFTSQL_* code; interrupted between
 *     chunks: RAFT_CANCELED, RAFTSQL_INTERRUPTED;
 *   - a chunk refused by the wire gate (a member of an older release
 *     cannot apply its request id, ext/runtime/wire_gate.h): "chunk K of N
 *     (...): not applied: <why>; raft_load_sql works once every member
 *     runs this release (...)", RAFT_FORMAT with the exec's RAFTSQL_*
 *     code;
 *   - another load running on @ls: RAFT_BUSY, RAFTSQL_BUSY.
 * Thread: any caller's; blocks for the whole load, each chunk within
 * the node's exec_timeout_ms; @probe ends it (interrupted) between and
 * during chunks. */
int load_sql_run(struct ext_node *n, struct ext_load_status *ls,
                 uint64_t max_request_bytes, const char *db_path,
                 const char *path, const struct ext_exec_probe *probe,
                 char **out_json, int *out_sqlite_rc, char *errmsg,
                 size_t errmsg_len);

#endif /* EXT_LOAD_SQL_H */
