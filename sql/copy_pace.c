/* The pace of a snapshot's large writes: copy_pace.h. */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "copy_pace.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* copy_pace_step looks at the file this often, ns. */
#define COPY_PACE_LOOK_NS 2000000u

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* commit_index is the commit index @p's pace watches: its source's, or
 * its node's applied index. */
static uint64_t commit_index(struct copy_pace *p)
{
    uint64_t applied;

    if (p->cfg.commit != NULL) {
        return p->cfg.commit(p->cfg.arg);
    }
    pthread_mutex_lock(&p->f->tail_mu);
    applied = p->f->applied;
    pthread_mutex_unlock(&p->f->tail_mu);
    return applied;
}

void copy_pace_init(struct copy_pace *p, struct sql_fsm *f,
                    const struct sql_pace *cfg, const char *path)
{
    *p = (struct copy_pace){0};
    if (cfg != NULL) {
        p->cfg = *cfg;
    }
    p->f = f;
    p->path = path;
    p->fd = -1;
    p->commit = commit_index(p);
}

/* taking_writes says whether the commit index @p watches moved within
 * the last COPY_PACE_IDLE_MS, as of @now. */
static bool taking_writes(struct copy_pace *p, uint64_t now)
{
    uint64_t commit = commit_index(p);

    if (commit != p->commit) {
        p->moved_ns = now;
        p->commit = commit;
    }
    return p->moved_ns != 0 &&
           now - p->moved_ns <= (uint64_t)COPY_PACE_IDLE_MS * 1000000u;
}

/* flush hands the file's dirty pages to writeback once a window more
 * than at the last hand-off was written (@bytes so far), after waiting
 * for the writeback that one started; through @file, its xSync. */
static int flush(struct copy_pace *p, uint64_t bytes, sqlite3_file *file)
{
    if (bytes < p->flushed + COPY_PACE_FLUSH_BYTES) {
        return SQLITE_OK;
    }
    p->flushed = bytes;
    if (file != NULL) {
        return file->pMethods->xSync(file, SQLITE_SYNC_NORMAL);
    }
    if (p->fd < 0 && p->path != NULL) {
        p->fd = open(p->path, O_RDONLY | O_CLOEXEC);
    }
    if (p->fd >= 0) {
        (void)sync_file_range(
            p->fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE);
    }
    return SQLITE_OK;
}

/* pace_at is copy_pace_wrote, through @file or not (NULL); returns
 * @file's xSync code (SQLITE_OK without one). */
static int pace_at(struct copy_pace *p, uint64_t bytes, sqlite3_file *file)
{
    int rc;
    uint64_t now = now_ns();
    uint64_t allowed, nap;
    struct timespec ts;

    rc = flush(p, bytes, file);
    if (p->cfg.rate == 0 || !taking_writes(p, now)) {
        p->holding = false;
        return rc;
    }
    if (!p->holding) {
        p->holding = true;
        p->from_ns = now;
        p->from_bytes = bytes;
    }
    allowed =
        p->from_bytes + COPY_PACE_FLUSH_BYTES +
        (uint64_t)((double)p->cfg.rate * (double)(now - p->from_ns) / 1e9);
    if (bytes <= allowed) {
        /* Credit of more than a window (the writer wrote nothing for a
         * while: VACUUM INTO sorting an index) would let a burst go
         * unpaced: the pace starts afresh from here. */
        if (allowed - bytes > COPY_PACE_FLUSH_BYTES) {
            p->from_ns = now;
            p->from_bytes = bytes;
        }
        return rc;
    }
    nap = (uint64_t)((double)(bytes - allowed) * 1e9 / (double)p->cfg.rate);
    ts.tv_sec = (time_t)(nap / 1000000000u);
    ts.tv_nsec = (long)(nap % 1000000000u);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    p->slept_ns += nap;
    return rc;
}

void copy_pace_wrote(struct copy_pace *p, uint64_t bytes)
{
    (void)pace_at(p, bytes, NULL);
}

int copy_pace_wrote_file(struct copy_pace *p, uint64_t bytes,
                         sqlite3_file *file)
{
    return pace_at(p, bytes, file);
}

void copy_pace_step(struct copy_pace *p)
{
    struct stat st;
    uint64_t now = now_ns();

    if (now < p->next_ns) {
        return;
    }
    p->next_ns = now + COPY_PACE_LOOK_NS;
    if (p->fd < 0 && p->path != NULL) {
        p->fd = open(p->path, O_RDONLY | O_CLOEXEC);
    }
    if (p->fd < 0 || fstat(p->fd, &st) != 0) {
        return;
    }
    copy_pace_wrote(p, (uint64_t)st.st_size);
    p->next_ns = now_ns() + COPY_PACE_LOOK_NS;
}

uint64_t copy_pace_close(struct copy_pace *p)
{
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
    return p->slept_ns / 1000000u;
}
