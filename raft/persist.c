/* The storage job queue (persist.h): merging, sealing, held messages,
 * compaction and install jobs in order, the stale writes of an install and
 * the NOSPACE requeue. Pure: no libuv, threads or clock. */

#include "persist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"

void raft_persist_job_free(struct raft_persist_job *j)
{
    if (j == NULL) {
        return;
    }
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

/* clone_message deep-copies @src into @dst: the entries array is copied
 * and every buf referenced, so raft_message_release frees it. */
static int clone_message(const struct raft_message *src,
                         struct raft_message *dst)
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

/* push_tail appends a new empty job to the queue. */
static struct raft_persist_job *push_tail(struct raft_persist *p)
{
    struct raft_persist_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        return NULL;
    }
    if (p->tail != NULL) {
        p->tail->next = j;
    } else {
        p->head = j;
    }
    p->tail = j;
    return j;
}

/* push_head puts job @j first in the queue. */
static void push_head(struct raft_persist *p, struct raft_persist_job *j)
{
    j->next = p->head;
    p->head = j;
    if (p->tail == NULL) {
        p->tail = j;
    }
}

/* pop_head takes the head job out of the queue. */
static struct raft_persist_job *pop_head(struct raft_persist *p)
{
    struct raft_persist_job *j = p->head;
    p->head = j->next;
    if (p->head == NULL) {
        p->tail = NULL;
    }
    j->next = NULL;
    return j;
}

/* open_tail returns the job new work merges into. */
static struct raft_persist_job *open_tail(struct raft_persist *p)
{
    struct raft_persist_job *t = p->tail;
    if (t == NULL || t->sealed || (t == p->head && p->running)) {
        return push_tail(p);
    }
    return t;
}

/* grow makes room for @need (> 0) elements of @size bytes in array @arr
 * of *@cap, doubling what is needed. Returns the array, or NULL when out
 * of memory (@arr is left as it was). */
static void *grow(void *arr, unsigned *cap, unsigned need, size_t size)
{
    void *a;
    if (need <= *cap) {
        return arr;
    }
    a = realloc(arr, (size_t)need * 2 * size);
    if (a != NULL) {
        *cap = need * 2;
    }
    return a;
}

/* has_write tells whether job @j writes hard state or entries. */
static bool has_write(const struct raft_persist_job *j)
{
    return j->has_hs || j->n_entries > 0;
}

/* hs_to_front lets the newest hard state of the queue go ahead of the
 * append that waits for space (a full log still takes a new term and
 * vote: the store keeps a reserve for them, so elections go on): a sealed
 * job with that hard state and every held message of the queue, in queue
 * order (rule 1 holds: each was held for a hard state no newer than it),
 * goes first, and no other job writes a hard state any more (an older one
 * must never follow it). Writing the term or vote before older entries is
 * safe: the core acknowledges entries only once PERSISTED says so.
 * Returns whether it did (false: no hard state queued, it is first
 * already, or out of memory, and then nothing changed). */
static bool hs_to_front(struct raft_persist *p)
{
    struct raft_persist_job *last = NULL, *f;
    unsigned n_held = 0;

    for (struct raft_persist_job *q = p->head; q != NULL; q = q->next) {
        if (q->has_hs) {
            last = q;
        }
        n_held += q->n_held;
    }
    if (last == NULL || (last == p->head && last->n_entries == 0 &&
                         !last->install && last->compact_to == 0)) {
        return false;
    }
    f = calloc(1, sizeof *f);
    if (f == NULL) {
        return false;
    }
    if (n_held > 0) {
        f->held = malloc(n_held * sizeof *f->held);
        if (f->held == NULL) {
            free(f);
            return false;
        }
        f->cap_held = n_held;
    }
    f->sealed = true;
    f->has_hs = true;
    f->hs = last->hs;
    for (struct raft_persist_job *q = p->head; q != NULL; q = q->next) {
        if (q->n_held > 0) {
            memcpy(f->held + f->n_held, q->held, q->n_held * sizeof *q->held);
            f->n_held += q->n_held;
        }
        q->n_held = 0;
        q->has_hs = false;
    }
    push_head(p, f);
    return true;
}

void raft_persist_init(struct raft_persist *p)
{
    memset(p, 0, sizeof *p);
}

void raft_persist_close(struct raft_persist *p)
{
    while (p->head != NULL) {
        raft_persist_job_free(pop_head(p));
    }
    raft_persist_init(p);
}

