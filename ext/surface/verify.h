/* raft_verify(): the replica checksum recomputed from the database file
 * and compared with the running one stored with the applied index
 * (sql_checksum_verify), as the JSON the SQL function returns. */

#ifndef EXT_VERIFY_H
#define EXT_VERIFY_H

#include <stddef.h>

/* verify_json scans database file @path (O(its size), on the calling
 * thread, in one read transaction that the apply connection does not
 * wait for) and returns, malloc'd, {"index": N, "equal": true|false,
 * "stored": hex, "scanned": hex, "differ": [{"table", "stored",
 * "scanned"}...]}, or {"available": false, "why": ...} when no running
 * checksum is stored there. NULL on failure, with @errmsg (@errmsg_len
 * bytes) saying why (not a database, a page that does not read, out of
 * memory). When the file differs from the running checksum, @differ
 * (@differ_len bytes) gets the names of the tables that differ,
 * comma-separated; else "". Any thread. */
char *verify_json(const char *path, char *differ, size_t differ_len,
                  char *errmsg, size_t errmsg_len);

#endif /* EXT_VERIFY_H */
