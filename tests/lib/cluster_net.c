/* The cluster's network (cluster.h): messages deep-copied onto the wire
 * with a random delay, loss, duplication and per-direction links, and the
 * snapshot transfers the harness plays for the drivers. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/cluster_internal.h"

/* copy_message deep-copies @m into @dst, taking references to entry
 * bufs; release with release_message. */
static void copy_message(const struct cluster *c, struct raft_message *dst,
                         const struct raft_message *m)
{
    unsigned i;

    *dst = *m;
    if (m->type != RAFT_MSG_APPEND_ENTRIES) {
        return;
    }
    if (m->append_entries.n_entries == 0) {
        dst->append_entries.entries = NULL;
        return;
    }
    dst->append_entries.entries = cluster_alloc(
        c, NULL, m->append_entries.n_entries * sizeof(struct raft_entry));
    for (i = 0; i < m->append_entries.n_entries; i++) {
        dst->append_entries.entries[i] = m->append_entries.entries[i];
        raft_buf_ref(dst->append_entries.entries[i].data);
    }
}

/* release_message drops what copy_message took. */
static void release_message(struct raft_message *m)
{
    unsigned i;

    if (m->type != RAFT_MSG_APPEND_ENTRIES) {
        return;
    }
    for (i = 0; i < m->append_entries.n_entries; i++) {
        raft_buf_unref(m->append_entries.entries[i].data);
    }
    free(m->append_entries.entries);
    m->append_entries.entries = NULL;
    m->append_entries.n_entries = 0;
}

/* enqueue puts one copy of @m on the wire with a random delay, plus the
 * link's own (cluster_set_link_delay). */
static void enqueue(struct cluster *c, const struct raft_message *m)
{
    struct cmsg *q;

    if (c->n_net == c->cap_net) {
        c->cap_net = c->cap_net ? c->cap_net * 2 : 64;
        c->net = cluster_alloc(c, c->net, c->cap_net * sizeof *c->net);
    }
    q = &c->net[c->n_net++];
    q->at = c->now + cluster_random(c, c->cfg.net_min, c->cfg.net_max) +
            c->link_delay[m->from - 1][m->to - 1];
    q->seq = c->seq++;
    q->app = NULL;
    q->app_len = 0;
    copy_message(c, &q->m, m);
}

/* enqueue_app puts one copy of application frame @data (@len bytes)
 * from @from to @to on the wire with a random delay. */
static void enqueue_app(struct cluster *c, raft_id from, raft_id to,
                        const void *data, size_t len)
{
    struct raft_message m;
    struct cmsg *q;

    memset(&m, 0, sizeof m);
    m.from = from;
    m.to = to;
    enqueue(c, &m);
    q = &c->net[c->n_net - 1];
    q->app = cluster_alloc(c, NULL, len > 0 ? len : 1);
    memcpy(q->app, data, len);
    q->app_len = len;
}

void cluster_app_send(struct cluster *c, raft_id from, raft_id to,
                      const void *data, size_t len)
{
    cluster_node(c, from);
    if (to == 0 || to > c->cfg.n || !c->link[from - 1][to - 1]) {
        return;
    }
    if (cluster_random(c, 0, 99) < c->cfg.drop_pct) {
        return;
    }
    enqueue_app(c, from, to, data, len);
    if (cluster_random(c, 0, 99) < c->cfg.dup_pct) {
        enqueue_app(c, from, to, data, len);
    }
}

bool cluster_app_next(struct cluster *c, raft_id *out_from, raft_id *out_to,
                      void **out_data, size_t *out_len)
{
    struct capp *a;

    if (c->inbox_head == c->n_inbox) {
        c->inbox_head = c->n_inbox = 0;
        return false;
    }
    a = &c->inbox[c->inbox_head++];
    *out_from = a->from;
    *out_to = a->to;
    *out_data = a->data;
    *out_len = a->len;
    return true;
}

/* deliver_app hands application frame @q to the inbox when its receiver
 * is up and the link lets it through; frees it otherwise. */
static void deliver_app(struct cluster *c, struct cmsg *q)
{
    struct capp *a;

    if (c->nodes[q->m.to - 1].raft == NULL ||
        !c->link[q->m.from - 1][q->m.to - 1]) {
        free(q->app);
        return;
    }
    if (c->n_inbox == c->cap_inbox) {
        c->cap_inbox = c->cap_inbox ? c->cap_inbox * 2 : 16;
        c->inbox = cluster_alloc(c, c->inbox, c->cap_inbox * sizeof *c->inbox);
    }
    a = &c->inbox[c->n_inbox++];
    a->from = q->m.from;
    a->to = q->m.to;
    a->data = q->app;
    a->len = q->app_len;
}

void cluster_net_send(struct cluster *c, struct cnode *n,
                      const struct raft_message *m)
{
    cluster_check_send(c, n, m);
    if (m->to == 0 || m->to > c->cfg.n || !c->link[m->from - 1][m->to - 1]) {
        return;
    }
    if (cluster_random(c, 0, 99) < c->cfg.drop_pct) {
        return;
    }
    if (m->type == RAFT_MSG_APPEND_ENTRIES_RESULT && c->drop_every != 0 &&
        m->from == c->drop_from && ++c->drop_count % c->drop_every == 0) {
        c->stats.n_dropped_results++;
        return;
    }
    c->n_sent[0]++;
    if (m->type < 8) {
        c->n_sent[m->type]++;
    }
    if (m->type == RAFT_MSG_APPEND_ENTRIES_RESULT &&
        !m->append_entries_result.success) {
        c->n_rejections[m->from - 1]++;
    }
    enqueue(c, m);
    if (cluster_random(c, 0, 99) < c->cfg.dup_pct) {
        enqueue(c, m);
    }
}

