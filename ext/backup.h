/* raft_backup(): a consistent copy of a replica at one applied index,
 * written to a new file, that can bootstrap a new cluster
 * (bootstrap_from=). */

#ifndef EXT_BACKUP_H
#define EXT_BACKUP_H

#include <stddef.h>

/* backup_write copies the replica file @db_path into the new file @target
 * (a consistent copy, VACUUM INTO in one read transaction on a read-only
 * connection of its own: sql_snapshot_write) and returns its description,
 * malloc'd JSON text the caller frees:
 *   {"index": N, "term": T, "path": "<@target made absolute>",
 *    "bytes": B}
 * (the applied index and term the copy reflects, its size). Nothing is
 * ever overwritten: a @target that exists is refused, as is one in a
 * directory that does not exist; a copy that fails half-way is removed.
 * On failure returns NULL and @errmsg (@errmsg_len bytes) names @target
 * and the cause. Errors (in @errmsg): the target exists, its directory is
 * missing or no directory, the copy failed (disk full, I/O error), the
 * file is no replica. Thread: any; blocks for the copy (O(the database)). */
char *backup_write(const char *db_path, const char *target, char *errmsg,
                   size_t errmsg_len);

#endif /* EXT_BACKUP_H */
