/* The driver's storage jobs on libuv: the queue of raft/persist.h, whose
 * head job runs on the libuv thread pool, one at a time, in queue order.
 *
 * Happy path: an update's hard state and entries are merged into the tail
 * job unless it runs or is sealed (group commit: one write transaction,
 * one fsync, for everything that arrived while the previous write ran).
 * When a job is durable the loop sends the messages held for it (raft.h
 * driver rule 1), steps RAFT_EVENT_PERSISTED with its last entry, then
 * RAFT_EVENT_COMPACT if it compacted. A snapshot install is a sealed job of
 * its own, so no append of the old log runs after it.
 * Failure modes: an append refused because the log is full (RAFT_NOSPACE,
 * nothing written) stays at the head of the queue and is retried once a
 * second, and at once after a compaction, which then runs ahead of it;
 * any other failed append or compaction (I/O error) stops the driver from
 * writing, voting and acknowledging until restarted; a
 * snapshot refused as corrupt or invalid leaves everything as it was and
 * is reported to the leader, which sends it again. */

#include <stdio.h>
#include <string.h>

#include "uv_node_internal.h"

/* Delay of the retry of a job refused for a full log, ms. */
#define RAFT__UV_LOG_FULL_RETRY_MS 1000

int raft_uv_storage_merge(struct raft_uv_node *d, const struct raft_update *u)
{
    return raft_persist_merge(&d->persist, u);
}

int raft_uv_storage_install(struct raft_uv_node *d,
                            const struct raft_uv_snapshot_recv *r)
{
    struct raft_persist_install in;
    memset(&in, 0, sizeof in);
    snprintf(in.path, sizeof in.path, "%s", r->path);
    in.index = r->index;
    in.last_term = r->last_term;
    in.checksum = r->checksum;
    in.leader = r->from;
    in.leader_term = r->term;
    return raft_persist_install(&d->persist, &in);
}

int raft_uv_node_compact(struct raft_uv_node *d, raft_index index)
{
    int rc;
    if (d->storage.log.compact == NULL ||
        index > raft_persisted_index(d->raft) ||
        index < raft_first_index(d->raft)) {
        return RAFT_INVALID;
    }
    rc = raft_persist_compact(&d->persist, index);
    if (rc != 0) {
        return rc;
    }
    raft_uv_storage_start(d);
    return 0;
}

const char *raft_uv_node_log_full_reason(const struct raft_uv_node *d)
{
    return d->log_full_reason;
}

bool raft_uv_node_log_full(const struct raft_uv_node *d)
{
    return raft_persist_room_wanted(&d->persist);
}

/* set_stalled steps RAFT_EVENT_STORAGE_STALLED when @stalled changes: a
 * server that cannot persist stops leading and campaigning (raft.h). */
static void set_stalled(struct raft_uv_node *d, bool stalled, const char *why)
{
    struct raft_event ev;
    if (stalled == d->stalled) {
        return;
    }
    d->stalled = stalled;
    if (stalled) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "%s: the node %s and does not campaign until it "
                         "can write again",
                         why,
                         raft_role(d->raft) == RAFT_LEADER ? "steps down"
                                                           : "stays follower");
    } else {
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "the log takes writes again: the node may lead");
    }
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_STORAGE_STALLED;
    ev.storage.stalled = stalled;
    raft_uv_node_step(d, &ev, NULL);
}

void raft_uv_storage_tick(struct raft_uv_node *d)
{
    if (d->disk_failed) {
        /* Here, not in raft_uv_storage_fail, which may run inside a
         * step. */
        set_stalled(d, true, "the log cannot be written");
    } else if (raft_persist_room_wanted(&d->persist) && !d->stalled &&
               d->full_since != 0 &&
               raft_uv_node_now(d) - d->full_since >= d->storage_stall_ms) {
        set_stalled(d, true, "no write for lack of room");
    }
    if (raft_persist_log_full(&d->persist) &&
        raft_uv_node_now(d) >= d->retry_at && raft_persist_retry(&d->persist)) {
        raft_uv_storage_start(d);
    }
}

void raft_uv_storage_fail(struct raft_uv_node *d, const char *why)
{
    d->disk_failed = true;
    snprintf(d->disk_failure, sizeof d->disk_failure, "%s", why);
    raft_uv_node_log(d, RAFT_LOG_ERROR,
                     "log write failed, the node stops writing, voting and "
                     "acknowledging until restarted: %s",
                     why);
}

/* verify_snapshot checks the received file of install job @j against its
 * checksum, setting the job's result when it does not match. */
static bool verify_snapshot(struct raft_persist_job *j)
{
    uint64_t sum = 0, size = 0;
    if (raft_uv_snapshot_checksum(j->snap.path, &sum, &size) != 0) {
        j->rc = RAFT_IOERR;
        snprintf(j->errmsg, sizeof j->errmsg,
                 "cannot read the received snapshot %.200s", j->snap.path);
        return false;
    }
    if (sum != j->snap.checksum) {
        j->rc = RAFT_CORRUPT;
        snprintf(j->errmsg, sizeof j->errmsg,
                 "received snapshot %.200s: checksum mismatch", j->snap.path);
        return false;
    }
    return true;
}

