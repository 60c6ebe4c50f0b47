/* powerloss.c - an LD_PRELOAD shim that records what a power failure
 * would lose, so that after a SIGKILL tests/faults/powerloss.py can undo
 * it (the fault suite's "power" kind, docs/testing.md).
 *
 * Nothing is held back: LMDB reads its own writes through its read-only
 * map, so every write goes through at once. Before it does, the shim
 * appends to its journal (powerloss.h) the old contents of the bytes it
 * overwrites, a truncation's lost tail, and every create, rename and
 * unlink; after an fsync/fdatasync/msync(MS_SYNC) returns it appends a
 * SYNC of that inode. The restore undoes, newest first, every change to
 * a file that no later SYNC of the file covers, and every namespace
 * change that no later SYNC of its directory covers.
 *
 * Usage: LD_PRELOAD=build/powerloss.so POWERLOSS_DIR=<dir>
 *        POWERLOSS_PATHS=<prefix>[:<prefix>...] <program>
 * Only regular files whose absolute path starts with a prefix are
 * recorded (a directory's SYNC always is); without both variables the
 * shim only passes calls through. The journal is <dir>/journal.<pid>.
 *
 * Threads: one mutex serializes the recording and the write it records,
 * so the old contents read are those the write replaces, and a SYNC's
 * seq (taken under it before the fsync starts) is later than every
 * write already done. Writes to other files never take it.
 *
 * Durability of the journal itself: it is not fsynced. It models the
 * disk, not the process: the fault is a SIGKILL, after which the kernel
 * still holds everything the journal's write() returned. A record is
 * written before its change, so a record cut short by the kill stands
 * for a change never made; the reader drops it.
 *
 * LIMITATIONS: stores through a shared writable mapping are not seen
 * (LMDB without MDB_WRITEMAP never makes one; SQLite's -shm is one, and
 * the restore deletes it); stdio and other glibc-internal writes bypass
 * the shim (glibc calls its own write); sync(), syncfs() and
 * sync_file_range() count as no sync (the last never flushes metadata
 * or the disk cache); a write from another process whose seq precedes
 * a SYNC may still be running when the fsync starts (a window of
 * microseconds in which the model is more durable than a disk). If a
 * journal write fails, <journal>.broken is created and the restore
 * refuses the journal.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "powerloss.h"

#define CACHE_N 64
#define MAX_PREFIXES 8

/* What the shim knows of one inode: whether it is recorded, and a path. */
struct file_info {
    dev_t dev;           /* st_dev */
    ino_t ino;           /* st_ino */
    bool tracked;        /* its path starts with a prefix */
    char path[PATH_MAX]; /* its path when first seen */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int journal_fd = -1;         /* -1: the shim passes through */
static char journal_path[PATH_MAX]; /* <dir>/journal.<pid> */
static char prefixes[MAX_PREFIXES][PATH_MAX];
static int n_prefixes;
static struct file_info cache[CACHE_N];
static int n_cache; /* entries in use; evicts in a ring */
static int cache_next;
static uint64_t last_seq;
static unsigned n_links; /* hard links kept to undo removals */

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static int (*real_sync_file_range)(int, off64_t, off64_t, unsigned);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);

/* Resolves the next definition of each function, and opens the journal
 * when POWERLOSS_DIR and POWERLOSS_PATHS are set. */
static void init(void)
{
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_pwritev64 = dlsym(RTLD_NEXT, "pwritev64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_msync = dlsym(RTLD_NEXT, "msync");
    real_sync_file_range = dlsym(RTLD_NEXT, "sync_file_range");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    real_unlinkat = dlsym(RTLD_NEXT, "unlinkat");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");

    const char *dir = getenv("POWERLOSS_DIR");
    const char *paths = getenv("POWERLOSS_PATHS");
    if (dir == NULL || paths == NULL || dir[0] == '\0' || paths[0] == '\0') {
        return;
    }
    for (const char *p = paths; *p != '\0' && n_prefixes < MAX_PREFIXES;) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > 0 && len < PATH_MAX) {
            memcpy(prefixes[n_prefixes], p, len);
            prefixes[n_prefixes++][len] = '\0';
        }
        p += len + (end != NULL);
    }
    snprintf(journal_path, sizeof journal_path, "%s/journal.%ld", dir,
             (long)getpid());
    journal_fd = real_openat(AT_FDCWD, journal_path,
                             O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (journal_fd < 0) {
        fprintf(stderr, "powerloss: cannot open journal %s: %s\n", journal_path,
                strerror(errno));
    }
}

