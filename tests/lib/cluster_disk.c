/* The cluster's disks (cluster.h): each node's durable log and hard
 * state, the writes in progress, compaction and snapshot installs. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/cluster_internal.h"

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

static void release_write(struct cwrite *w)
{
    unsigned i;

    for (i = 0; i < w->n_entries; i++) {
        raft_buf_unref(w->entries[i].data);
    }
    free(w->entries);
    for (i = 0; i < w->n_held; i++) {
        cluster_net_release(&w->held[i]);
    }
    free(w->held);
}

void cluster_disk_update(struct cluster *c, struct cnode *n,
                         const struct raft_update *u)
{
    unsigned i;
    struct cwrite *w;

    if (!u->hard_state_changed && u->n_entries == 0) {
        for (i = 0; i < u->n_messages; i++) {
            cluster_net_send(c, n, &u->messages[i]);
        }
        return;
    }
    if (n->n_writes == n->cap_writes) {
        n->cap_writes = n->cap_writes ? n->cap_writes * 2 : 8;
        n->writes =
            cluster_alloc(c, n->writes, n->cap_writes * sizeof *n->writes);
    }
    w = &n->writes[n->n_writes++];
    memset(w, 0, sizeof *w);
    w->at = c->now + cluster_random(c, c->cfg.disk_min, c->cfg.disk_max);
    if (n->n_writes > 1 && w->at < n->writes[n->n_writes - 2].at) {
        w->at = n->writes[n->n_writes - 2].at;
    }
    w->hs_changed = u->hard_state_changed;
    w->hs = u->hard_state;
    if (u->n_entries > 0) {
        w->entries =
            cluster_alloc(c, NULL, u->n_entries * sizeof *w->entries);
        for (i = 0; i < u->n_entries; i++) {
            w->entries[i] = u->entries[i];
            raft_buf_ref(w->entries[i].data);
        }
        w->n_entries = u->n_entries;
    }
    if (u->hard_state_changed) {
        /* Driver rule 1: hold the messages until the write is done. */
        if (u->n_messages > 0) {
            w->held =
                cluster_alloc(c, NULL, u->n_messages * sizeof *w->held);
        }
        for (i = 0; i < u->n_messages; i++) {
            cluster_net_copy(c, &w->held[i], &u->messages[i]);
        }
        w->n_held = u->n_messages;
    } else {
        for (i = 0; i < u->n_messages; i++) {
            cluster_net_send(c, n, &u->messages[i]);
        }
    }
}

void cluster_disk_compact(struct cluster *c, struct cnode *n)
{
    struct raft_event e;
    raft_index index;
    raft_index k;

    if (c->cfg.compact_every == 0 || n->raft == NULL ||
        n->n_applied < n->base + c->cfg.compact_every +
                           c->cfg.compact_trailing) {
        return;
    }
    index = n->n_applied - c->cfg.compact_trailing;
    if (index > raft_persisted_index(n->raft)) {
        index = raft_persisted_index(n->raft);
    }
    if (index > cluster_disk_last(n)) {
        index = cluster_disk_last(n);
    }
    if (index <= n->base) {
        return;
    }
    n->base_term = cluster_disk_term(n, index);
    k = index - n->base;
    for (raft_index i = 0; i < k; i++) {
        raft_buf_unref(n->log[i].data);
    }
    memmove(n->log, n->log + k, (n->n_log - k) * sizeof *n->log);
    n->n_log -= (unsigned)k;
    n->base = index;
    c->stats.n_compactions++;
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu compacts through %llu\n",
                (unsigned long long)c->now, (unsigned long long)n->id,
                (unsigned long long)index);
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_COMPACT;
    e.compact.index = index;
    cluster_step_node(c, n, &e);
}

void cluster_disk_install(struct cluster *c, struct cnode *f,
                          const struct cnode *l, raft_term term,
                          raft_index index, raft_term last_term)
{
    struct raft_event e;
    unsigned k;

    if (index > f->n_applied) {
        cluster_check_install(c, f, l, index, last_term);
        if (index > f->cap_applied) {
            f->cap_applied = (unsigned)index * 2;
            f->applied = cluster_alloc(c, f->applied,
                                       f->cap_applied * sizeof *f->applied);
        }
        for (k = f->n_applied; k < index; k++) {
            f->applied[k] = l->applied[k];
            raft_buf_ref(f->applied[k].data);
        }
        f->n_applied = (unsigned)index;
        if (cluster_disk_at(f, index) != NULL &&
            cluster_disk_at(f, index)->term == last_term) {
            /* Paper §7: the log holds the snapshot's last entry: keep
             * what follows, delete the prefix only. */
            raft_index drop = index - f->base;
            for (raft_index i = 0; i < drop; i++) {
                raft_buf_unref(f->log[i].data);
            }
            memmove(f->log, f->log + drop,
                    (f->n_log - drop) * sizeof *f->log);
            f->n_log -= (unsigned)drop;
        } else {
            while (f->n_log > 0) {
                raft_buf_unref(f->log[--f->n_log].data);
            }
            for (k = 0; k < f->n_writes; k++) {
                f->writes[k].stale = true;
            }
        }
        f->base = index;
        f->base_term = last_term;
        c->stats.n_installs++;
    }
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu installs %llu's snapshot at "
                "%llu/%llu\n", (unsigned long long)c->now,
                (unsigned long long)f->id, (unsigned long long)l->id,
                (unsigned long long)index, (unsigned long long)last_term);
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_SNAPSHOT_INSTALLED;
    e.snapshot.leader = l->id;
    e.snapshot.term = term;
    e.snapshot.index = index;
    e.snapshot.last_term = last_term;
    cluster_step_node(c, f, &e);
}