int raft_persist_merge(struct raft_persist *p, const struct raft_update *u)
{
    struct raft_persist_job *j = open_tail(p);
    struct raft_entry *e;
    struct raft_message *m;
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
        if (j->n_old > j->n_entries) {
            j->n_old = j->n_entries;
        }
        e = grow(j->entries, &j->cap_entries, j->n_entries + u->n_entries,
                 sizeof *e);
        if (e == NULL) {
            return RAFT_NOMEM;
        }
        memcpy(e + j->n_entries, u->entries, u->n_entries * sizeof *e);
        for (unsigned i = 0; i < u->n_entries; i++) {
            raft_buf_ref(u->entries[i].data);
        }
        j->entries = e;
        j->n_entries += u->n_entries;
    }
    if (u->hard_state_changed && u->n_messages > 0) {
        m = grow(j->held, &j->cap_held, j->n_held + u->n_messages, sizeof *m);
        if (m == NULL) {
            return RAFT_NOMEM;
        }
        j->held = m;
        for (unsigned i = 0; i < u->n_messages; i++) {
            int rc = clone_message(&u->messages[i], &j->held[j->n_held]);
            if (rc != 0) {
                return rc;
            }
            j->n_held++;
        }
    }
    if (u->hard_state_changed && p->log_full && hs_to_front(p)) {
        /* The queue waited for space: the new term or vote goes first,
         * at once (an election must not wait for the retry). */
        p->log_full = false;
    }
    return 0;
}

int raft_persist_install(struct raft_persist *p,
                         const struct raft_persist_install *in)
{
    struct raft_persist_job *j = push_tail(p);
    if (j == NULL) {
        return RAFT_NOMEM;
    }
    j->install = true;
    j->sealed = true;
    j->snap = *in;
    return 0;
}

int raft_persist_compact(struct raft_persist *p, raft_index index)
{
    struct raft_persist_job *j;
    if (p->compact_queued) {
        return RAFT_BUSY;
    }
    if (p->log_full && !p->running) {
        /* Free space first: the compaction runs ahead of the refused
         * append (it only deletes entries the state machine holds). */
        j = calloc(1, sizeof *j);
        if (j == NULL) {
            return RAFT_NOMEM;
        }
        j->sealed = true;
        push_head(p, j);
        p->log_full = false;
    } else {
        j = open_tail(p);
        if (j == NULL) {
            return RAFT_NOMEM;
        }
    }
    j->compact_to = index;
    p->compact_queued = true;
    return 0;
}

bool raft_persist_log_full(const struct raft_persist *p)
{
    return p->log_full;
}

bool raft_persist_room_wanted(const struct raft_persist *p)
{
    for (const struct raft_persist_job *q = p->head; q != NULL; q = q->next) {
        if (q->refused) {
            return true;
        }
    }
    return false;
}

bool raft_persist_retry(struct raft_persist *p)
{
    if (!p->log_full || p->running) {
        return false;
    }
    p->log_full = false;
    return true;
}

struct raft_persist_job *raft_persist_next(struct raft_persist *p)
{
    struct raft_persist_job *j;
    while ((j = p->head) != NULL && !p->running && !p->log_full) {
        if (j->install || has_write(j) || j->n_held > 0 || j->compact_to > 0) {
            p->running = true;
            j->boundary = p->install_boundary;
            return j;
        }
        /* Nothing to do (every merge was replaced): drop it. */
        raft_persist_job_free(pop_head(p));
    }
    return NULL;
}

