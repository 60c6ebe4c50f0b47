/* A VFS that forwards every method to another: vfs_forward.h. */

#include "vfs_forward.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

sqlite3_vfs *vfs_forward_base(sqlite3_vfs *v)
{
    return *(sqlite3_vfs **)v->pAppData;
}

static int fwd_open(sqlite3_vfs *v, const char *name, sqlite3_file *file,
                    int flags, int *out_flags)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xOpen(b, name, file, flags, out_flags);
}

static int fwd_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xDelete(b, name, sync_dir);
}

static int fwd_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xAccess(b, name, flags, out);
}

static int fwd_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xFullPathname(b, name, n, out);
}

static void *fwd_dl_open(sqlite3_vfs *v, const char *name)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xDlOpen(b, name);
}

static void fwd_dl_error(sqlite3_vfs *v, int n, char *msg)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    b->xDlError(b, n, msg);
}

static void (*fwd_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xDlSym(b, h, sym);
}

static void fwd_dl_close(sqlite3_vfs *v, void *h)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    b->xDlClose(b, h);
}

static int fwd_randomness(sqlite3_vfs *v, int n, char *out)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xRandomness(b, n, out);
}

static int fwd_sleep(sqlite3_vfs *v, int us)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xSleep(b, us);
}

static int fwd_get_last_error(sqlite3_vfs *v, int n, char *msg)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xGetLastError != NULL ? b->xGetLastError(b, n, msg) : 0;
}

int vfs_forward_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    double now;
    int rc;

    if (b->iVersion >= 2 && b->xCurrentTimeInt64 != NULL) {
        return b->xCurrentTimeInt64(b, out);
    }
    rc = b->xCurrentTime(b, &now);
    *out = (sqlite3_int64)(now * 86400000.0);
    return rc;
}

static int fwd_current_time(sqlite3_vfs *v, double *out)
{
    sqlite3_vfs *b = vfs_forward_base(v);
    return b->xCurrentTime(b, out);
}

void vfs_forward_fill(sqlite3_vfs *v, sqlite3_vfs **base_slot, const char *name)
{
    memset(v, 0, sizeof *v);
    v->iVersion = 2;
    v->szOsFile = (*base_slot)->szOsFile;
    v->mxPathname = (*base_slot)->mxPathname;
    v->zName = name;
    v->pAppData = base_slot;
    v->xOpen = fwd_open;
    v->xDelete = fwd_delete;
    v->xAccess = fwd_access;
    v->xFullPathname = fwd_full_pathname;
    v->xDlOpen = fwd_dl_open;
    v->xDlError = fwd_dl_error;
    v->xDlSym = fwd_dl_sym;
    v->xDlClose = fwd_dl_close;
    v->xRandomness = fwd_randomness;
    v->xSleep = fwd_sleep;
    v->xCurrentTime = fwd_current_time;
    v->xGetLastError = fwd_get_last_error;
    v->xCurrentTimeInt64 = vfs_forward_current_time_int64;
}
