/* raft_backup(): a consistent copy of a replica at one applied index,
 * written to a new file, that can bootstrap a new cluster
 * (bootstrap_from=). */

#ifndef EXT_BACKUP_H
#define EXT_BACKUP_H

#include <stddef.h>

struct ext_node;

/* backup_write copies the replica file @db_path of node @n into the new
 * file @target (a consistent copy, VACUUM INTO in one read transaction on
 * a read-only connection of its own: sql_snapshot_write), checks the copy
 * against the running checksum stored in it (ext_node_copy_check, as a
 * snapshot is checked before it is sent) and sets *@out_json to its
 * description, malloc'd JSON text the caller frees:
 *   {"index": N, "term": T, "path": "<@target made absolute>",
 *    "bytes": B}
 * (the applied index and term the copy reflects, its size). Nothing is
 * ever overwritten: a @target that exists is refused, as is one in a
 * directory that does not exist; a copy that fails half-way, or differs
 * from the running checksum, is removed.
 * Returns 0, or an error with @errmsg (@errmsg_len bytes) naming @target
 * and the cause: RAFT_INVALID (the target is empty, names no file,
 * exists, cannot be created (its name too long, a directory not
 * searchable: the errno's text), or its directory is missing or no
 * directory), RAFT_DIVERGED (the copy holds a write the node did not
 * make: the replica is now marked diverged), RAFT_IOERR (the copy
 * failed: disk full, an I/O error, the file is no replica), RAFT_NOMEM.
 * Thread: any but @n's apply thread; blocks for the copy and its check
 * (O(the database)). */
int backup_write(struct ext_node *n, const char *db_path, const char *target,
                 char **out_json, char *errmsg, size_t errmsg_len);

#endif /* EXT_BACKUP_H */