/* run_install carries out install job @j on @s (raft_persist_run). */
static void run_install(struct raft_persist_job *j,
                        const struct raft_persist_storage *s)
{
    char why[sizeof j->errmsg - 48]; /* room for the prefix */
    bool installed = false;
    raft_index first = 0;
    raft_term held = 0;
    int rc;

    j->snap.has_configuration = false;
    if (s->fsm.snapshot_configuration != NULL) {
        j->rc = s->fsm.snapshot_configuration(s->fsm.data, j->snap.path,
                                              &j->snap.configuration, j->errmsg,
                                              sizeof j->errmsg);
        j->snap.has_configuration = j->rc == 0;
        if (j->rc == RAFT_NOTFOUND) {
            j->rc = 0; /* none stored: the core keeps its own */
        }
    }
    if (j->rc == 0 && s->log.prepare != NULL) {
        j->rc = s->log.prepare(s->log.data, j->errmsg, sizeof j->errmsg);
    }
    /* What the log holds at the snapshot's index, read before anything
     * changes (no other job runs until this one is done): a failed read
     * leaves everything as it was, and the leader sends the snapshot
     * again. */
    if (j->rc == 0 && s->log.entry_term(s->log.data, j->snap.index, &first,
                                        &held, why, sizeof why) != 0) {
        snprintf(j->errmsg, sizeof j->errmsg,
                 "read the log at the snapshot's index %" PRIu64 ": %s",
                 j->snap.index, why);
        j->rc = RAFT_BUSY;
    }
    if (j->rc == 0) {
        j->rc = s->fsm.snapshot_install(
            s->fsm.data, j->snap.path, j->snap.index, j->snap.last_term,
            &installed, j->errmsg, sizeof j->errmsg);
    }
    /* The log follows the state machine by paper §7, as the core decides
     * from what the log held before the install: when it holds the
     * snapshot's last entry (its index, of its term), only the log
     * through it goes (the entries after it are the leader's and may be
     * committed copies); otherwise the log restarts empty after it. A
     * snapshot below the first stored index (a repair's, at an applied
     * index compacted through already) covers nothing the log holds:
     * nothing changes. */
    if (j->rc != 0 || !installed || j->snap.index < first) {
        return;
    }
    if (raft_snapshot_log_action(held, j->snap.last_term) ==
        RAFT_SNAPSHOT_KEEP_SUFFIX) {
        rc = s->log.compact(s->log.data, j->snap.index, why, sizeof why);
    } else {
        rc = s->log.reset(s->log.data, j->snap.index, j->snap.last_term, why,
                          sizeof why);
    }
    if (rc != 0) {
        /* The state machine is ahead of the log: a restart repairs that. */
        snprintf(j->errmsg, sizeof j->errmsg,
                 "change the log after the snapshot: %s", why);
        j->rc = RAFT_IOERR;
    }
}

void raft_persist_run(struct raft_persist_job *j,
                      const struct raft_persist_storage *s)
{
    const struct raft_persist_log *l = &s->log;

    j->rc = 0;
    j->skip = 0;
    j->stale = false;
    if (j->install) {
        run_install(j, s);
        return;
    }
    if ((has_write(j) || j->compact_to > 0) && l->prepare != NULL) {
        j->rc = l->prepare(l->data, j->errmsg, sizeof j->errmsg);
        if (j->rc != 0) {
            return;
        }
    }
    if (has_write(j)) {
        /* A write handed out before a snapshot install that runs after it
         * drops the entries the core dropped: all those handed out before
         * a reset of the log, and those up to the install's index; and
         * all of them when the rest no longer follows the log (raft.h
         * SNAPSHOT_INSTALLED). */
        const struct raft_entry *e = j->entries + j->n_old;
        unsigned n = j->n_entries - j->n_old;
        while (n > 0 && e->index <= j->boundary) {
            e++;
            n--;
        }
        j->skip = j->n_entries - n;
        j->rc = l->append(l->data, j->has_hs ? &j->hs : NULL, e, n, j->errmsg,
                          sizeof j->errmsg);
        if (j->rc == RAFT_INVALID && j->boundary > 0 && n > 0) {
            j->stale = true;
            j->rc = j->has_hs ? l->append(l->data, &j->hs, NULL, 0, j->errmsg,
                                          sizeof j->errmsg)
                              : 0;
        }
    }
    if (j->rc == 0 && j->compact_to > 0) {
        j->rc = l->compact(l->data, j->compact_to, j->errmsg, sizeof j->errmsg);
    }
}

/* requeue puts refused job @j back first; a compaction it carried along
 * with its write becomes a job of its own ahead of it (a compaction alone
 * just waits). Sets log_full when @j is first. */
/* split_half moves the second half of refused job @j's entries into a new
 * sealed job right behind it, so that the next try asks for half the
 * room (one entry always fits in a log that takes the largest request:
 * max_request_bytes is at most a quarter of log_max_mb). Out of memory:
 * @j stays whole. */
static void split_half(struct raft_persist *p, struct raft_persist_job *j)
{
    unsigned k = j->n_entries / 2, rest = j->n_entries - k;
    struct raft_persist_job *b;

    if (k == 0) {
        return;
    }
    b = calloc(1, sizeof *b);
    if (b == NULL) {
        return;
    }
    b->entries = malloc(rest * sizeof *b->entries);
    if (b->entries == NULL) {
        free(b);
        return;
    }
    memcpy(b->entries, j->entries + k, rest * sizeof *b->entries);
    b->n_entries = rest;
    b->cap_entries = rest;
    b->sealed = true;
    b->refused = true;
    b->after_install = j->after_install;
    b->n_old = j->n_old > k ? j->n_old - k : 0;
    j->n_old = j->n_old > k ? k : j->n_old;
    j->n_entries = k;
    b->next = j->next;
    j->next = b;
    if (p->tail == j) {
        p->tail = b;
    }
}