/* Whether the shim records anything (after resolving the functions). */
static bool enabled(void)
{
    pthread_once(&once, init);
    return journal_fd >= 0;
}

static bool tracked_path(const char *path)
{
    for (int i = 0; i < n_prefixes; i++) {
        if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0) {
            return true;
        }
    }
    return false;
}

/* A strictly increasing CLOCK_MONOTONIC time in ns; under mu. */
static uint64_t next_seq(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seq = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (seq <= last_seq) {
        seq = last_seq + 1;
    }
    last_seq = seq;
    return seq;
}

/* Marks the journal incomplete (the restore then refuses it); under mu. */
static void journal_broken(const char *why)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s.broken", journal_path);
    int fd = real_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        close(fd);
    }
    fprintf(stderr, "powerloss: journal %s incomplete: %s\n", journal_path,
            why);
}

/* Appends one record in one write(); under mu. */
static void journal(uint32_t type, uint64_t seq, const struct stat *st,
                    uint64_t a, uint64_t b, uint64_t c, const char *path,
                    const void *data, size_t data_len)
{
    struct powerloss_rec rec = {
        .magic = POWERLOSS_MAGIC,
        .type = type,
        .seq = seq,
        .dev = st != NULL ? (uint64_t)st->st_dev : 0,
        .ino = st != NULL ? (uint64_t)st->st_ino : 0,
        .a = a,
        .b = b,
        .c = c,
        .path_len = (uint32_t)strlen(path),
        .data_len = (uint32_t)data_len,
    };
    struct iovec iov[3] = {{&rec, sizeof rec},
                           {(void *)path, rec.path_len},
                           {(void *)data, data_len}};
    size_t want = sizeof rec + rec.path_len + data_len;
    ssize_t n = real_writev(journal_fd, iov, 3);
    if (n < 0 || (size_t)n != want) {
        journal_broken(n < 0 ? strerror(errno) : "short write");
    }
}

/* The cached facts of the inode st of fd; under mu. */
static struct file_info *lookup(int fd, const struct stat *st)
{
    for (int i = 0; i < n_cache; i++) {
        if (cache[i].dev == st->st_dev && cache[i].ino == st->st_ino) {
            return &cache[i];
        }
    }
    struct file_info *f = &cache[cache_next];
    cache_next = (cache_next + 1) % CACHE_N;
    if (n_cache < CACHE_N) {
        n_cache++;
    }
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, f->path, sizeof f->path - 1);
    f->path[n > 0 ? n : 0] = '\0';
    f->tracked = f->path[0] == '/' && tracked_path(f->path);
    return f;
}

/* Forgets every cached path (after a rename or unlink); under mu. */
static void forget_paths(void)
{
    n_cache = 0;
    cache_next = 0;
}

/* Reads n bytes at off of the file open as fd, or, when fd cannot be read
 * (O_WRONLY), through path; returns the bytes read or -1. */
static ssize_t read_old(int fd, const char *path, void *buf, size_t n,
                        off_t off)
{
    size_t done = 0;
    int rfd = fd;
    while (done < n) {
        ssize_t r = pread(rfd, (char *)buf + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EBADF && rfd == fd) {
            rfd = real_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
            if (rfd < 0) {
                return -1;
            }
            continue;
        }
        if (r <= 0) {
            break;
        }
        done += (size_t)r;
    }
    if (rfd != fd) {
        close(rfd);
    }
    return (ssize_t)done;
}

/* The facts of fd's inode when fd is a recorded regular file, with mu
 * taken (the caller releases it); NULL otherwise. st gets its stat. */
static struct file_info *lock_tracked(int fd, struct stat *st)
{
    if (!enabled() || fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        return NULL;
    }
    pthread_mutex_lock(&mu);
    struct file_info *f = lookup(fd, st);
    if (!f->tracked) {
        pthread_mutex_unlock(&mu);
        return NULL;
    }
    return f;
}

/* Journals a record of type with a, b and the size before (st's) whose
 * data is the old contents of the n bytes at off of f (open as fd);
 * under mu. */
static void journal_old(uint32_t type, int fd, const struct file_info *f,
                        const struct stat *st, uint64_t a, uint64_t b,
                        off_t off, size_t n)
{
    char *old = n > 0 ? malloc(n) : NULL;
    if (n > 0 &&
        (old == NULL || read_old(fd, f->path, old, n, off) != (ssize_t)n)) {
        journal_broken("cannot read the old contents");
        n = 0;
    }
    journal(type, next_seq(), st, a, b, (uint64_t)st->st_size, f->path, old, n);
    free(old);
}

