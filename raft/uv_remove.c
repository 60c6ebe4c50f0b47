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
 * free for a new file as soon as this returns), and the libuv thread pool
 * shortens it in steps of RAFT__UV_REMOVE_STEP, each freeing and
 * discarding a part and followed by a rest as long as it took, so that
 * the disk's other writers (every log fsync) wait behind one step, not
 * the whole file, and unlinks it. A file
 * still read through a descriptor (a transfer of the snapshot it
 * replaces) is only unlinked: it is freed when the last descriptor is
 * closed, and raft_uv_remove_close closes such a descriptor on the pool
 * too. A start removes what an earlier life left under the same prefix
 * (raft_uv_remove_leftovers).
 *
 * Failure modes: a rename that fails for another reason than a missing
 * file, or a job that cannot be queued, falls back to removing on the
 * calling thread (logged); a failed unlink on the pool is logged at
 * WARN and leaves the file for the next start. */

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

/* One removal or close on the pool. */
struct remove_job {
    uv_work_t req;
    struct raft_uv_node *d;
    int fd;          /* a descriptor to close, or -1 */
    bool shorten;    /* no descriptor reads the file: shorten it first */
    int err;         /* errno of the failed unlink or close, 0 */
    char path[4096]; /* the file to remove, "" for a close */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
    struct remove_job *j = req->data;
    struct raft_uv_node *d = j->d;

    if (d->on_remove != NULL) {
        d->on_remove(d->on_remove_data, j->path[0] != '\0' ? j->path : NULL);
    }
    if (j->fd >= 0) {
        j->err = close(j->fd) == 0 ? 0 : errno;
        return;
    }
    if (j->shorten) {
        int fd = open(j->path, O_WRONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            off_t size = st.st_size;
            while (size > 0) {
                uint64_t took = now_ns();
                size = size > (off_t)RAFT__UV_REMOVE_STEP
                           ? size - (off_t)RAFT__UV_REMOVE_STEP
                           : 0;
                if (ftruncate(fd, size) != 0) {
                    break; /* the unlink below frees the rest */
                }
                took = now_ns() - took;
                if (size > 0) {
                    rest(took);
                }
            }
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    j->err = unlink(j->path) == 0 || errno == ENOENT ? 0 : errno;
}

static void remove_after_work(uv_work_t *req, int status)
{
    struct remove_job *j = req->data;
    struct raft_uv_node *d = j->d;

    if (status != 0 || j->err != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: cannot %s %s: %s",
                         j->path[0] != '\0' ? "remove" : "close",
                         j->path[0] != '\0' ? j->path : "a snapshot file",
                         status != 0 ? uv_strerror(status) : strerror(j->err));
    }
    d->n_removing--;
    free(j);
}

/* queue runs @j on the pool; false when it could not be queued (then
 * @j is the caller's to free). */
static bool queue(struct raft_uv_node *d, struct remove_job *j)
{
    j->req.data = j;
    j->d = d;
    if (uv_queue_work(&d->loop, &j->req, remove_work, remove_after_work) != 0) {
        return false;
    }
    d->n_removing++;
    return true;
}

/* queue_unlink queues the removal of @path, a name of the prefix. */
static void queue_unlink(struct raft_uv_node *d, const char *path, bool shorten)
{
    struct remove_job *j = calloc(1, sizeof *j);

    if (j != NULL) {
        j->fd = -1;
        j->shorten = shorten;
        snprintf(j->path, sizeof j->path, "%s", path);
    }
    if (j == NULL || !queue(d, j)) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "snapshot: %s removed on the loop thread (no job "
                         "could be queued)",
                         path);
        (void)unlink(path);
        free(j);
    }
}

void raft_uv_remove_file(struct raft_uv_node *d, const char *path, bool shorten)
{
    char to[4096];

    if (d->remove_start == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        d->remove_start =
            (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    snprintf(to, sizeof to,
             "%.3800s/" RAFT__UV_REMOVE_PREFIX "%" PRIu64 "-%" PRIu64 "-%u.db",
             d->snapshot_dir, d->id, d->remove_start, ++d->n_removed);
    if (rename(path, to) != 0) {
        if (errno != ENOENT) {
            raft_uv_node_log(d, RAFT_LOG_WARN,
                             "snapshot: rename %s: %s; removed on the loop "
                             "thread",
                             path, strerror(errno));
            (void)unlink(path);
        }
        return;
    }
    queue_unlink(d, to, shorten);
}

void raft_uv_remove_close(struct raft_uv_node *d, int fd)
{
    struct stat st;
    struct remove_job *j;

    /* Only the last descriptor of a removed file frees anything. */
    if (fstat(fd, &st) != 0 || st.st_nlink > 0 ||
        (j = calloc(1, sizeof *j)) == NULL) {
        close(fd);
        return;
    }
    j->fd = fd;
    if (!queue(d, j)) {
        close(fd);
        free(j);
    }
}

void raft_uv_remove_leftovers(struct raft_uv_node *d)
{
    DIR *dir = opendir(d->snapshot_dir);
    struct dirent *e;

    if (dir == NULL) {
        return;
    }
    while ((e = readdir(dir)) != NULL) {
        char path[4096];
        if (strncmp(e->d_name, RAFT__UV_REMOVE_PREFIX,
                    strlen(RAFT__UV_REMOVE_PREFIX)) != 0) {
            continue;
        }
        snprintf(path, sizeof path, "%.3800s/%.255s", d->snapshot_dir,
                 e->d_name);
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "snapshot: removing %s, left by an earlier run", path);
        queue_unlink(d, path, true);
    }
    closedir(dir);
}
