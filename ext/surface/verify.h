/* raft_verify(): the replica checksum recomputed from the database file
 * and compared with the running one stored with the applied index
 * (sql_checksum_verify), as the JSON the SQL function returns. */

#ifndef EXT_VERIFY_H
#define EXT_VERIFY_H

#include <stddef.h>

#include "../../sql/sql.h"

/* verify_json scans database file @path (O(its size), on the calling
 * thread, in one read transaction that the apply connection does not
 * wait for) and returns, malloc'd, {"index": N, "equal": true|false,
 * "stored": hex, "scanned": hex, "differ": [{"table", "stored",
 * "scanned"}...]}, or {"available": false, "why": ...} when no running
 * checksum is stored there. NULL on failure, with @errmsg (@errmsg_len
 * bytes) saying why (not a database, a page that does not read, out of
 * memory). When the file differs from the running checksum, @differ
 * (@differ_len bytes) gets the names of the tables that differ,
 * comma-separated; else "". The scan's read transaction begins through
 * @gate (struct sql_copy_gate: the node's, so that a plain writer's
 * commit it has not recorded yet is not in the scan; NULL: none); a gate
 * that refuses fails the call, @errmsg saying why. Any thread. */
char *verify_json(const char *path, const struct sql_copy_gate *gate,
                  char *differ, size_t differ_len, char *errmsg,
                  size_t errmsg_len);

#endif /* EXT_VERIFY_H */