/* Records the old contents of the n bytes a write to fd at off (-1: at
 * its position, or its end with O_APPEND) replaces. Returns true when it
 * took mu, which the caller releases after its write. */
static bool before_write(int fd, off_t off, size_t n)
{
    struct stat st;
    struct file_info *f = n > 0 ? lock_tracked(fd, &st) : NULL;
    if (f == NULL) {
        return false;
    }
    int flags = fcntl(fd, F_GETFL);
    if (off < 0) {
        off = (flags & O_APPEND) ? st.st_size : lseek(fd, 0, SEEK_CUR);
    }
    if (flags >= 0 && (flags & O_DSYNC) == O_DSYNC) {
        journal(POWERLOSS_WRITE_SYNCED, next_seq(), &st, (uint64_t)off, n,
                (uint64_t)st.st_size, f->path, NULL, 0);
        return true;
    }
    size_t old_len = 0;
    if (off < st.st_size) {
        old_len =
            (size_t)(st.st_size - off) < n ? (size_t)(st.st_size - off) : n;
    }
    journal_old(POWERLOSS_WRITE, fd, f, &st, (uint64_t)off, n, off, old_len);
    return true;
}

static size_t iov_len(const struct iovec *iov, int n)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        len += iov[i].iov_len;
    }
    return len;
}

#define WRAP_WRITE(call, off, n)                                               \
    do {                                                                       \
        bool locked = before_write(fd, off, n);                                \
        ssize_t ret = call;                                                    \
        int saved = errno;                                                     \
        if (locked) {                                                          \
            pthread_mutex_unlock(&mu);                                         \
        }                                                                      \
        errno = saved;                                                         \
        return ret;                                                            \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n)
{
    WRAP_WRITE(real_write(fd, buf, n), -1, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    WRAP_WRITE(real_pwrite(fd, buf, n, off), off, n);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    WRAP_WRITE(real_pwrite64(fd, buf, n, off), off, n);
}

ssize_t writev(int fd, const struct iovec *iov, int n_iov)
{
    WRAP_WRITE(real_writev(fd, iov, n_iov), -1, iov_len(iov, n_iov));
}

ssize_t pwritev(int fd, const struct iovec *iov, int n_iov, off_t off)
{
    WRAP_WRITE(real_pwritev(fd, iov, n_iov, off), off, iov_len(iov, n_iov));
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n_iov, off64_t off)
{
    WRAP_WRITE(real_pwritev64(fd, iov, n_iov, off), off, iov_len(iov, n_iov));
}

/* Records the lost tail (or the growth) of truncating fd to len, before
 * it happens; returns true when it took mu. */
static bool before_truncate(int fd, off_t len)
{
    struct stat st;
    struct file_info *f = lock_tracked(fd, &st);
    if (f == NULL) {
        return false;
    }
    size_t tail = len < st.st_size ? (size_t)(st.st_size - len) : 0;
    journal_old(POWERLOSS_TRUNCATE, fd, f, &st, (uint64_t)len, 0, len, tail);
    return true;
}

/* ftruncate (wide false) or ftruncate64 (wide true), recorded. */
static int truncate_fd(int fd, off64_t len, bool wide)
{
    bool locked = before_truncate(fd, (off_t)len);
    int ret = wide ? real_ftruncate64(fd, len) : real_ftruncate(fd, (off_t)len);
    int saved = errno;
    if (locked) {
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
    return ret;
}

int ftruncate(int fd, off_t len)
{
    return truncate_fd(fd, len, false);
}

int ftruncate64(int fd, off64_t len)
{
    return truncate_fd(fd, len, true);
}

/* The seq a SYNC of st will carry (0: not recorded), taken before the
 * sync starts: every recorded write done so far precedes it. */
static uint64_t sync_begin(int fd, const struct stat *st)
{
    uint64_t seq = 0;
    if (!S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode)) {
        return 0;
    }
    pthread_mutex_lock(&mu);
    if (S_ISDIR(st->st_mode) || lookup(fd, st)->tracked) {
        seq = next_seq();
    }
    pthread_mutex_unlock(&mu);
    return seq;
}

static void sync_end(uint64_t seq, const struct stat *st, int rc)
{
    if (seq != 0 && rc == 0) {
        pthread_mutex_lock(&mu);
        journal(POWERLOSS_SYNC, seq, st, 0, 0, 0, "", NULL, 0);
        pthread_mutex_unlock(&mu);
    }
}

/* fsync (data false) or fdatasync (data true) of fd, recorded. */
static int sync_fd(int fd, bool data)
{
    struct stat st;
    uint64_t seq = 0;
    if (enabled() && fstat(fd, &st) == 0) {
        seq = sync_begin(fd, &st);
    }
    int rc = data ? real_fdatasync(fd) : real_fsync(fd);
    int saved = errno;
    sync_end(seq, &st, rc);
    errno = saved;
    return rc;
}

int fsync(int fd)
{
    return sync_fd(fd, false);
}

int fdatasync(int fd)
{
    return sync_fd(fd, true);
}

/* Finds the file mapped at addr in /proc/self/maps; false when none. */
static bool mapped_file(void *addr, struct stat *out)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    char line[PATH_MAX + 128];
    bool found = false;
    if (maps == NULL) {
        return false;
    }
    while (!found && fgets(line, sizeof line, maps) != NULL) {
        unsigned long lo, hi, off, ino;
        unsigned maj, min;
        if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &off, &maj,
                   &min, &ino) == 6 &&
            (uintptr_t)addr >= lo && (uintptr_t)addr < hi && ino != 0) {
            memset(out, 0, sizeof *out);
            out->st_dev = makedev(maj, min);
            out->st_ino = ino;
            out->st_mode = S_IFREG;
            found = true;
        }
    }
    fclose(maps);
    return found;
}

