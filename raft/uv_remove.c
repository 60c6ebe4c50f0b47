/* Snapshot files removed off the loop thread (uv_node_internal.h).
 *
 * A snapshot file is as large as the database. On ext4 mounted with
 * `discard`, the unlink that frees one discards every extent before it
 * returns: 1.1-1.6 s for a 5 GB file on this project's test machine,
 * measured as the loop thread's kernel stack in blkdev_issue_discard
 * under do_unlinkat (docs/performance.md, "Snapshot files removed off
 * the loop thread"). On the loop thread that is a second and more
 * without a heartbeat: the followers of a leader that replaced its
 * snapshot file for a joining node elected another leader, which made
 * the whole snapshot again.
 *
 * So the loop only renames the file, at once, to a name of its own in
 * the snapshot directory (removing-<id>-<start>-<n>.db: the old name is
 * free for a new file as soon as this returns), and a job on the libuv
 * thread pool shortens it in steps of RAFT__UV_REMOVE_STEP, each freeing
 * and discarding a part and followed by a rest as long as it took, so
 * that the disk's other writers (every log fsync) wait behind one step,
 * not the whole file, then unlinks it. One job at a time per node, in
 * the order asked: the pool has four threads, which the log's writes
 * and the snapshot's creation and install need too.
 *
 * A file that a transfer still reads through its descriptor (the
 * snapshot the new one replaces) is renamed and held: only the loop
 * closes those descriptors (raft_uv_remove_close), and when the last of
 * them is closed, while the file still has its name, the job removes
 * it as any other. The last close never frees a file on the loop.
 *
 * A stop does not wait for the removals: the job in progress stops at
 * its next step, those not begun are dropped, and the next start
 * removes what the node's removing-<id>-* names still hold
 * (raft_uv_remove_leftovers).
 *
 * Failure modes: a rename that fails for another reason than a missing
 * file falls back to removing on the loop thread (logged at WARN); a
 * failed step or unlink on the pool is logged at WARN and leaves the
 * file for the next start. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "uv_node_internal.h"

/* Bytes freed (and discarded) by one step of a removal. */
#define RAFT__UV_REMOVE_STEP (64u << 20)

/* After each step the removal rests as long as the step took, up to this
 * (ms): the disk is free for the other writers half of the time. */
#define RAFT__UV_REMOVE_REST_MAX_MS 100

/* The name prefix of files being removed. */
#define RAFT__UV_REMOVE_PREFIX "removing-"

/* One file to remove, queued on the loop (d->removals) and run on the
 * pool. */
struct raft_uv_removal {
    uv_work_t req;
    struct raft_uv_node *d;
    struct raft_uv_removal *next; /* FIFO */
    int err;                      /* errno of a failed step, 0 */
    const char *failed;           /* what failed ("open", "unlink") */
    char path[4096];              /* the removing-* name */
};

/* rest sleeps @ns, at most RAFT__UV_REMOVE_REST_MAX_MS. */
static void rest(uint64_t ns)
{
    struct timespec ts;
    if (ns > (uint64_t)RAFT__UV_REMOVE_REST_MAX_MS * 1000000u) {
        ns = (uint64_t)RAFT__UV_REMOVE_REST_MAX_MS * 1000000u;
    }
    ts.tv_sec = (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void remove_work(uv_work_t *req)
{
    struct raft_uv_removal *r = req->data;
    struct raft_uv_node *d = r->d;
    struct stat st;
    off_t size;
    int fd;

    if (atomic_load(&d->remove_abandon)) {
        return; /* left for the next start */
    }
    if (d->on_remove != NULL) {
        d->on_remove(d->on_remove_data, r->path);
    }
    fd = open(r->path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        r->err = errno;
        r->failed = "open";
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    size = st.st_size;
    while (size > 0) {
        uint64_t took = uv_hrtime();
        size = size > (off_t)RAFT__UV_REMOVE_STEP
                   ? size - (off_t)RAFT__UV_REMOVE_STEP
                   : 0;
        if (ftruncate(fd, size) != 0) {
            r->err = errno;
            r->failed = "shorten";
            close(fd);
            return; /* the next start takes it from there */
        }
        if (size > 0) {
            rest(uv_hrtime() - took);
            if (atomic_load(&d->remove_abandon)) {
                close(fd);
                return;
            }
        }
    }
    close(fd);
    if (unlink(r->path) != 0 && errno != ENOENT) {
        r->err = errno;
        r->failed = "unlink";
    }
}

static void start_next(struct raft_uv_node *d);

static void remove_after_work(uv_work_t *req, int status)
{
    struct raft_uv_removal *r = req->data;
    struct raft_uv_node *d = r->d;

    if (status != 0 || r->err != 0) {
        raft_uv_node_log(
            d, RAFT_LOG_WARN,
            "snapshot: cannot remove %s (%s: %s); the next start tries again",
            r->path, status != 0 ? "queue" : r->failed,
            status != 0 ? uv_strerror(status) : strerror(r->err));
    }
    d->removal_running = false;
    free(r);
    start_next(d);
}

/* start_next runs the first removal queued, if none runs. */
static void start_next(struct raft_uv_node *d)
{
    struct raft_uv_removal *r = d->removals;
    int rc;

    if (d->removal_running || r == NULL) {
        return;
    }
    d->removals = r->next;
    if (d->removals == NULL) {
        d->removals_tail = NULL;
    }
    r->req.data = r;
    r->d = d;
    rc = uv_queue_work(&d->loop, &r->req, remove_work, remove_after_work);
    if (rc != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "snapshot: cannot remove %s (queue: %s); the next "
                         "start tries again",
                         r->path, uv_strerror(rc));
        free(r);
        start_next(d);
        return;
    }
    d->removal_running = true;
}

/* queue_removal queues the removal of @path, a removing-* name. */
static void queue_removal(struct raft_uv_node *d, const char *path)
{
    struct raft_uv_removal *r = calloc(1, sizeof *r);

    if (r == NULL) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "snapshot: out of memory: %s left for the next start",
                         path);
        return;
    }
    snprintf(r->path, sizeof r->path, "%s", path);
    if (d->removals_tail != NULL) {
        d->removals_tail->next = r;
    } else {
        d->removals = r;
    }
    d->removals_tail = r;
    start_next(d);
}

