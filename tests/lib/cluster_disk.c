/* The cluster's disks (cluster.h), built on the driver's storage job queue
 * (raft/persist.h): each node's disk runs one job at a time, for a latency
 * of disk_min..disk_max ms, then carries out its result as the driver
 * does; the in-memory durable log, hard state and state machine install
 * below implement the storage interface the jobs run on.
 *
 * Happy path: an update's durable work is merged into the open tail job
 * -> the head job runs; on completion raft_persist_run writes it (stale
 * entries of a write handed out before an install dropped) and
 * raft_persist_done says what to do: send the held messages, step
 * PERSISTED, step COMPACT; an install job steps SNAPSHOT_INSTALLED.
 * Failure modes: with disk_full_pct, appends are refused with RAFT_NOSPACE
 * (nothing written): the job waits first in the queue for a compaction
 * (which runs ahead of it) or a retry 1000 ms later. Any other failure is
 * a bug, in the core or the queue: it fails the test. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft/persist.h"
#include "tests/lib/cluster_internal.h"

/* Delay of the retry of a job refused for a full log (the driver's). */
#define CLUSTER__LOG_FULL_RETRY_MS 1000

raft_index cluster_disk_last(const struct cnode *n)
{
    return n->base + n->n_log;
}

const struct raft_entry *cluster_disk_at(const struct cnode *n,
                                         raft_index index)
{
    if (index <= n->base || index > cluster_disk_last(n)) {
        return NULL;
    }
    return &n->log[index - n->base - 1];
}

raft_term cluster_disk_term(const struct cnode *n, raft_index index)
{
    const struct raft_entry *e = cluster_disk_at(n, index);

    if (e != NULL) {
        return e->term;
    }
    return index != 0 && index == n->base ? n->base_term : 0;
}

/* drop_prefix deletes @n's durable entries through @index (> base). */
static void drop_prefix(struct cnode *n, raft_index index)
{
    raft_index k = index - n->base;

    for (raft_index i = 0; i < k; i++) {
        raft_buf_unref(n->log[i].data);
    }
    memmove(n->log, n->log + k, (n->n_log - k) * sizeof *n->log);
    n->n_log -= (unsigned)k;
    n->base = index;
}

/* ---- The storage interface ---------------------------------------------- */

/* disk_append is the storage's append (raft/persist.h): @hs and @entries
 * become durable at once, after the entries from entries[0] on are
 * deleted (driver rule 2). Entries that do not follow the log are refused
 * (RAFT_INVALID), as the LMDB log does; with disk_full_pct some appends
 * are refused for lack of space (RAFT_NOSPACE). */
static int disk_append(void *data, const struct raft_hard_state *hs,
                       const struct raft_entry *entries, unsigned cnt,
                       char *errmsg, size_t errmsg_len)
{
    struct cnode *n = data;
    struct cluster *c = n->c;
    raft_index first = cnt > 0 ? entries[0].index : 0;
    bool follows;
    unsigned i;

    follows =
        cnt == 0 || (first > n->base && first <= cluster_disk_last(n) + 1);
    for (i = 1; i < cnt && follows; i++) {
        follows = entries[i].index == first + i;
    }
    if (!follows) {
        snprintf(errmsg, errmsg_len,
                 "entries %llu..%llu do not follow the log %llu..%llu",
                 (unsigned long long)first,
                 (unsigned long long)entries[cnt - 1].index,
                 (unsigned long long)n->base + 1,
                 (unsigned long long)cluster_disk_last(n));
        return RAFT_INVALID;
    }
    if (cnt > 0 && cluster_random(c, 0, 99) < c->cfg.disk_full_pct) {
        c->stats.n_log_full++;
        snprintf(errmsg, errmsg_len, "log full (disk_full_pct)");
        return RAFT_NOSPACE;
    }
    if (cnt > 0) {
        if (first <= cluster_disk_last(n)) {
            n->n_truncations++;
        }
        if (c->verbose) {
            fprintf(stderr,
                    "t=%llu node %llu writes %llu..%llu (term "
                    "%llu..%llu) over %llu\n",
                    (unsigned long long)c->now, (unsigned long long)n->id,
                    (unsigned long long)first,
                    (unsigned long long)(first + cnt - 1),
                    (unsigned long long)entries[0].term,
                    (unsigned long long)entries[cnt - 1].term,
                    (unsigned long long)cluster_disk_last(n));
        }
        cluster_check_write(c, n, entries, cnt);
        while (cluster_disk_last(n) >= first) {
            raft_buf_unref(n->log[--n->n_log].data);
        }
        if (n->n_log + cnt > n->cap_log) {
            n->cap_log = (n->n_log + cnt) * 2;
            n->log = cluster_alloc(c, n->log, n->cap_log * sizeof *n->log);
        }
        for (i = 0; i < cnt; i++) {
            n->log[n->n_log++] = entries[i];
            raft_buf_ref(entries[i].data);
        }
    }
    if (hs != NULL) {
        n->hs = *hs;
    }
    if (cnt > 0) {
        cluster_check_log_matching(c, n);
    }
    return 0;
}

