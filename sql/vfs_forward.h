/* A VFS that forwards every method to another (private to sql/): the
 * base of the apply connection's entry-time VFS (determinism.c) and of
 * the checkpointer's paced VFS (paced_vfs.c), which each override what
 * differs. The methods pass the wrapped VFS object itself (the unix VFS
 * keeps state in its pAppData); the wrapper's pAppData points at the
 * slot that holds it, a member of the wrapper's own context (which finds
 * itself from there: container_of). */

#ifndef SQL_VFS_FORWARD_H
#define SQL_VFS_FORWARD_H

#include <sqlite3ext.h>

/* vfs_forward_fill fills @v (version 2) to forward every method to
 * *@base_slot, registered as @name (borrowed for @v's life): @v's
 * pAppData is @base_slot, szOsFile and mxPathname those of the base. The
 * caller then overrides methods and registers @v. */
void vfs_forward_fill(sqlite3_vfs *v, sqlite3_vfs **base_slot,
                      const char *name);

/* vfs_forward_base returns the VFS @v forwards to. */
sqlite3_vfs *vfs_forward_base(sqlite3_vfs *v);

/* vfs_forward_current_time_int64 is the forwarded xCurrentTimeInt64: the
 * base's, or its xCurrentTime in ms where it has none. */
int vfs_forward_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out);

#endif /* SQL_VFS_FORWARD_H */