int msync(void *addr, size_t len, int flags)
{
    struct stat st;
    uint64_t seq = 0;
    if (enabled() && (flags & MS_SYNC) && mapped_file(addr, &st)) {
        pthread_mutex_lock(&mu);
        seq = next_seq();
        pthread_mutex_unlock(&mu);
    }
    int rc = real_msync(addr, len, flags);
    int saved = errno;
    sync_end(seq, &st, rc);
    errno = saved;
    return rc;
}

/* Passed through: it neither flushes metadata nor the disk's cache, so
 * it makes nothing durable. */
int sync_file_range(int fd, off64_t off, off64_t n, unsigned flags)
{
    pthread_once(&once, init);
    return real_sync_file_range(fd, off, n, flags);
}

/* The absolute form of path relative to dirfd in out; false if none. */
static bool abs_path(int dirfd, const char *path, char *out, size_t len)
{
    char base[PATH_MAX];
    if (path[0] == '/') {
        return (size_t)snprintf(out, len, "%s", path) < len;
    }
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof base) == NULL) {
            return false;
        }
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n <= 0) {
            return false;
        }
        base[n] = '\0';
    }
    return (size_t)snprintf(out, len, "%s/%s", base, path) < len;
}

/* The directory part of path in out, and its stat; false if none. */
static bool parent_of(const char *path, char *out, struct stat *st)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        return false;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(out, path, n);
    out[n] = '\0';
    return stat(out, st) == 0;
}