/* disk_compact is the storage's compact: the durable log through @index
 * goes (the state machine holds it); an @index at or below the boundary
 * changes nothing, one past the log is refused (RAFT_INVALID). */
static int disk_compact(void *data, raft_index index, char *errmsg,
                        size_t errmsg_len)
{
    struct cnode *n = data;
    struct cluster *c = n->c;

    if (index <= n->base) {
        return 0;
    }
    if (index > cluster_disk_last(n)) {
        snprintf(errmsg, errmsg_len,
                 "compact through %llu past the log's "
                 "end %llu",
                 (unsigned long long)index,
                 (unsigned long long)cluster_disk_last(n));
        return RAFT_INVALID;
    }
    n->base_term = cluster_disk_term(n, index);
    drop_prefix(n, index);
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu compacts through %llu\n",
                (unsigned long long)c->now, (unsigned long long)n->id,
                (unsigned long long)index);
    }
    return 0;
}

/* disk_install is the state machine's snapshot install: snapshot @path
 * is "node-<id>", the state machine of node id through @index (its
 * applied entries; it only grows, so it is the same as when the transfer
 * ended). It replaces this node's state machine; raft_persist_run then
 * changes the durable log by paper §7 (disk_entry_term, then
 * disk_compact or disk_reset). A state machine already at or past @index
 * is left alone (not installed). */
static int disk_install(void *data, const char *path, raft_index index,
                        raft_term last_term, bool *out_installed, char *errmsg,
                        size_t errmsg_len)
{
    struct cnode *f = data;
    struct cluster *c = f->c;
    const struct cnode *l;
    unsigned long long from;
    unsigned k;

    (void)last_term;
    *out_installed = false;
    if (sscanf(path, "node-%llu", &from) != 1) {
        snprintf(errmsg, errmsg_len, "no snapshot %s", path);
        return RAFT_INVALID;
    }
    l = cluster_node(c, from);
    f->install_reset = false;
    if (index <= f->n_applied) {
        return 0;
    }
    cluster_check_install(c, f, l);
    if (index > f->cap_applied) {
        f->cap_applied = (unsigned)index * 2;
        f->applied =
            cluster_alloc(c, f->applied, f->cap_applied * sizeof *f->applied);
    }
    for (k = f->n_applied; k < index; k++) {
        f->applied[k] = l->applied[k];
        raft_buf_ref(f->applied[k].data);
    }
    f->n_applied = (unsigned)index;
    c->stats.n_installs++;
    *out_installed = true;
    return 0;
}

/* disk_entry_term gives the durable log's first index and the term of its
 * entry @index (0 when it holds none there). */
static int disk_entry_term(void *data, raft_index index, raft_index *out_first,
                           raft_term *out_term, char *errmsg, size_t errmsg_len)
{
    const struct cnode *f = data;
    const struct raft_entry *held = cluster_disk_at(f, index);

    (void)errmsg;
    (void)errmsg_len;
    *out_first = f->base + 1;
    *out_term = held != NULL ? held->term : 0;
    return 0;
}

/* disk_reset empties the durable log after an install: it restarts after
 * (@index, @term); the reset is checked to delete no durable copy of a
 * committed entry (cluster_check_reset). */
static int disk_reset(void *data, raft_index index, raft_term term,
                      char *errmsg, size_t errmsg_len)
{
    struct cnode *f = data;

    (void)errmsg;
    (void)errmsg_len;
    cluster_check_reset(f->c, f, index);
    while (f->n_log > 0) {
        raft_buf_unref(f->log[--f->n_log].data);
    }
    f->base = index;
    f->base_term = term;
    f->install_reset = true;
    return 0;
}

