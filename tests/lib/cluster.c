/* The deterministic in-memory cluster of cluster.h: a discrete-event loop
 * over disk completions, message deliveries and ticks, in time order (ties:
 * disk, then network, then ticks, each by insertion order); the nodes, their
 * cores and their state machines. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "raft/configuration.h"
#include "raft/raft_internal.h"
#include "tests/lib/cluster_internal.h"

_Noreturn void cluster_fail(const struct cluster *c, const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (c->fail_jump != NULL) {
        fprintf(stderr, "cluster seed %llu, t=%llu: %s\n",
                (unsigned long long)c->cfg.seed, (unsigned long long)c->now,
                text);
        if (c->replay[0] != '\0') {
            fprintf(stderr, "replay: %s\n", c->replay);
        }
        longjmp(*c->fail_jump, 1);
    }
    print_error("cluster seed %llu, t=%llu: %s\n",
                (unsigned long long)c->cfg.seed, (unsigned long long)c->now,
                text);
    if (c->replay[0] != '\0') {
        print_error("replay: %s\n", c->replay);
    }
    fail();
    abort(); /* fail() does not return: it leaves the running test */
}

void cluster_set_replay(struct cluster *c, const char *cmd)
{
    snprintf(c->replay, sizeof c->replay, "%s", cmd);
}

void cluster_set_fail_jump(struct cluster *c, jmp_buf *env)
{
    c->fail_jump = env;
}

