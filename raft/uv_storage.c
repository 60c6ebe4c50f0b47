/* The driver's storage jobs: one job runs at a time on the libuv thread
 * pool, in queue order.
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
#include <stdlib.h>
#include <string.h>

#include "message.h"
#include "uv_node_internal.h"

static void job_free(struct raft__uv_job *j)
{
    for (unsigned i = 0; i < j->n_entries; i++) {
        raft_buf_unref(j->entries[i].data);
    }
    for (unsigned i = 0; i < j->n_held; i++) {
        raft_message_release(&j->held[i]);
    }
    free(j->entries);
    free(j->held);
    free(j);
}

/* msg_clone deep-copies @src into @dst: the entries array is copied and
 * every buf referenced, so raft_message_release frees it. */
static int msg_clone(const struct raft_message *src, struct raft_message *dst)
{
    *dst = *src;
    if (src->type == RAFT_MSG_APPEND_ENTRIES &&
        src->append_entries.n_entries > 0) {
        uint32_t cnt = src->append_entries.n_entries;
        struct raft_entry *e = malloc(cnt * sizeof *e);
        if (e == NULL) {
            return RAFT_NOMEM;
        }
        memcpy(e, src->append_entries.entries, cnt * sizeof *e);
        for (uint32_t i = 0; i < cnt; i++) {
            raft_buf_ref(e[i].data);
        }
        dst->append_entries.entries = e;
    }
    return 0;
}

/* push_job appends a new empty job to the queue. */
static struct raft__uv_job *push_job(struct raft_uv_node *d)
{
    struct raft__uv_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        return NULL;
    }
    if (d->jobs_tail != NULL) {
        d->jobs_tail->next = j;
    } else {
        d->jobs_head = j;
    }
    d->jobs_tail = j;
    return j;
}

/* open_tail returns the job new work merges into. */
static struct raft__uv_job *open_tail(struct raft_uv_node *d)
{
    struct raft__uv_job *t = d->jobs_tail;
    if (t == NULL || t->sealed || (t == d->jobs_head && d->disk_busy)) {
        return push_job(d);
    }
    return t;
}

int raft__uv_storage_merge(struct raft_uv_node *d,
                           const struct raft_update *u)
{
    struct raft__uv_job *j = open_tail(d);
    if (j == NULL) {
        return RAFT_NOMEM;
    }
    if (u->hard_state_changed) {
        j->has_hs = true;
        j->hs = u->hard_state;
    }
    if (u->n_entries > 0) {
        raft_index first = u->entries[0].index;
        /* Entries at or after @first replace the job's tail (a conflicting
         * suffix); older jobs' entries are deleted by this job's write. */
        while (j->n_entries > 0 &&
               j->entries[j->n_entries - 1].index >= first) {
            raft_buf_unref(j->entries[--j->n_entries].data);
        }
        if (j->n_entries + u->n_entries > j->cap_entries) {
            unsigned cap = (j->n_entries + u->n_entries) * 2;
            struct raft_entry *e = realloc(j->entries, cap * sizeof *e);
            if (e == NULL) {
                return RAFT_NOMEM;
            }
            j->entries = e;
            j->cap_entries = cap;
        }
        for (unsigned i = 0; i < u->n_entries; i++) {
            j->entries[j->n_entries] = u->entries[i];
            raft_buf_ref(u->entries[i].data);
            j->n_entries++;
        }
    }
    if (u->hard_state_changed && u->n_messages > 0) {
        if (j->n_held + u->n_messages > j->cap_held) {
            unsigned cap = (j->n_held + u->n_messages) * 2;
            struct raft_message *m = realloc(j->held, cap * sizeof *m);
            if (m == NULL) {
                return RAFT_NOMEM;
            }
            j->held = m;
            j->cap_held = cap;
        }
        for (unsigned i = 0; i < u->n_messages; i++) {
            int rc = msg_clone(&u->messages[i], &j->held[j->n_held]);
            if (rc != 0) {
                return rc;
            }
            j->n_held++;
        }
    }
    return 0;
}

int raft__uv_storage_install(struct raft_uv_node *d,
                             const struct raft__uv_snapshot_recv *r)
{
    struct raft__uv_job *j = push_job(d);
    if (j == NULL) {
        return RAFT_NOMEM;
    }
    j->install = true;
    j->sealed = true;
    snprintf(j->path, sizeof j->path, "%s", r->path);
    j->snap_index = r->index;
    j->snap_term = r->last_term;
    j->snap_checksum = r->checksum;
    j->snap_leader = r->from;
    j->snap_leader_term = r->term;
    return 0;
}