/* storage_of returns node @n's storage interface. */
static struct raft_persist_storage storage_of(struct cnode *n)
{
    struct raft_persist_storage s = {
        .log = {.data = n,
                .append = disk_append,
                .compact = disk_compact,
                .entry_term = disk_entry_term,
                .reset = disk_reset},
        .fsm = {.data = n, .snapshot_install = disk_install},
    };
    return s;
}

/* ---- Running the jobs --------------------------------------------------- */

/* start runs node @n's next job, when none runs: it completes after the
 * disk's latency. */
static void start(struct cluster *c, struct cnode *n)
{
    struct raft_persist_job *j;

    if (n->raft == NULL || n->job != NULL) {
        return;
    }
    j = raft_persist_next(&n->disk);
    if (j != NULL) {
        n->job = j;
        n->job_at =
            c->now + cluster_random(c, c->cfg.disk_min, c->cfg.disk_max);
    }
}

void cluster_disk_update(struct cluster *c, struct cnode *n,
                         const struct raft_update *u)
{
    unsigned i;

    if ((u->hard_state_changed || u->n_entries > 0) &&
        raft_persist_merge(&n->disk, u) != 0) {
        cluster_fail(c, "out of memory");
    }
    if (!u->hard_state_changed) {
        for (i = 0; i < u->n_messages; i++) {
            cluster_net_send(c, n, &u->messages[i]);
        }
    }
    start(c, n);
}

bool cluster_disk_next(const struct cnode *n, uint64_t *at)
{
    if (n->job != NULL) {
        *at = n->job_at;
        return true;
    }
    if (raft_persist_log_full(&n->disk)) {
        *at = n->retry_at;
        return true;
    }
    return false;
}

/* installed steps SNAPSHOT_INSTALLED for install job @j, done with
 * result @res, once it checked that the core changes its log as the disk
 * did (raft.h: it holds the snapshot's last entry durably exactly when
 * the durable log does). */