static void disk_work(uv_work_t *req)
{
    static _Thread_local bool named;
    struct raft_uv_node *d = req->data;
    struct raft_persist_job *j = d->disk_job;
    uint64_t start;
    if (!named) {
        /* libuv's pool threads inherit the loop thread's name: rename
         * them for top -H and perf (best effort, once per thread; the
         * pool is the process's, so a host's own libuv work may run on a
         * thread so named). */
        pthread_setname_np(pthread_self(), "raftsql-disk");
        named = true;
    }
    if (j->install && !verify_snapshot(j)) {
        return;
    }
    start = uv_hrtime();
    raft_persist_run(j, &d->storage);
    d->disk_ns = uv_hrtime() - start;
}

/* carry_out sends what job @res held and steps its events. */
static void carry_out(struct raft_uv_node *d,
                      const struct raft_persist_result *res)
{
    struct raft_event ev;
    for (unsigned i = 0; i < res->n_messages; i++) {
        raft_uv_node_send(d, &res->messages[i]);
    }
    if (res->persisted) {
        memset(&ev, 0, sizeof ev);
        ev.type = RAFT_EVENT_PERSISTED;
        ev.persisted.index = res->persisted_index;
        ev.persisted.term = res->persisted_term;
        raft_uv_node_step(d, &ev, NULL);
    }
    if (res->compact_index > 0) {
        memset(&ev, 0, sizeof ev);
        ev.type = RAFT_EVENT_COMPACT;
        ev.compact.index = res->compact_index;
        d->stats.n_compactions++;
        raft_uv_node_step(d, &ev, NULL);
    }
}

static void disk_after_work(uv_work_t *req, int status)
{
    struct raft_uv_node *d = req->data;
    struct raft_persist_job *j = d->disk_job;
    struct raft_persist_result res;

    d->disk_job = NULL;
    if (status != 0) {
        j->rc = RAFT_CANCELED;
        snprintf(j->errmsg, sizeof j->errmsg, "%s", uv_strerror(status));
    }
    raft_persist_done(&d->persist, j, !d->stopping, d->raft, &res);
    if (res.install != NULL) {
        raft_uv_snapshot_installed(d, res.install, res.rc, res.errmsg);
        raft_persist_job_free(j);
        raft_uv_storage_start(d);
        return;
    }
    if (res.outcome == RAFT_PERSIST_REQUEUED) {
        if (strcmp(d->log_full_reason, res.errmsg) != 0) {
            /* Once per reason, not at every retry. */
            raft_uv_node_log(d, RAFT_LOG_ERROR,
                             "no room for the log: writes wait until "
                             "compaction or freed disk space makes room, "
                             "and resume by themselves: %s",
                             res.errmsg);
            snprintf(d->log_full_reason, sizeof d->log_full_reason, "%s",
                     res.errmsg);
        }
        d->retry_at = raft_uv_node_now(d) + RAFT__UV_LOG_FULL_RETRY_MS;
        if (d->full_since == 0) {
            d->full_since = raft_uv_node_now(d) | 1; /* never 0 */
        }
        if (!res.log_full) {
            raft_uv_storage_start(d); /* the compaction */
        }
        return;
    }
    if (res.outcome == RAFT_PERSIST_FAILED) {
        raft_uv_storage_fail(d, res.errmsg);
        raft_persist_job_free(j);
        return;
    }
    if (res.wrote) {
        d->stats.n_writes++;
        d->stats.n_entries_written += res.n_entries;
        for (unsigned i = 0; i < j->n_entries; i++) {
            d->stats.n_bytes_written +=
                j->entries[i].data != NULL ? j->entries[i].data->len : 0;
        }
        raft_histogram_observe(&d->stats.write_seconds,
                               (double)d->disk_ns / 1e9);
        raft_histogram_observe(&d->stats.write_entries, res.n_entries);
    }
    if (res.wrote && !raft_persist_room_wanted(&d->persist)) {
        /* Not a hard state gone ahead of a refused append: it waits. */
        if (d->log_full_reason[0] != '\0') {
            raft_uv_node_log(d, RAFT_LOG_WARN,
                             "the log takes writes again (it had no room: "
                             "%s)",
                             d->log_full_reason);
            d->log_full_reason[0] = '\0';
        }
        d->full_since = 0;
        if (!d->stopping) {
            set_stalled(d, false, NULL);
        }
    }
    if (!d->stopping) {
        carry_out(d, &res);
    }
    raft_persist_job_free(j);
    raft_uv_storage_start(d);
}

void raft_uv_storage_start(struct raft_uv_node *d)
{
    struct raft_persist_job *j;
    int rc;
    if (d->disk_failed || d->stopping) {
        return;
    }
    j = raft_persist_next(&d->persist);
    if (j == NULL) {
        return;
    }
    d->disk_job = j;
    d->disk_req.data = d;
    rc = uv_queue_work(&d->loop, &d->disk_req, disk_work, disk_after_work);
    if (rc != 0) {
        d->disk_job = NULL;
        raft_uv_storage_fail(d, uv_strerror(rc));
    }
}

void raft_uv_storage_close(struct raft_uv_node *d)
{
    raft_persist_close(&d->persist);
}