int raft_uv_node_compact(struct raft_uv_node *d, raft_index index)
{
    struct raft__uv_job *j;
    if (d->storage.compact == NULL ||
        index > raft_persisted_index(d->raft) ||
        index < raft_first_index(d->raft)) {
        return RAFT_INVALID;
    }
    if (d->compact_queued) {
        return RAFT_BUSY;
    }
    if (d->log_full && !d->disk_busy) {
        /* Free space first: the compaction runs ahead of the refused
         * append (it only deletes entries the state machine holds). */
        j = calloc(1, sizeof *j);
        if (j == NULL) {
            return RAFT_NOMEM;
        }
        j->sealed = true;
        j->next = d->jobs_head;
        d->jobs_head = j;
        if (d->jobs_tail == NULL) {
            d->jobs_tail = j;
        }
        d->log_full = false;
    } else {
        j = open_tail(d);
        if (j == NULL) {
            return RAFT_NOMEM;
        }
    }
    j->compact_to = index;
    d->compact_queued = true;
    raft__uv_storage_start(d);
    return 0;
}

bool raft_uv_node_log_full(const struct raft_uv_node *d)
{
    return d->log_full;
}

void raft__uv_storage_tick(struct raft_uv_node *d)
{
    if (d->log_full && !d->disk_busy &&
        raft_uv_node_now(d) >= d->retry_at) {
        d->log_full = false;
        raft__uv_storage_start(d);
    }
}

void raft__uv_storage_fail(struct raft_uv_node *d, const char *why)
{
    d->disk_failed = true;
    raft__uv_node_log(d, RAFT_LOG_ERROR,
                      "log write failed, the node stops writing, voting and "
                      "acknowledging until restarted: %s",
                      why);
}

static void disk_work(uv_work_t *req)
{
    static _Thread_local bool named;
    struct raft_uv_node *d = req->data;
    struct raft__uv_job *j = d->jobs_head;
    if (!named) {
        /* libuv's pool threads inherit the loop thread's name: rename
         * them for top -H and perf (best effort, once per thread; the
         * pool is the process's, so a host's own libuv work may run on a
         * thread so named). */
        pthread_setname_np(pthread_self(), "raftsql-disk");
        named = true;
    }
    j->rc = 0;
    if (j->install) {
        uint64_t sum = 0, size = 0;
        if (raft__uv_file_checksum(j->path, &sum, &size) != 0) {
            j->rc = RAFT_IOERR;
            snprintf(j->errmsg, sizeof j->errmsg,
                     "cannot read the received snapshot %.200s", j->path);
        } else if (sum != j->snap_checksum) {
            j->rc = RAFT_CORRUPT;
            snprintf(j->errmsg, sizeof j->errmsg,
                     "received snapshot %.200s: checksum mismatch", j->path);
        } else {
            j->rc = d->storage.snapshot_install(
                d->storage.data, j->path, j->snap_index, j->snap_term,
                j->errmsg, sizeof j->errmsg);
        }
        return;
    }
    if (j->has_hs || j->n_entries > 0) {
        /* A write handed out before a snapshot install that runs after it
         * drops its entries up to the install's index, and all of them
         * when they no longer follow the log (raft.h SNAPSHOT_INSTALLED). */
        const struct raft_entry *e = j->entries;
        unsigned n = j->n_entries;
        while (n > 0 && e->index <= d->install_boundary) {
            e++;
            n--;
        }
        j->skip = j->n_entries - n;
        j->rc = d->storage.append(d->storage.data, j->has_hs ? &j->hs : NULL,
                                  e, n, j->errmsg, sizeof j->errmsg);
        if (j->rc == RAFT_INVALID && d->install_boundary > 0 && n > 0) {
            j->stale = true;
            j->rc = j->has_hs ? d->storage.append(d->storage.data, &j->hs,
                                                  NULL, 0, j->errmsg,
                                                  sizeof j->errmsg)
                              : 0;
        }
    }
    if (j->rc == 0 && j->compact_to > 0) {
        j->rc = d->storage.compact(d->storage.data, j->compact_to, j->errmsg,
                                   sizeof j->errmsg);
    }
}