/* rng_next: splitmix64 over the cluster's PRNG state. */
static uint64_t rng_next(struct cluster *c)
{
    uint64_t z = (c->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t cluster_random(struct cluster *c, unsigned lo, unsigned hi)
{
    if (hi <= lo) {
        return lo;
    }
    return lo + rng_next(c) % (hi - lo + 1);
}

void *cluster_alloc(const struct cluster *c, void *p, size_t size)
{
    void *q = realloc(p, size);
    if (q == NULL) {
        cluster_fail(c, "out of memory");
    }
    return q;
}

struct cnode *cluster_node(const struct cluster *c, raft_id id)
{
    if (id == 0 || id > c->cfg.n) {
        cluster_fail(c, "no node %llu", (unsigned long long)id);
    }
    return (struct cnode *)&c->nodes[id - 1];
}

void cluster_config_default(struct cluster_config *cfg, unsigned n,
                            uint64_t seed)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->n = n;
    cfg->seed = seed;
    cfg->election_timeout = 100;
    cfg->heartbeat_interval = 20;
    cfg->max_inflight_msgs = 4;
    cfg->max_size_per_msg = 64;
    cfg->tick_ms = 5;
    cfg->net_min = 1;
    cfg->net_max = 5;
    cfg->disk_min = 1;
    cfg->disk_max = 3;
    cfg->snap_min = 5;
    cfg->snap_max = 30;
}

/* check_reads records the reads @u hands back and checks each ready one
 * against the writes acknowledged before it began (linearizability). */
static void check_reads(struct cluster *c, const struct cnode *n,
                        const struct raft_update *u)
{
    unsigned i, j;

    for (i = 0; i < u->n_reads; i++) {
        const struct raft_read *r = &u->reads[i];
        for (j = 0; j < c->n_reads; j++) {
            struct cread *q = &c->reads[j];
            if (q->node != n->id || q->tag != r->tag || q->done) {
                continue;
            }
            q->done = true;
            q->status = r->status;
            q->index = r->index;
            if (r->status == 0) {
                c->n_reads_ready++;
                if (r->index < q->floor) {
                    cluster_fail(c,
                                 "node %llu: read %llu ready at index %llu, "
                                 "but %llu was committed before it began",
                                 (unsigned long long)n->id,
                                 (unsigned long long)r->tag,
                                 (unsigned long long)r->index,
                                 (unsigned long long)q->floor);
                }
                /* It may be above committed_last: a leader commits what
                 * its followers hold before its own fsync ends, and the
                 * reader waits for it to be applied. */
            }
            break;
        }
        if (j == c->n_reads) {
            cluster_fail(c, "node %llu: read %llu came back unasked or twice",
                         (unsigned long long)n->id, (unsigned long long)r->tag);
        }
    }
}

/* handle_update carries out one update as a driver would. */
static void handle_update(struct cluster *c, struct cnode *n,
                          const struct raft_update *u)
{
    unsigned i;

    check_reads(c, n, u);
    cluster_trace_update(c, n->id, u);
    for (i = 0; i < u->n_snapshot_to; i++) {
        cluster_net_snapshot(c, n, u->snapshot_to[i]);
    }
    cluster_check_update(c, n, u);
    for (i = 0; i < u->n_committed; i++) {
        cluster_check_apply(c, n, &u->committed[i]);
    }
    cluster_disk_update(c, n, u);
}

/* step_event steps @e on live node @n and, when it is taken, carries out
 * the update and runs the checks of every step. Returns raft_step's
 * result. */
static int step_event(struct cluster *c, struct cnode *n,
                      const struct raft_event *e)
{
    struct raft_update u;
    int rc = raft_step(n->raft, e, &u);

    if (rc != 0) {
        return rc;
    }
    handle_update(c, n, &u);
    cluster_check_commit(c, n);
    cluster_check_step(c);
    if (u.n_committed > 0) {
        cluster_disk_compact(c, n);
    }
    return 0;
}

void cluster_step_node(struct cluster *c, struct cnode *n,
                       const struct raft_event *e)
{
    int rc = step_event(c, n, e);

    if (rc != 0) {
        cluster_fail(c, "node %llu: raft_step(type %d): %s",
                     (unsigned long long)n->id, e->type, raft_strerror(rc));
    }
}

void cluster_applied_configuration(const struct cnode *n, raft_index index,
                                   struct raft_configuration *out)
{
    raft_index i;

    raft_configuration_init(out);
    for (i = index < n->n_applied ? index : n->n_applied; i > 0; i--) {
        const struct raft_entry *e = &n->applied[i - 1];
        if (e->type == RAFT_ENTRY_CONFIG) {
            if (raft_configuration_decode(e->data->data, e->data->len, out,
                                          NULL, 0) != 0) {
                cluster_fail(n->c, "node %llu applied a bad configuration",
                             (unsigned long long)n->id);
            }
            return;
        }
    }
}

static void start_node(struct cluster *c, struct cnode *n)
{
    struct raft_config rc;
    struct raft_configuration snap;
    int rv;

    memset(&rc, 0, sizeof rc);
    rc.id = n->id;
    if (c->cfg.n_founders == 0) {
        rc.voters = c->ids;
        rc.n_voters = c->cfg.n;
    } else {
        /* The snapshot's configuration, from the state machine. */
        cluster_applied_configuration(n, n->base, &snap);
        rc.configuration = &snap;
    }
    rc.election_timeout = c->cfg.election_timeout;
    rc.heartbeat_interval = c->cfg.heartbeat_interval;
    rc.max_size_per_msg = c->cfg.max_size_per_msg;
    rc.max_inflight_msgs = c->cfg.max_inflight_msgs;
    rc.seed = c->cfg.seed * 1000003 + n->id * 7919 + n->n_restarts;
    rc.disable_pre_vote = c->cfg.disable_pre_vote;
    rc.disable_check_quorum = c->cfg.disable_check_quorum;
    rc.max_inflight_bytes = c->cfg.max_inflight_bytes;
    rv = raft_restore(&rc, &n->hs, n->base, n->base_term, n->log, n->n_log,
                      n->n_applied, &n->raft);
    if (rv != 0) {
        cluster_fail(c, "raft_restore: %s", raft_strerror(rv));
    }
    n->next_tick = c->now + cluster_random(c, 0, c->cfg.tick_ms);
}

/* bootstrap writes founder @n's first durable state, as a driver does
 * before its first raft_new (raft_configuration_bootstrap): entry 1
 * holds the founders, hard state term 1. */
static void bootstrap(struct cluster *c, struct cnode *n)
{
    raft_id id;

    raft_configuration_init(&c->conf);
    for (id = 1; id <= c->cfg.n_founders; id++) {
        char address[32];
        snprintf(address, sizeof address, "node%llu:7000",
                 (unsigned long long)id);
        if (raft_configuration_add(&c->conf, id, RAFT_VOTER, address) != 0) {
            cluster_fail(c, "bootstrap configuration");
        }
    }
    n->cap_log = 16;
    n->log = cluster_alloc(c, n->log, n->cap_log * sizeof *n->log);
    if (raft_configuration_bootstrap(&c->conf, &n->log[0], &n->hs) != 0) {
        cluster_fail(c, "raft_configuration_bootstrap");
    }
    n->n_log = 1;
}

struct cluster *cluster_new(const struct cluster_config *cfg)
{
    struct cluster *c = calloc(1, sizeof *c);
    unsigned i;
    unsigned j;

    assert_non_null(c);
    assert_true(cfg->n >= 1 && cfg->n <= CLUSTER_MAX_NODES);
    c->cfg = *cfg;
    c->rng = cfg->seed;
    c->verbose = getenv("CLUSTER_TRACE") != NULL;
    for (i = 0; i < cfg->n; i++) {
        c->ids[i] = i + 1;
        for (j = 0; j < cfg->n; j++) {
            c->link[i][j] = true;
        }
    }
    for (i = 0; i < cfg->n; i++) {
        c->nodes[i].id = i + 1;
        c->nodes[i].c = c;
        raft_persist_init(&c->nodes[i].disk);
        if (i < cfg->n_founders) {
            bootstrap(c, &c->nodes[i]);
        }
        start_node(c, &c->nodes[i]);
    }
    return c;
}

static void stop_node(struct cnode *n)
{
    raft_close(n->raft);
    n->raft = NULL;
    cluster_disk_stop(n);
}

void cluster_free(struct cluster *c)
{
    unsigned i;
    size_t k;

    if (c == NULL) {
        return;
    }
    for (i = 0; i < c->cfg.n; i++) {
        struct cnode *n = &c->nodes[i];
        stop_node(n);
        cluster_disk_free(n);
        for (k = 0; k < n->n_applied; k++) {
            raft_buf_unref(n->applied[k].data);
        }
        free(n->applied);
    }
    cluster_net_free(c);
    cluster_check_free(c);
    free(c);
}

unsigned cluster_n_nodes(const struct cluster *c)
{
    return c->cfg.n;
}

uint64_t cluster_now(const struct cluster *c)
{
    return c->now;
}

/* next_event finds the earliest event: kind 0 disk (node), 1 network
 * (message slot), 3 snapshot transfer (slot), 2 tick (node). Returns
 * false when there is none. */
static bool next_event(const struct cluster *c, uint64_t *at, int *kind,
                       unsigned *which)
{
    bool found = false;
    uint64_t best_seq = 0;
    unsigned i;

    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *n = &c->nodes[i];
        uint64_t t;
        if (n->raft != NULL && cluster_disk_next(n, &t) &&
            (!found || t < *at)) {
            found = true;
            *at = t;
            *kind = 0;
            *which = i;
        }
    }
    for (i = 0; i < c->n_net; i++) {
        const struct cmsg *q = &c->net[i];
        if (!found || q->at < *at ||
            (q->at == *at && *kind == 1 && q->seq < best_seq)) {
            found = true;
            *at = q->at;
            *kind = 1;
            *which = i;
            best_seq = q->seq;
        }
    }
    for (i = 0; i < c->n_snaps; i++) {
        if (!found || c->snaps[i].at < *at) {
            found = true;
            *at = c->snaps[i].at;
            *kind = 3;
            *which = i;
        }
    }
    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *n = &c->nodes[i];
        if (n->raft != NULL && !n->frozen && (!found || n->next_tick < *at)) {
            found = true;
            *at = n->next_tick;
            *kind = 2;
            *which = i;
        }
    }
    return found;
}