void cluster_net_deliver(struct cluster *c, unsigned slot)
{
    struct cmsg q = c->net[slot];
    struct cnode *to;
    struct raft_event e;

    c->net[slot] = c->net[--c->n_net];
    if (q.app != NULL) {
        deliver_app(c, &q);
        return;
    }
    to = &c->nodes[q.m.to - 1];
    if (to->raft != NULL && c->link[q.m.from - 1][q.m.to - 1]) {
        if (c->verbose) {
            cluster_trace_message(c, &q.m);
        }
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_RECEIVE;
        e.receive = q.m;
        cluster_step_node(c, to, &e);
    }
    release_message(&q.m);
}

void cluster_net_snapshot(struct cluster *c, const struct cnode *n, raft_id to)
{
    struct csnap *q;

    if (to == 0 || to > c->cfg.n || to == n->id) {
        cluster_fail(c, "node %llu asks a snapshot for %llu",
                     (unsigned long long)n->id, (unsigned long long)to);
    }
    if (c->n_snaps == c->cap_snaps) {
        c->cap_snaps = c->cap_snaps ? c->cap_snaps * 2 : 8;
        c->snaps = cluster_alloc(c, c->snaps, c->cap_snaps * sizeof *c->snaps);
    }
    q = &c->snaps[c->n_snaps++];
    q->at = c->now + cluster_random(c, c->cfg.snap_min, c->cfg.snap_max);
    q->from = n->id;
    q->from_restarts = n->n_restarts;
    q->term = raft_current_term(n->raft);
    q->to = to;
    c->stats.n_snapshots_asked++;
}

void cluster_net_snapshot_done(struct cluster *c, unsigned slot)
{
    struct csnap q = c->snaps[slot];
    struct cnode *l = cluster_node(c, q.from);
    struct cnode *f = cluster_node(c, q.to);
    struct raft_event e;

    c->snaps[slot] = c->snaps[--c->n_snaps];
    if (l->raft == NULL || l->n_restarts != q.from_restarts) {
        return;
    }
    if (f->raft == NULL || !c->link[q.from - 1][q.to - 1] ||
        !c->link[q.to - 1][q.from - 1] ||
        cluster_random(c, 0, 99) < c->cfg.snap_fail_pct || l->n_applied == 0) {
        c->stats.n_snapshots_failed++;
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_SNAPSHOT_FAILED;
        e.unreachable.id = q.to;
        cluster_step_node(c, l, &e);
        return;
    }
    cluster_disk_install(c, f, l, q.term, l->n_applied,
                         l->applied[l->n_applied - 1].term);
}

void cluster_set_link(struct cluster *c, raft_id from, raft_id to, bool up)
{
    cluster_node(c, from);
    cluster_node(c, to);
    c->link[from - 1][to - 1] = up;
}

void cluster_set_link_delay(struct cluster *c, raft_id from, raft_id to,
                            unsigned ms)
{
    cluster_node(c, from);
    cluster_node(c, to);
    c->link_delay[from - 1][to - 1] = ms;
}

void cluster_isolate(struct cluster *c, raft_id id, bool up)
{
    unsigned i;

    for (i = 1; i <= c->cfg.n; i++) {
        if (i != id) {
            cluster_set_link(c, id, i, up);
            cluster_set_link(c, i, id, up);
        }
    }
}

void cluster_heal(struct cluster *c)
{
    unsigned i;
    unsigned j;

    for (i = 0; i < c->cfg.n; i++) {
        for (j = 0; j < c->cfg.n; j++) {
            c->link[i][j] = true;
            c->link_delay[i][j] = 0;
        }
    }
    c->cfg.drop_pct = 0;
    c->cfg.dup_pct = 0;
    c->cfg.disk_full_pct = 0;
}

void cluster_set_faults(struct cluster *c, unsigned drop_pct, unsigned dup_pct,
                        unsigned net_min, unsigned net_max)
{
    c->cfg.drop_pct = drop_pct;
    c->cfg.dup_pct = dup_pct;
    c->cfg.net_min = net_min;
    c->cfg.net_max = net_max;
}

void cluster_drop_results(struct cluster *c, raft_id from, unsigned every)
{
    cluster_node(c, from);
    c->drop_from = from;
    c->drop_every = every;
    c->drop_count = 0;
}

void cluster_set_snapshot_failures(struct cluster *c, unsigned pct)
{
    c->cfg.snap_fail_pct = pct;
}

void cluster_net_free(struct cluster *c)
{
    unsigned i;

    free(c->snaps);
    for (i = 0; i < c->n_net; i++) {
        release_message(&c->net[i].m);
        free(c->net[i].app);
    }
    free(c->net);
    for (i = c->inbox_head; i < c->n_inbox; i++) {
        free(c->inbox[i].data);
    }
    free(c->inbox);
}

uint64_t cluster_n_messages(const struct cluster *c, uint8_t type)
{
    return type < 8 ? c->n_sent[type] : 0;
}

uint64_t cluster_n_rejections(const struct cluster *c, raft_id id)
{
    cluster_node(c, id);
    return c->n_rejections[id - 1];
}