static void installed(struct cluster *c, struct cnode *f,
                      struct raft_persist_job *j,
                      const struct raft_persist_result *res)
{
    struct raft_event e;
    struct raft_configuration conf;

    if (res->reset != f->install_reset) {
        cluster_fail(c,
                     "node %llu: the snapshot at %llu/%llu %s the "
                     "durable log but the core would %s its log",
                     (unsigned long long)f->id,
                     (unsigned long long)j->snap.index,
                     (unsigned long long)j->snap.last_term,
                     f->install_reset ? "resets" : "keeps",
                     res->reset ? "reset" : "keep");
    }
    if (c->verbose) {
        fprintf(stderr,
                "t=%llu node %llu installs %llu's snapshot at "
                "%llu/%llu\n",
                (unsigned long long)c->now, (unsigned long long)f->id,
                (unsigned long long)j->snap.leader,
                (unsigned long long)j->snap.index,
                (unsigned long long)j->snap.last_term);
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_SNAPSHOT_INSTALLED;
    e.snapshot.leader = j->snap.leader;
    e.snapshot.term = j->snap.leader_term;
    e.snapshot.index = j->snap.index;
    e.snapshot.last_term = j->snap.last_term;
    if (c->cfg.n_founders != 0) {
        /* The snapshot carries the configuration of its index. */
        cluster_applied_configuration(f, j->snap.index, &conf);
        e.snapshot.configuration = &conf;
    }
    raft_persist_job_free(j);
    cluster_step_node(c, f, &e);
}

/* check_stale: only a write handed out before an install that ran first
 * may lose entries (raft.h, SNAPSHOT_INSTALLED), and what it keeps must
 * follow the durable log, as any write's. */
static void check_stale(struct cluster *c, const struct cnode *n,
                        const struct raft_persist_job *j,
                        const struct raft_persist_result *res)
{
    if (res->n_skipped > 0 && !res->after_install) {
        cluster_fail(c,
                     "node %llu drops entries %llu.. of a write handed "
                     "out after its last install (boundary %llu)",
                     (unsigned long long)n->id,
                     (unsigned long long)j->entries[0].index,
                     (unsigned long long)j->boundary);
    }
    if (res->stale) {
        cluster_fail(c, "node %llu writes %llu after %llu: a gap",
                     (unsigned long long)n->id,
                     (unsigned long long)j->entries[j->skip].index,
                     (unsigned long long)cluster_disk_last(n));
    }
}

/* carry_out does what job @j's result @res says, as the driver does: send
 * the held messages, step PERSISTED, step COMPACT. */
static void carry_out(struct cluster *c, struct cnode *n,
                      struct raft_persist_job *j,
                      const struct raft_persist_result *res)
{
    struct raft_event e;
    unsigned i;

    check_stale(c, n, j, res);
    if (res->wrote) {
        c->stats.n_writes++;
    }
    for (i = 0; i < res->n_messages; i++) {
        cluster_net_send(c, n, &res->messages[i]);
    }
    if (res->persisted) {
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_PERSISTED;
        e.persisted.index = res->persisted_index;
        e.persisted.term = res->persisted_term;
        cluster_step_node(c, n, &e);
    }
    if (res->compact_index > 0) {
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_COMPACT;
        e.compact.index = res->compact_index;
        c->stats.n_compactions++;
        cluster_step_node(c, n, &e);
    }
    raft_persist_job_free(j);
}

void cluster_disk_complete(struct cluster *c, struct cnode *n)
{
    struct raft_persist_storage s = storage_of(n);
    struct raft_persist_job *j = n->job;
    struct raft_persist_result res;

    if (j == NULL) {
        /* The retry of an append refused for a full log. */
        if (raft_persist_retry(&n->disk)) {
            start(c, n);
        }
        return;
    }
    n->job = NULL;
    raft_persist_run(j, &s);
    raft_persist_done(&n->disk, j, true, n->raft, &res);
    if (res.outcome == RAFT_PERSIST_REQUEUED) {
        if (c->verbose) {
            fprintf(stderr, "t=%llu node %llu: %s, the write waits%s\n",
                    (unsigned long long)c->now, (unsigned long long)n->id,
                    res.errmsg, res.log_full ? "" : " behind its compaction");
        }
        n->retry_at = c->now + CLUSTER__LOG_FULL_RETRY_MS;
        start(c, n);
        return;
    }
    if (res.outcome == RAFT_PERSIST_FAILED) {
        cluster_fail(c, "node %llu: storage job failed: %s",
                     (unsigned long long)n->id, res.errmsg);
    }
    if (res.install != NULL) {
        installed(c, n, j, &res);
    } else {
        carry_out(c, n, j, &res);
    }
    start(c, n);
}

/* ---- Compaction, installs, crashes -------------------------------------- */

void cluster_disk_compact(struct cluster *c, struct cnode *n)
{
    raft_index index;
    int rc;

    if (c->cfg.compact_every == 0 || n->raft == NULL ||
        n->n_applied <
            n->base + c->cfg.compact_every + c->cfg.compact_trailing) {
        return;
    }
    index = n->n_applied - c->cfg.compact_trailing;
    if (index > raft_persisted_index(n->raft)) {
        index = raft_persisted_index(n->raft);
    }
    if (index > cluster_disk_last(n)) {
        index = cluster_disk_last(n);
    }
    if (index <= n->base || index < raft_first_index(n->raft)) {
        return;
    }
    rc = raft_persist_compact(&n->disk, index);
    if (rc == RAFT_BUSY) {
        return; /* one at a time */
    }
    if (rc != 0) {
        cluster_fail(c, "out of memory");
    }
    start(c, n);
}

void cluster_disk_install(struct cluster *c, struct cnode *f,
                          const struct cnode *l, raft_term term,
                          raft_index index, raft_term last_term)
{
    struct raft_persist_install in;

    memset(&in, 0, sizeof in);
    snprintf(in.path, sizeof in.path, "node-%llu", (unsigned long long)l->id);
    in.index = index;
    in.last_term = last_term;
    in.leader = l->id;
    in.leader_term = term;
    if (raft_persist_install(&f->disk, &in) != 0) {
        cluster_fail(c, "out of memory");
    }
    start(c, f);
}

void cluster_disk_stop(struct cnode *n)
{
    raft_persist_close(&n->disk);
    n->job = NULL;
}

void cluster_disk_free(struct cnode *n)
{
    unsigned k;

    cluster_disk_stop(n);
    for (k = 0; k < n->n_log; k++) {
        raft_buf_unref(n->log[k].data);
    }
    free(n->log);
}

/* ---- Getters ------------------------------------------------------------ */

raft_index cluster_durable_last(const struct cluster *c, raft_id id)
{
    return cluster_disk_last(cluster_node(c, id));
}

raft_index cluster_durable_first(const struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->base + 1;
}

raft_term cluster_durable_term(const struct cluster *c, raft_id id,
                               raft_index index)
{
    return cluster_disk_term(cluster_node(c, id), index);
}

unsigned cluster_n_truncations(const struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->n_truncations;
}

struct raft_hard_state cluster_hard_state(const struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->hs;
}