void cluster_step(struct cluster *c)
{
    uint64_t at = 0;
    int kind = 0;
    unsigned which = 0;
    struct raft_event e;

    if (!next_event(c, &at, &kind, &which)) {
        c->now++;
        if (c->step_hook != NULL) {
            c->step_hook(c, c->step_arg);
        }
        return;
    }
    if (at > c->now) {
        c->now = at;
    }
    switch (kind) {
        case 0:
            cluster_disk_complete(c, &c->nodes[which]);
            break;
        case 1:
            cluster_net_deliver(c, which);
            break;
        case 3:
            cluster_net_snapshot_done(c, which);
            break;
        default:
            memset(&e, 0, sizeof e);
            e.type = RAFT_EVENT_TICK;
            e.tick.now = c->now;
            c->nodes[which].next_tick = c->now + c->cfg.tick_ms;
            cluster_step_node(c, &c->nodes[which], &e);
            break;
    }
    if (c->step_hook != NULL) {
        c->step_hook(c, c->step_arg);
    }
}

void cluster_set_step_hook(struct cluster *c, cluster_step_hook_cb fn,
                           void *arg)
{
    c->step_hook = fn;
    c->step_arg = arg;
}

void cluster_run(struct cluster *c, uint64_t ms)
{
    uint64_t end = c->now + ms;
    uint64_t at;
    int kind;
    unsigned which;

    while (next_event(c, &at, &kind, &which) && at <= end) {
        cluster_step(c);
    }
    c->now = end;
}