void cluster_disk_complete(struct cluster *c, struct cnode *n)
{
    struct cwrite w = n->writes[0];
    struct raft_event e;
    unsigned skip = 0;
    unsigned i;

    memmove(n->writes, n->writes + 1, (n->n_writes - 1) * sizeof *n->writes);
    n->n_writes--;
    /* A write handed out before a snapshot reset the durable log: its
     * entries at or below the boundary go, and the rest too if they would
     * leave a gap (raft.h, SNAPSHOT_INSTALLED). Any other write must
     * follow the durable log. */
    while (skip < w.n_entries && w.entries[skip].index <= n->base) {
        skip++;
    }
    if (skip > 0 && !w.stale) {
        cluster_fail(c, "node %llu writes %llu at or below its boundary "
                     "%llu", (unsigned long long)n->id,
                     (unsigned long long)w.entries[0].index,
                     (unsigned long long)n->base);
    }
    if (w.stale && skip < w.n_entries &&
        w.entries[skip].index > cluster_disk_last(n) + 1) {
        skip = w.n_entries;
    }
    if (skip < w.n_entries) {
        raft_index first = w.entries[skip].index;
        unsigned k = w.n_entries - skip;
        if (first == 0 || first > cluster_disk_last(n) + 1) {
            cluster_fail(c, "node %llu writes %llu after %llu: a gap",
                         (unsigned long long)n->id,
                         (unsigned long long)first,
                         (unsigned long long)cluster_disk_last(n));
        }
        if (first <= cluster_disk_last(n)) {
            n->n_truncations++;
        }
        if (c->verbose) {
            fprintf(stderr, "t=%llu node %llu writes %llu..%llu (term "
                    "%llu..%llu) over %llu\n", (unsigned long long)c->now,
                    (unsigned long long)n->id, (unsigned long long)first,
                    (unsigned long long)(first + k - 1),
                    (unsigned long long)w.entries[skip].term,
                    (unsigned long long)w.entries[w.n_entries - 1].term,
                    (unsigned long long)cluster_disk_last(n));
        }
        cluster_check_write(c, n, &w, skip);
        /* Driver rule 2: delete index >= first, then append. */
        while (cluster_disk_last(n) >= first) {
            raft_buf_unref(n->log[--n->n_log].data);
        }
        if (n->n_log + k > n->cap_log) {
            n->cap_log = (n->n_log + k) * 2;
            n->log = cluster_alloc(c, n->log, n->cap_log * sizeof *n->log);
        }
        for (i = skip; i < w.n_entries; i++) {
            n->log[n->n_log++] = w.entries[i];
            raft_buf_ref(w.entries[i].data);
        }
    }
    if (w.hs_changed) {
        n->hs = w.hs;
    }
    for (i = 0; i < w.n_held; i++) {
        cluster_net_send(c, n, &w.held[i]);
    }
    if (skip < w.n_entries) {
        cluster_check_log_matching(c, n);
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_PERSISTED;
        e.persisted.index = w.entries[w.n_entries - 1].index;
        e.persisted.term = w.entries[w.n_entries - 1].term;
        release_write(&w);
        cluster_step_node(c, n, &e);
        return;
    }
    release_write(&w);
}

bool cluster_disk_next(const struct cnode *n, uint64_t *at)
{
    if (n->n_writes == 0) {
        return false;
    }
    *at = n->writes[0].at;
    return true;
}

void cluster_disk_stop(struct cnode *n)
{
    unsigned i;

    for (i = 0; i < n->n_writes; i++) {
        release_write(&n->writes[i]);
    }
    n->n_writes = 0;
}

void cluster_disk_free(struct cnode *n)
{
    unsigned k;

    cluster_disk_stop(n);
    free(n->writes);
    for (k = 0; k < n->n_log; k++) {
        raft_buf_unref(n->log[k].data);
    }
    free(n->log);
}

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

struct raft_hard_state cluster_hard_state(const struct cluster *c,
                                          raft_id id)
{
    return cluster_node(c, id)->hs;
}
