/* A VFS that paces the writes to a database file: paced_vfs.h. */

#include "paced_vfs.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "copy_pace.h"
#include "err.h"
#include "sql.h"
#include "vfs_forward.h"

SQLITE_EXTENSION_INIT3

/* A file opened through a paced VFS: the default VFS's file follows it
 * in the same allocation (szOsFile). */
struct paced_file {
    sqlite3_file base;      /* pMethods: &paced_io, or NULL (not open) */
    struct paced_vfs *vfs;  /* whose pace applies */
    sqlite3_file *real;     /* the default VFS's file, right after */
    struct copy_pace *pace; /* the pace @written counts for */
    uint64_t written;       /* bytes written under @pace */
    int sync_rc;            /* a failed sync of the pace's, reported at
                               the next xSync (SQLITE_OK: none) */
    int main_db;            /* 1: a main database file (paced) */
};

/* The real file's offset in the allocation, rounded up for alignment. */
#define PACED_FILE_SIZE ((sizeof(struct paced_file) + 15) & ~(size_t)15)

static sqlite3_file *real_of(sqlite3_file *f)
{
    return ((struct paced_file *)f)->real;
}

static int pf_close(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xClose(r);
}

static int pf_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xRead(r, buf, amt, off);
}

/* pf_write forwards, then tells the VFS's pace, if any, of a main
 * database's bytes. */
static int pf_write(sqlite3_file *f, const void *buf, int amt,
                    sqlite3_int64 off)
{
    struct paced_file *p = (struct paced_file *)f;
    sqlite3_file *r = p->real;
    int rc = r->pMethods->xWrite(r, buf, amt, off);
    int sync_rc;

    if (rc == SQLITE_OK && p->main_db && p->vfs->pace != NULL) {
        if (p->pace != p->vfs->pace) {
            p->pace = p->vfs->pace;
            p->written = 0;
        }
        p->written += (uint64_t)amt;
        sync_rc = copy_pace_wrote_file(p->pace, p->written, r);
        if (sync_rc != SQLITE_OK && p->sync_rc == SQLITE_OK) {
            p->sync_rc = sync_rc;
        }
    }
    return rc;
}

static int pf_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xTruncate(r, size);
}

/* pf_sync forwards, unless a sync of the pace's failed since the last
 * one: that failure is this sync's (the kernel reports a lost write-back
 * once per open file, and told the pace's), so that SQLite counts no
 * frame copied that may not be on the disk. */
static int pf_sync(sqlite3_file *f, int flags)
{
    struct paced_file *p = (struct paced_file *)f;
    int rc = p->sync_rc;

    if (rc != SQLITE_OK) {
        p->sync_rc = SQLITE_OK;
        return rc;
    }
    return p->real->pMethods->xSync(p->real, flags);
}

static int pf_file_size(sqlite3_file *f, sqlite3_int64 *out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xFileSize(r, out);
}

static int pf_lock(sqlite3_file *f, int lock)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xLock(r, lock);
}

static int pf_unlock(sqlite3_file *f, int lock)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xUnlock(r, lock);
}

static int pf_check_reserved(sqlite3_file *f, int *out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xCheckReservedLock(r, out);
}

static int pf_file_control(sqlite3_file *f, int op, void *arg)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xFileControl(r, op, arg);
}

static int pf_sector_size(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xSectorSize(r);
}

static int pf_device_characteristics(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xDeviceCharacteristics(r);
}

static int pf_shm_map(sqlite3_file *f, int pg, int pgsz, int extend,
                      void volatile **out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xShmMap(r, pg, pgsz, extend, out);
}

static int pf_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xShmLock(r, offset, n, flags);
}

static void pf_shm_barrier(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    r->pMethods->xShmBarrier(r);
}

static int pf_shm_unmap(sqlite3_file *f, int delete_flag)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xShmUnmap(r, delete_flag);
}

static int pf_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xFetch(r, off, amt, out);
}

static int pf_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xUnfetch(r, off, p);
}

/* The file methods of each version: a wrapper offers no more than the
 * file it wraps. */
#define PACED_IO(version)                                                      \
    {                                                                          \
        version, pf_close, pf_read, pf_write, pf_truncate, pf_sync,            \
            pf_file_size, pf_lock, pf_unlock, pf_check_reserved,               \
            pf_file_control, pf_sector_size, pf_device_characteristics,        \
            pf_shm_map, pf_shm_lock, pf_shm_barrier, pf_shm_unmap, pf_fetch,   \
            pf_unfetch                                                         \
    }
static const sqlite3_io_methods paced_io[3] = {PACED_IO(1), PACED_IO(2),
                                               PACED_IO(3)};

/* vfs_of is the paced VFS of @v (its pAppData is &v->base). */
static struct paced_vfs *vfs_of(sqlite3_vfs *v)
{
    return (struct paced_vfs *)((char *)v->pAppData -
                                offsetof(struct paced_vfs, base));
}

static int pv_open(sqlite3_vfs *v, const char *name, sqlite3_file *file,
                   int flags, int *out_flags)
{
    struct paced_file *p = (struct paced_file *)file;
    sqlite3_vfs *b = vfs_forward_base(v);
    int version;
    int rc;

    memset(p, 0, sizeof *p);
    p->vfs = vfs_of(v);
    p->real = (sqlite3_file *)((char *)file + PACED_FILE_SIZE);
    p->main_db = (flags & SQLITE_OPEN_MAIN_DB) != 0;
    rc = b->xOpen(b, name, p->real, flags, out_flags);
    if (p->real->pMethods != NULL) {
        version = p->real->pMethods->iVersion;
        version = version < 1 ? 1 : version > 3 ? 3 : version;
        p->base.pMethods = &paced_io[version - 1];
    }
    return rc;
}

int paced_vfs_init(struct paced_vfs *v)
{
    sqlite3_vfs *base;

    memset(v, 0, sizeof *v);
    base = sqlite3_vfs_find(NULL);
    if (base == NULL) {
        return SQL_ERR_IOERR;
    }
    /* Not SQL__APPLY_VFS_PREFIX: the checkpointer's connection is no
     * apply connection to the write guard (sql_is_apply_vfs). */
    snprintf(v->name, sizeof v->name, "paced_raftsql-%p", (void *)v);
    v->base = base;
    vfs_forward_fill(&v->vfs, &v->base, v->name);
    v->vfs.szOsFile = (int)PACED_FILE_SIZE + base->szOsFile;
    v->vfs.xOpen = pv_open;
    if (sqlite3_vfs_register(&v->vfs, 0) != SQLITE_OK) {
        return SQL_ERR_IOERR;
    }
    v->registered = 1;
    return 0;
}

void paced_vfs_set(struct paced_vfs *v, struct copy_pace *pace)
{
    v->pace = pace;
}

void paced_vfs_close(struct paced_vfs *v)
{
    if (v->registered) {
        sqlite3_vfs_unregister(&v->vfs);
        v->registered = 0;
    }
}