bool cluster_run_until(struct cluster *c, uint64_t ms,
                       bool (*pred)(struct cluster *c, void *arg), void *arg)
{
    uint64_t end = c->now + ms;
    uint64_t at;
    int kind;
    unsigned which;

    while (!pred(c, arg)) {
        if (!next_event(c, &at, &kind, &which) || at > end) {
            c->now = end;
            return pred(c, arg);
        }
        cluster_step(c);
    }
    return true;
}

struct raft *cluster_raft(struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->raft;
}

raft_id cluster_leader(const struct cluster *c)
{
    raft_id best = 0;
    raft_term best_term = 0;
    unsigned i;

    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *n = &c->nodes[i];
        if (n->raft != NULL && raft_role(n->raft) == RAFT_LEADER &&
            raft_current_term(n->raft) >= best_term) {
            best = n->id;
            best_term = raft_current_term(n->raft);
        }
    }
    return best;
}

/* step_on steps @e on node @id: RAFT_SHUTDOWN while it is down, else
 * what step_event returns. */
static int step_on(struct cluster *c, raft_id id, const struct raft_event *e)
{
    struct cnode *n = cluster_node(c, id);

    return n->raft == NULL ? RAFT_SHUTDOWN : step_event(c, n, e);
}

int cluster_propose(struct cluster *c, raft_id id, const void *data, size_t len)
{
    struct raft_buf *b = raft_buf_copy(data, len);
    struct raft_event e;
    int rc;

    if (b == NULL) {
        cluster_fail(c, "out of memory");
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_PROPOSE;
    e.propose.bufs = &b;
    e.propose.n = 1;
    rc = step_on(c, id, &e);
    raft_buf_unref(b);
    return rc;
}

int cluster_change(struct cluster *c, raft_id id, uint8_t kind, raft_id target,
                   uint8_t role, const char *address)
{
    struct raft_event e;
    int rc;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_CHANGE;
    e.change.kind = kind;
    e.change.id = target;
    e.change.role = role;
    e.change.address = address;
    rc = step_on(c, id, &e);
    if (rc == 0) {
        c->stats.n_changes++;
        if (c->verbose) {
            fprintf(stderr, "t=%llu node %llu: change %u of %llu\n",
                    (unsigned long long)c->now, (unsigned long long)id,
                    (unsigned)kind, (unsigned long long)target);
        }
    }
    return rc;
}

int cluster_transfer(struct cluster *c, raft_id id, raft_id target)
{
    struct raft_event e;
    int rc;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_TRANSFER;
    e.transfer.id = target;
    rc = step_on(c, id, &e);
    if (rc == 0) {
        c->stats.n_transfers++;
    }
    return rc;
}

int cluster_read_index(struct cluster *c, raft_id id, uint64_t tag)
{
    struct raft_event e;
    struct cread *q;
    unsigned i, k = 0;
    int rc;

    if (c->n_reads == CLUSTER_MAX_READS) {
        /* Forget the reads that came back. */
        for (i = 0; i < c->n_reads; i++) {
            if (!c->reads[i].done) {
                c->reads[k++] = c->reads[i];
            }
        }
        c->n_reads = k;
        if (k == CLUSTER_MAX_READS) {
            return RAFT_BUSY;
        }
    }
    q = &c->reads[c->n_reads++];
    memset(q, 0, sizeof *q);
    q->node = id;
    q->tag = tag;
    q->floor = c->committed_last;
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_READ_INDEX;
    e.read_index.tag = tag;
    rc = step_on(c, id, &e);
    if (rc != 0) {
        c->n_reads--; /* refused: nothing comes back */
    }
    return rc;
}

bool cluster_read_result(const struct cluster *c, raft_id id, uint64_t tag,
                         int *out_status, raft_index *out_index)
{
    unsigned i;

    for (i = 0; i < c->n_reads; i++) {
        const struct cread *q = &c->reads[i];
        if (q->node == id && q->tag == tag && q->done) {
            *out_status = q->status;
            *out_index = q->index;
            return true;
        }
    }
    return false;
}

unsigned cluster_n_reads_ready(const struct cluster *c)
{
    return c->n_reads_ready;
}

bool cluster_is_member(struct cluster *c, raft_id of, raft_id id)
{
    struct cnode *n = cluster_node(c, of);

    return n->raft != NULL && raft_configuration_find(
                                  raft_current_configuration(n->raft), id) >= 0;
}

void cluster_crash(struct cluster *c, raft_id id)
{
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu crashes\n",
                (unsigned long long)c->now, (unsigned long long)id);
    }
    stop_node(cluster_node(c, id));
}

