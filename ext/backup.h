/* raft_backup(): a consistent copy of a replica at one applied index,
 * written to a new file, that can bootstrap a new cluster
 * (bootstrap_from=). */

#ifndef EXT_BACKUP_H
#define EXT_BACKUP_H

#include <stddef.h>

/* backup_write copies the replica file @db_path into the new file @target
 * (a consistent copy, VACUUM INTO in one read transaction on a read-only
 * connection of its own: sql_snapshot_write) and sets *@out_json to its
 * description, malloc'd JSON text the caller frees:
 *   {"index": N, "term": T, "path": "<@target made absolute>",
 *    "bytes": B}
 * (the applied index and term the copy reflects, its size). Nothing is
 * ever overwritten: a @target that exists is refused, as is one in a
 * directory that does not exist; a copy that fails half-way is removed.
 * Returns 0, or an error with @errmsg (@errmsg_len bytes) naming @target
 * and the cause: RAFT_INVALID (the target is empty, names no file,
 * exists, or its directory is missing or no directory), RAFT_IOERR (the
 * copy failed: disk full, an I/O error, the file is no replica),
 * RAFT_NOMEM. Thread: any; blocks for the copy (O(the database)). */
int backup_write(const char *db_path, const char *target, char **out_json,
                 char *errmsg, size_t errmsg_len);

#endif /* EXT_BACKUP_H */