/* Records a truncation by O_TRUNC or a creation by O_CREAT. */
static int open_common(int dirfd, const char *path, int flags, mode_t mode)
{
    char abs[PATH_MAX], dir[PATH_MAX];
    struct stat st, dst;
    if (!enabled() || !(flags & (O_CREAT | O_TRUNC)) ||
        !abs_path(dirfd, path, abs, sizeof abs) || !tracked_path(abs)) {
        return real_openat(dirfd, path, flags, mode);
    }
    pthread_mutex_lock(&mu);
    bool existed = fstatat(dirfd, path, &st, 0) == 0;
    if (existed && (flags & O_TRUNC) && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (flags & O_ACCMODE) != O_RDONLY) {
        size_t n = (size_t)st.st_size;
        char *old = malloc(n);
        int rfd = real_openat(dirfd, path, O_RDONLY | O_CLOEXEC);
        if (old == NULL || rfd < 0 ||
            read_old(rfd, abs, old, n, 0) != (ssize_t)n) {
            journal_broken("cannot read a file opened with O_TRUNC");
            n = 0;
        }
        if (rfd >= 0) {
            close(rfd);
        }
        journal(POWERLOSS_TRUNCATE, next_seq(), &st, 0, 0, (uint64_t)st.st_size,
                abs, old, n);
        free(old);
    }
    uint64_t seq = next_seq();
    int fd = real_openat(dirfd, path, flags, mode);
    int saved = errno;
    if (fd >= 0 && !existed && (flags & O_CREAT) && fstat(fd, &st) == 0 &&
        parent_of(abs, dir, &dst)) {
        journal(POWERLOSS_CREATE, seq, &dst, (uint64_t)st.st_ino, 0, 0, abs,
                NULL, 0);
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    bool has_mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
    return has_mode ? (mode_t)va_arg(ap, int) : 0;
}

/* Defines the open variant name with parameters params, opening
 * relative to dirfd. */
#define OPEN_VARIANT(name, params, dirfd)                                      \
    int name params                                                            \
    {                                                                          \
        va_list ap;                                                            \
        va_start(ap, flags);                                                   \
        mode_t mode = mode_arg(flags, ap);                                     \
        va_end(ap);                                                            \
        return open_common(dirfd, path, flags, mode);                          \
    }

OPEN_VARIANT(open, (const char *path, int flags, ...), AT_FDCWD)
OPEN_VARIANT(open64, (const char *path, int flags, ...), AT_FDCWD)
OPEN_VARIANT(openat, (int dirfd, const char *path, int flags, ...), dirfd)
OPEN_VARIANT(openat64, (int dirfd, const char *path, int flags, ...), dirfd)

int creat(const char *path, mode_t mode)
{
    return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode)
{
    return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

/* Keeps a hard link to the regular file at abs beside it, in out ("" when
 * there is no such file or the link fails); under mu. */
static void keep_link(const char *abs, const char *dir, char *out, size_t len)
{
    struct stat st;
    out[0] = '\0';
    if (lstat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
        return;
    }
    snprintf(out, len, "%s/.powerloss-%ld-%u", dir, (long)getpid(), n_links++);
    if (link(abs, out) != 0) {
        out[0] = '\0';
    }
}

int unlinkat(int dirfd, const char *path, int flags)
{
    char abs[PATH_MAX], dir[PATH_MAX], kept[PATH_MAX + 64];
    struct stat st, dst;
    if (!enabled() || (flags & AT_REMOVEDIR) ||
        !abs_path(dirfd, path, abs, sizeof abs) || !tracked_path(abs)) {
        return real_unlinkat(dirfd, path, flags);
    }
    pthread_mutex_lock(&mu);
    bool known = lstat(abs, &st) == 0 && S_ISREG(st.st_mode) &&
                 parent_of(abs, dir, &dst);
    if (known) {
        keep_link(abs, dir, kept, sizeof kept);
        journal(POWERLOSS_UNLINK, next_seq(), &dst, (uint64_t)st.st_ino, 0, 0,
                abs, kept, strlen(kept));
    }
    int rc = real_unlinkat(dirfd, path, flags);
    int saved = errno;
    forget_paths();
    pthread_mutex_unlock(&mu);
    errno = saved;
    return rc;
}

int unlink(const char *path)
{
    return unlinkat(AT_FDCWD, path, 0);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd,
             const char *newpath)
{
    char from[PATH_MAX], to[PATH_MAX], fdir[PATH_MAX], tdir[PATH_MAX];
    char data[2 * PATH_MAX + 64];
    struct stat st, fst, tst;
    if (!enabled() || !abs_path(olddirfd, oldpath, from, sizeof from) ||
        !abs_path(newdirfd, newpath, to, sizeof to) ||
        (!tracked_path(from) && !tracked_path(to))) {
        return real_renameat(olddirfd, oldpath, newdirfd, newpath);
    }
    pthread_mutex_lock(&mu);
    if (lstat(from, &st) == 0 && parent_of(from, fdir, &fst) &&
        parent_of(to, tdir, &tst)) {
        size_t n = (size_t)snprintf(data, sizeof data, "%s", to) + 1;
        keep_link(to, tdir, data + n, sizeof data - n);
        n += strlen(data + n);
        journal(POWERLOSS_RENAME, next_seq(), &fst, (uint64_t)tst.st_dev,
                (uint64_t)tst.st_ino, (uint64_t)st.st_ino, from, data, n);
    }
    int rc = real_renameat(olddirfd, oldpath, newdirfd, newpath);
    int saved = errno;
    forget_paths();
    pthread_mutex_unlock(&mu);
    errno = saved;
    return rc;
}

int rename(const char *oldpath, const char *newpath)
{
    return renameat(AT_FDCWD, oldpath, AT_FDCWD, newpath);
}