void cluster_restart(struct cluster *c, raft_id id)
{
    struct cnode *n = cluster_node(c, id);

    if (n->raft != NULL) {
        cluster_fail(c, "restart of live node %llu", (unsigned long long)id);
    }
    n->n_restarts++;
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu restarts, term %llu, %u entries\n",
                (unsigned long long)c->now, (unsigned long long)id,
                (unsigned long long)n->hs.term, n->n_log);
    }
    start_node(c, n);
}

bool cluster_alive(const struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->raft != NULL;
}

void cluster_freeze(struct cluster *c, raft_id id, bool frozen)
{
    struct cnode *n = cluster_node(c, id);

    n->frozen = frozen;
    if (!frozen && n->next_tick < c->now) {
        n->next_tick = c->now;
    }
}

unsigned cluster_n_applied(const struct cluster *c, raft_id id)
{
    return cluster_node(c, id)->n_applied;
}

const struct raft_entry *cluster_applied(const struct cluster *c, raft_id id,
                                         unsigned i)
{
    const struct cnode *n = cluster_node(c, id);
    return i < n->n_applied ? &n->applied[i] : NULL;
}

bool cluster_has_applied(const struct cluster *c, raft_id id, const void *data,
                         size_t len)
{
    const struct cnode *n = cluster_node(c, id);
    unsigned i;

    for (i = 0; i < n->n_applied; i++) {
        const struct raft_buf *b = n->applied[i].data;
        if (n->applied[i].type == RAFT_ENTRY_NORMAL && b != NULL &&
            b->len == len && memcmp(b->data, data, len) == 0) {
            return true;
        }
    }
    return false;
}

struct cluster_stats cluster_stats(const struct cluster *c)
{
    return c->stats;
}

raft_term cluster_log_term(const struct cluster *c, raft_id id,
                           raft_index index)
{
    const struct cnode *n = cluster_node(c, id);

    if (n->raft == NULL) {
        return 0;
    }
    return log_term_at(&n->raft->log, index);
}
