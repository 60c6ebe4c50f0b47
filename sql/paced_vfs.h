/* A VFS that paces the writes to a database file (private to sql/): the
 * background checkpointer's connection (checkpoint.c) opens the node's
 * database through it, so that the checkpoint after a snapshot's install,
 * which copies the whole database from the WAL into the file, can be
 * spread over time and handed to the disk as it goes (copy_pace.h)
 * rather than left dirty for its final fsync.
 *
 * It forwards every method to the default VFS (vfs_forward.h), and every
 * file method to the default VFS's file, which it wraps (the unix VFS's locks and shared
 * memory are its own, so connections through it and through the default
 * VFS on the same file see each other's locks as usual). Only xWrite to a
 * main database file differs, and only while a pace is set
 * (paced_vfs_set): each write is counted and the pace told
 * (copy_pace_wrote_file), which syncs the file (xSync,
 * SQLITE_SYNC_NORMAL) every COPY_PACE_FLUSH_BYTES and sleeps while the
 * cluster takes writes; a failure of those syncs is the next xSync's. */

#ifndef SQL_PACED_VFS_H
#define SQL_PACED_VFS_H

#include <sqlite3ext.h>

struct copy_pace;

/* One paced VFS, registered under its own name. */
struct paced_vfs {
    sqlite3_vfs vfs;        /* registered (not the default) */
    sqlite3_vfs *base;      /* the default VFS at init */
    char name[48];          /* "paced_raftsql-<address>" */
    struct copy_pace *pace; /* the pace of main database writes, NULL:
                                none; set by the thread that writes
                                through it (the caller serializes) */
    int registered;         /* 1 once sqlite3_vfs_register succeeded */
};

/* paced_vfs_init fills and registers @v. Returns 0, or an error code of
 * sql.h when there is no default VFS or the registration failed; @v is
 * then unusable, and paced_vfs_close a no-op. Thread: any. */
int paced_vfs_init(struct paced_vfs *v);

/* paced_vfs_set paces the main database writes of every file of @v with
 * @pace (borrowed until the next call; NULL: none). Thread: the one that
 * writes through @v, or with its writes excluded (checkpoint.c: run_mu).
 */
void paced_vfs_set(struct paced_vfs *v, struct copy_pace *pace);

/* paced_vfs_close unregisters @v, if registered; every connection
 * through it must be closed first. Thread: the one that initialized it
 * (checkpoint.c: the apply thread at open and close). */
void paced_vfs_close(struct paced_vfs *v);

#endif /* SQL_PACED_VFS_H */