static void disk_after_work(uv_work_t *req, int status)
{
    struct raft_uv_node *d = req->data;
    struct raft__uv_job *j = d->jobs_head;
    struct raft_event ev;

    d->disk_busy = false;
    d->jobs_head = j->next;
    if (d->jobs_head == NULL) {
        d->jobs_tail = NULL;
    }
    if (j->compact_to > 0) {
        d->compact_queued = false;
    }
    if (status != 0) {
        j->rc = RAFT_CANCELED;
        snprintf(j->errmsg, sizeof j->errmsg, "%s", uv_strerror(status));
    }
    if (j->install) {
        raft__uv_snapshot_installed(d, j, j->rc);
        job_free(j);
        raft__uv_storage_start(d);
        return;
    }
    if (j->rc == RAFT_NOSPACE && !d->stopping) {
        /* Nothing was written: keep the job, first in line, for a retry
         * once space is freed. A compaction it carried goes first. */
        if (j->compact_to > 0) {
            struct raft__uv_job *c = calloc(1, sizeof *c);
            if (c != NULL) {
                c->compact_to = j->compact_to;
                c->sealed = true;
                c->next = j;
                j->compact_to = 0;
                d->compact_queued = true;
            }
            j->next = d->jobs_head;
            d->jobs_head = c != NULL ? c : j;
        } else {
            j->next = d->jobs_head;
            d->jobs_head = j;
        }
        if (d->jobs_tail == NULL) {
            d->jobs_tail = j;
        }
        if (!d->log_full) {
            raft__uv_node_log(d, RAFT_LOG_ERROR,
                              "log full, writes wait until compaction frees "
                              "space (or log_max_mb is raised and the node "
                              "restarted): %s",
                              j->errmsg);
        }
        d->log_full = d->jobs_head == j;
        d->retry_at = raft_uv_node_now(d) + 1000;
        if (!d->log_full) {
            raft__uv_storage_start(d); /* the compaction */
        }
        return;
    }
    if (j->rc != 0) {
        raft__uv_storage_fail(d, j->errmsg);
        job_free(j);
        return;
    }
    if (j->has_hs || j->n_entries > 0) {
        d->stats.n_writes++;
        d->stats.n_entries_written += j->n_entries;
    }
    if (!d->stopping) {
        for (unsigned i = 0; i < j->n_held; i++) {
            raft_uv_node_send(d, &j->held[i]);
        }
        if (j->n_entries > j->skip && !j->stale) {
            memset(&ev, 0, sizeof ev);
            ev.type = RAFT_EVENT_PERSISTED;
            ev.persisted.index = j->entries[j->n_entries - 1].index;
            ev.persisted.term = j->entries[j->n_entries - 1].term;
            raft__uv_node_step(d, &ev, NULL);
        }
        if (j->compact_to > 0) {
            memset(&ev, 0, sizeof ev);
            ev.type = RAFT_EVENT_COMPACT;
            ev.compact.index = j->compact_to;
            d->stats.n_compactions++;
            raft__uv_node_step(d, &ev, NULL);
        }
    }
    job_free(j);
    raft__uv_storage_start(d);
}

void raft__uv_storage_start(struct raft_uv_node *d)
{
    struct raft__uv_job *j = d->jobs_head;
    int rc;
    if (d->disk_busy || d->disk_failed || d->log_full || d->stopping ||
        j == NULL) {
        return;
    }
    if (!j->install && !j->has_hs && j->n_entries == 0 && j->n_held == 0 &&
        j->compact_to == 0) {
        /* Nothing to write (every merge was replaced): drop it. */
        d->jobs_head = j->next;
        if (d->jobs_head == NULL) {
            d->jobs_tail = NULL;
        }
        job_free(j);
        raft__uv_storage_start(d);
        return;
    }
    d->disk_req.data = d;
    rc = uv_queue_work(&d->loop, &d->disk_req, disk_work, disk_after_work);
    if (rc != 0) {
        raft__uv_storage_fail(d, uv_strerror(rc));
        return;
    }
    d->disk_busy = true;
}

void raft__uv_storage_close(struct raft_uv_node *d)
{
    while (d->jobs_head != NULL) {
        struct raft__uv_job *j = d->jobs_head;
        d->jobs_head = j->next;
        job_free(j);
    }
    d->jobs_tail = NULL;
}