/* compaction_to_front moves the queued compaction (if any) to the head of
 * the queue: a job of its own, split from the job that carried it with a
 * write. It only deletes entries the state machine holds, durable before
 * it was asked for, so it may go ahead of any queued write; it must, when
 * an append waits for room: it was asked for while a hard state ran ahead
 * of that append, and landed behind it. Out of memory: nothing moves (the
 * next refusal tries again). */
static void compaction_to_front(struct raft_persist *p)
{
    struct raft_persist_job *q, *prev = NULL, *c;

    for (q = p->head; q != NULL && q->compact_to == 0; q = q->next) {
        prev = q;
    }
    if (q == NULL || q == p->head) {
        return;
    }
    if (!q->install && !has_write(q) && q->n_held == 0) {
        prev->next = q->next; /* unlink it */
        if (p->tail == q) {
            p->tail = prev;
        }
        q->next = NULL;
        q->sealed = true;
        push_head(p, q);
        return;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        return;
    }
    c->compact_to = q->compact_to;
    c->sealed = true;
    q->compact_to = 0;
    push_head(p, c);
}

static void requeue(struct raft_persist *p, struct raft_persist_job *j)
{
    struct raft_persist_job *c = NULL;
    if (j->compact_to > 0 && has_write(j)) {
        c = calloc(1, sizeof *c);
        if (c != NULL) {
            c->compact_to = j->compact_to;
            c->sealed = true;
            j->compact_to = 0;
        }
    }
    push_head(p, j);
    j->refused = true;
    /* Sealed: what arrives while it waits goes to a later job, or the
     * retried write would grow past what the log can ever take; and it
     * asks for half the room at its next try. */
    j->sealed = true;
    split_half(p, j);
    if (c != NULL) {
        push_head(p, c);
    }
    /* A refused append must not hold up a new term or vote: those go
     * ahead of it (a refused write of the hard state alone just waits). */
    if (j->n_entries > 0) {
        hs_to_front(p);
    }
    compaction_to_front(p);
    p->log_full = p->head == j;
}

/* installed records the successful install of job @j: the boundary, and
 * what the queued jobs must drop. */
static void installed(struct raft_persist *p, const struct raft_persist_job *j,
                      bool reset)
{
    if (j->snap.index > p->install_boundary) {
        p->install_boundary = j->snap.index;
    }
    /* What is queued now was handed out before the core learns of the
     * install; when the log is reset, none of its entries is the core's
     * any more. */
    for (struct raft_persist_job *q = p->head; q != NULL; q = q->next) {
        q->after_install = true;
        if (reset) {
            q->n_old = q->n_entries;
        }
    }
}

void raft_persist_done(struct raft_persist *p, struct raft_persist_job *j,
                       bool requeue_nospace, const struct raft *core,
                       struct raft_persist_result *out)
{
    memset(out, 0, sizeof *out);
    p->running = false;
    pop_head(p);
    out->rc = j->rc;
    out->errmsg = j->rc != 0 ? j->errmsg : NULL;
    out->after_install = j->after_install;
    if (j->install) {
        out->install = &j->snap;
        out->outcome = j->rc == 0 ? RAFT_PERSIST_DONE : RAFT_PERSIST_FAILED;
        if (j->rc == 0) {
            out->reset = raft_snapshot_resets_log(core, j->snap.index,
                                                  j->snap.last_term);
            installed(p, j, out->reset);
        }
        return;
    }
    if (j->rc == RAFT_NOSPACE && requeue_nospace) {
        /* Nothing was written: keep the job, first in line, for a retry
         * once space is freed. */
        requeue(p, j);
        out->outcome = RAFT_PERSIST_REQUEUED;
        out->log_full = p->log_full;
        return;
    }
    if (j->compact_to > 0) {
        p->compact_queued = false;
    }
    if (j->rc != 0) {
        out->outcome = RAFT_PERSIST_FAILED;
        return;
    }
    out->outcome = RAFT_PERSIST_DONE;
    out->wrote = has_write(j);
    out->n_entries = j->n_entries;
    out->messages = j->held;
    out->n_messages = j->n_held;
    out->n_skipped = j->skip;
    out->stale = j->stale;
    if (j->n_entries > j->skip && !j->stale) {
        out->persisted = true;
        out->persisted_index = j->entries[j->n_entries - 1].index;
        out->persisted_term = j->entries[j->n_entries - 1].term;
    }
    out->compact_index = j->compact_to;
}
