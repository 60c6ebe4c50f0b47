/* The pace of a snapshot's large writes, private to sql/: the copy that
 * sql_fsm_snapshot_create makes with VACUUM INTO, and the install's copy
 * of a snapshot into the live database's WAL (sql_fsm_snapshot_install).
 * Each writes a file as large as the database into the page cache as
 * fast as a core goes, and the kernel writes it back in bursts of
 * gigabytes (dirty_background_ratio of a large memory), or at the
 * copy's fsync; every log fsync of the node, and of the nodes sharing
 * the disk, then waits behind them (docs/performance.md, "A snapshot's
 * copy and install paced"). The pace, told of the bytes written so far:
 *
 * - hands what the file holds dirty to writeback every
 *   COPY_PACE_FLUSH_BYTES written (sync_file_range WRITE over the whole
 *   file), waiting first for the writeback it started the time before,
 *   so at most about two windows of the file are ever dirty;
 * - while the cluster takes writes (struct sql_pace: its commit index
 *   moved within the last COPY_PACE_IDLE_MS), writes no more than the
 *   rate from where the pace began to hold, plus one window, sleeping on
 *   the writer's thread; with no writes to protect the copy goes at full
 *   speed, as the transfer does (raft/uv_snapshot.c);
 *
 * Thread: not thread-safe; one pace belongs to one copy, and every call
 * is made on the thread that runs it. */

#ifndef SQL_COPY_PACE_H
#define SQL_COPY_PACE_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "sql.h"

struct sql_fsm;

/* Bytes written between two hand-offs to writeback. */
#define COPY_PACE_FLUSH_BYTES (8u << 20)

/* The commit index idle this long (ms): the cluster takes no writes. */
#define COPY_PACE_IDLE_MS 1000

/* The pace of one copy. Fields are private to copy_pace.c. */
struct copy_pace {
    struct sql_pace cfg; /* rate (0: no limit, writeback still handed
                             out) and the commit index's source */
    struct sql_fsm *f;   /* whose applied index tells writes when
                             @cfg has no source */
    const char *path;    /* the file written (borrowed) */
    int fd;              /* on @path once it exists, else -1 */
    uint64_t next_ns;    /* the next look (copy_pace_step), monotonic ns */
    uint64_t flushed;    /* bytes written at the last hand-off */
    uint64_t commit;     /* the commit index at the last look (or at
                             init) */
    uint64_t moved_ns;   /* when it last moved (0: not seen moving) */
    bool holding;        /* the pace holds (writes go on) since ... */
    uint64_t from_ns;    /* ... this time, monotonic ns, ... */
    uint64_t from_bytes; /* ... and the bytes written then */
    uint64_t slept_ns;   /* total time slept */
};

/* copy_pace_init sets @p up for a copy to the file @path (borrowed until
 * copy_pace_close; NULL: copy_pace_wrote_file only, never a descriptor
 * of its own) of @f's database at @cfg (copied; NULL or a rate of
 * 0: never slept, writeback still handed out). */
void copy_pace_init(struct copy_pace *p, struct sql_fsm *f,
                    const struct sql_pace *cfg, const char *path);

/* copy_pace_step is called from a copy's progress handler: at most every
 * 2 ms it takes the file's size for the bytes written and paces them
 * (copy_pace_wrote). */
void copy_pace_step(struct copy_pace *p);

/* copy_pace_wrote tells @p that @bytes were written so far: it hands the
 * file's dirty pages to writeback once a window more was written, and
 * sleeps as long as the pace asks. Errors (the file
 * not yet there, a sync_file_range refused) are ignored: the pace only
 * spreads the writes, which the writer's own fsync makes durable. */
void copy_pace_wrote(struct copy_pace *p, uint64_t bytes);

/* copy_pace_wrote_file is copy_pace_wrote for writes through the VFS
 * file @file (paced_vfs.c): the hand-off to the disk is the file's own
 * xSync (SQLITE_SYNC_NORMAL: fdatasync), on no descriptor of the pace's
 * own (closing one would drop every POSIX lock the process holds on the
 * file, SQLite's among them). Returns that xSync's code (SQLITE_OK when
 * none was due): the caller must report a failure at the writer's next
 * sync, since Linux reports a lost write-back once per open file and
 * that sync would find none. */
int copy_pace_wrote_file(struct copy_pace *p, uint64_t bytes,
                         sqlite3_file *file);

/* copy_pace_close closes @p's descriptor, if it opened one. Returns the
 * time it asked to sleep, ms. */
uint64_t copy_pace_close(struct copy_pace *p);

#endif /* SQL_COPY_PACE_H */