/* read_by_send returns the number of active transfers whose descriptor
 * (other than @except) reads the file of device @dev and inode @ino. */
static unsigned read_by_send(struct raft_uv_node *d, dev_t dev, ino_t ino,
                             int except)
{
    unsigned n = 0;
    for (unsigned i = 0; i < d->n_peers; i++) {
        const struct raft_uv_snapshot_send *s = &d->sends[i];
        struct stat o;
        if (s->active && s->fd != except && fstat(s->fd, &o) == 0 &&
            o.st_dev == dev && o.st_ino == ino) {
            n++;
        }
    }
    return n;
}

bool raft_uv_remove_file(struct raft_uv_node *d, const char *path)
{
    char to[4096];
    struct stat st;

    if (stat(path, &st) != 0) {
        return false; /* nothing there */
    }
    snprintf(to, sizeof to,
             "%.3800s/" RAFT__UV_REMOVE_PREFIX "%" PRIu64 "-%" PRIu64 "-%u.db",
             d->snapshot_dir, d->id, d->remove_start, ++d->n_removed);
    if (rename(path, to) != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "snapshot: rename %s: %s; removed on the loop thread",
                         path, strerror(errno));
        if (d->on_remove != NULL) {
            d->on_remove(d->on_remove_data, path);
        }
        (void)unlink(path);
        return true;
    }
    if (read_by_send(d, st.st_dev, st.st_ino, -1) > 0) {
        /* Held until the last transfer reading it ends. */
        for (unsigned i = 0; i < RAFT__UV_REMOVE_HELD; i++) {
            struct raft_uv_held *h = &d->held[i];
            if (!h->used) {
                h->used = true;
                h->dev = st.st_dev;
                h->ino = st.st_ino;
                snprintf(h->path, sizeof h->path, "%s", to);
                return true;
            }
        }
        /* More held files than transfers can read: never, but the name
         * stays for the next start rather than a free on the loop. */
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "snapshot: %s still read and no room to hold it: "
                         "left for the next start",
                         to);
        return true;
    }
    queue_removal(d, to);
    return true;
}

void raft_uv_remove_close(struct raft_uv_node *d, int fd)
{
    struct stat st;
    bool known = fstat(fd, &st) == 0;

    /* Never the last reference to a removed file: the held ones keep
     * their removing-* name until the job below unlinks it. */
    close(fd);
    if (!known || read_by_send(d, st.st_dev, st.st_ino, fd) > 0) {
        return;
    }
    for (unsigned i = 0; i < RAFT__UV_REMOVE_HELD; i++) {
        struct raft_uv_held *h = &d->held[i];
        if (h->used && h->dev == st.st_dev && h->ino == st.st_ino) {
            h->used = false;
            queue_removal(d, h->path);
        }
    }
}

void raft_uv_remove_leftovers(struct raft_uv_node *d)
{
    struct timespec ts;
    char prefix[64];
    DIR *dir = opendir(d->snapshot_dir);
    struct dirent *e;

    /* The names of this life's removals: none of an earlier life has
     * it. */
    clock_gettime(CLOCK_REALTIME, &ts);
    d->remove_start = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (dir == NULL) {
        return;
    }
    /* Only this server's: another one's may share the directory. */
    snprintf(prefix, sizeof prefix, RAFT__UV_REMOVE_PREFIX "%" PRIu64 "-",
             d->id);
    while ((e = readdir(dir)) != NULL) {
        char path[4096];
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) {
            continue;
        }
        snprintf(path, sizeof path, "%.3800s/%.255s", d->snapshot_dir,
                 e->d_name);
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "snapshot: removing %s, left by an earlier run", path);
        queue_removal(d, path);
    }
    closedir(dir);
}

void raft_uv_remove_abandon(struct raft_uv_node *d)
{
    struct raft_uv_removal *r = d->removals;

    atomic_store(&d->remove_abandon, true);
    while (r != NULL) {
        struct raft_uv_removal *next = r->next;
        free(r);
        r = next;
    }
    d->removals = NULL;
    d->removals_tail = NULL;
}
