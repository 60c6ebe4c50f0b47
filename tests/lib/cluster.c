/* The deterministic in-memory cluster of cluster.h: a discrete-event loop
 * over disk completions, message deliveries and ticks, in time order (ties:
 * disk, then network, then ticks, each by insertion order). */

#include "cluster.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "raft/inflights.h"
#include "raft/message.h"
#include "raft/raft_internal.h"

/* A message on the wire (a deep copy holding its own buf references). */
struct cmsg {
    uint64_t at;           /* delivery time */
    uint64_t seq;          /* insertion order, breaks ties */
    struct raft_message m; /* the message; entries owned by this copy */
};

/* A disk write in progress on one node. */
struct cwrite {
    uint64_t at;               /* completion time */
    bool hs_changed;           /* write the hard state */
    struct raft_hard_state hs; /* the hard state to write */
    struct raft_entry *entries; /* entries to write (own references) */
    unsigned n_entries;        /* number of entries */
    struct raft_message *held; /* messages sent on completion */
    unsigned n_held;           /* number of held messages */
    bool stale;                /* handed out before a snapshot reset the
                                  durable log: filtered on completion */
};

/* A snapshot transfer in progress (the harness plays the drivers). */
struct csnap {
    uint64_t at;            /* completion time */
    raft_id from;           /* leader */
    unsigned from_restarts; /* its instance (a restart abandons it) */
    raft_term term;         /* its term when it asked */
    raft_id to;             /* follower */
};

/* What the harness last saw of one leader's window for one follower. */
struct cwin {
    unsigned restarts; /* leader instance */
    raft_term term;    /* leader term */
    uint64_t epoch;    /* window epoch */
    uint64_t acked;    /* acked_seq in that epoch */
    uint64_t sent;     /* highest seq sent to the follower */
    bool pending;      /* a rejection was set aside */
};

/* One node: a core plus its durable state and its state machine. */
struct cnode {
    raft_id id;                /* 1..n */
    struct raft *raft;         /* NULL while down */
    bool frozen;               /* no ticks */
    uint64_t next_tick;        /* time of the next tick */
    unsigned n_restarts;       /* reseeds the core on restart */
    struct raft_hard_state hs; /* durable hard state */
    struct raft_entry *log;    /* durable log, index base+i+1 at log[i] */
    unsigned n_log;            /* durable entries */
    raft_index base;           /* durable snapshot boundary */
    raft_term base_term;       /* its term */
    unsigned cap_log;          /* allocated */
    unsigned n_truncations;    /* writes that deleted a suffix */
    struct cwrite *writes;     /* pending writes, FIFO */
    unsigned n_writes;         /* pending writes */
    unsigned cap_writes;       /* allocated */
    struct raft_entry *applied; /* handed out committed, own references */
    unsigned n_applied;        /* number applied */
    unsigned cap_applied;      /* allocated */
};

struct cluster {
    struct cluster_config cfg;               /* parameters */
    uint64_t rng;                            /* network and disk PRNG */
    uint64_t now;                            /* virtual time, ms */
    uint64_t seq;                            /* message counter */
    struct cnode nodes[CLUSTER_MAX_NODES];   /* the nodes */
    raft_id ids[CLUSTER_MAX_NODES];          /* voter ids */
    bool link[CLUSTER_MAX_NODES][CLUSTER_MAX_NODES]; /* [from][to] up */
    struct cmsg *net;                        /* messages in flight */
    unsigned n_net;                          /* count */
    unsigned cap_net;                        /* allocated */
    raft_id *leaders;                        /* leader of each term */
    size_t n_leaders;                        /* terms tracked */
    struct raft_entry *committed;            /* first commit seen per index */
    raft_term *commit_term;                  /* per index: the term of the
                                                node that first handed it
                                                out, at that time (>= the
                                                term it was committed in) */
    size_t n_committed;                      /* indexes tracked */
    raft_index committed_last;               /* highest committed index */
    uint64_t trace;                          /* FNV-1a of every output */
    uint64_t n_sent[8];                      /* messages on the wire, by
                                                type ([0]: all) */
    uint64_t n_rejections[CLUSTER_MAX_NODES]; /* AppendEntries refused,
                                                by sender */
    struct csnap *snaps;                     /* snapshot transfers */
    unsigned n_snaps;                        /* count */
    unsigned cap_snaps;                      /* allocated */
    struct cwin win[CLUSTER_MAX_NODES][CLUSTER_MAX_NODES]; /* [leader]
                                                [follower] windows */
    struct cluster_stats stats;              /* counters */
    raft_id drop_from;                       /* drop every drop_every-th */
    unsigned drop_every;                     /* AppendEntries result of
                                                drop_from, 0: none */
    uint64_t drop_count;                     /* its results so far */
    char replay[256];                        /* replay command, or "" */
    bool verbose;                            /* CLUSTER_TRACE=1: print
                                                every event */
    jmp_buf *fail_jump;                      /* cluster_fail target */
};

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

static void *xrealloc(const struct cluster *c, void *p, size_t size);

/* trace_bytes folds @len bytes into the output hash (FNV-1a, 64 bits). */
static void trace_bytes(struct cluster *c, const void *p, size_t len)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < len; i++) {
        c->trace ^= b[i];
        c->trace *= 0x100000001b3ULL;
    }
}

static void trace_u64(struct cluster *c, uint64_t v)
{
    unsigned char b[8];
    unsigned i;

    for (i = 0; i < 8; i++) {
        b[i] = (unsigned char)(v >> (8 * i));
    }
    trace_bytes(c, b, sizeof b);
}

static void trace_entry(struct cluster *c, const struct raft_entry *e)
{
    trace_u64(c, e->term);
    trace_u64(c, e->index);
    trace_u64(c, e->type);
    if (e->data != NULL) {
        trace_u64(c, e->data->len);
        trace_bytes(c, e->data->data, e->data->len);
    } else {
        trace_u64(c, 0);
    }
}

/* trace_update folds node @id's update @u into the output hash; messages
 * in their wire encoding, so the hash covers every byte a driver sends. */
static void trace_update(struct cluster *c, raft_id id,
                         const struct raft_update *u)
{
    unsigned i;

    trace_u64(c, id);
    trace_u64(c, u->hard_state_changed);
    trace_u64(c, u->hard_state.term);
    trace_u64(c, u->hard_state.vote);
    trace_u64(c, u->proposed_index);
    trace_u64(c, u->proposed_term);
    trace_u64(c, u->n_entries);
    for (i = 0; i < u->n_entries; i++) {
        trace_entry(c, &u->entries[i]);
    }
    trace_u64(c, u->n_messages);
    for (i = 0; i < u->n_messages; i++) {
        struct raft_frame f;
        raft_frame_wrap(&u->messages[i], &f);
        size_t len = raft_frame_encoded_len(&f);
        unsigned char *frame = xrealloc(c, NULL, len > 0 ? len : 1);
        if (raft_frame_encode(&f, frame, len) != 0) {
            free(frame);
            cluster_fail(c, "node %llu emits an unencodable message",
                         (unsigned long long)id);
        }
        trace_bytes(c, frame, len);
        free(frame);
    }
    trace_u64(c, u->n_committed);
    for (i = 0; i < u->n_committed; i++) {
        trace_entry(c, &u->committed[i]);
    }
}

uint64_t cluster_trace_hash(const struct cluster *c)
{
    return c->trace;
}

static uint64_t rng_next(struct cluster *c)
{
    uint64_t z = (c->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rng_range(struct cluster *c, unsigned lo, unsigned hi)
{
    if (hi <= lo) {
        return lo;
    }
    return lo + rng_next(c) % (hi - lo + 1);
}

static void *xrealloc(const struct cluster *c, void *p, size_t size)
{
    void *q = realloc(p, size);
    if (q == NULL) {
        cluster_fail(c, "out of memory");
    }
    return q;
}

static struct cnode *node_of(const struct cluster *c, raft_id id)
{
    if (id == 0 || id > c->cfg.n) {
        cluster_fail(c, "no node %llu", (unsigned long long)id);
    }
    return (struct cnode *)&c->nodes[id - 1];
}

/* durable_last returns the last index of @n's durable log. */
static raft_index durable_last(const struct cnode *n)
{
    return n->base + n->n_log;
}

/* durable_at returns @n's durable entry @index, NULL when it has none
 * (compacted, or past the end). */
static const struct raft_entry *durable_at(const struct cnode *n,
                                           raft_index index)
{
    if (index <= n->base || index > durable_last(n)) {
        return NULL;
    }
    return &n->log[index - n->base - 1];
}

/* durable_term returns the term of @n's durable entry @index, the
 * boundary's term at the boundary, 0 otherwise. */
static raft_term durable_term(const struct cnode *n, raft_index index)
{
    const struct raft_entry *e = durable_at(n, index);

    if (e != NULL) {
        return e->term;
    }
    return index != 0 && index == n->base ? n->base_term : 0;
}

static bool buf_equal(const struct raft_buf *a, const struct raft_buf *b)
{
    size_t la = a != NULL ? a->len : 0;
    size_t lb = b != NULL ? b->len : 0;
    return la == lb && (la == 0 || memcmp(a->data, b->data, la) == 0);
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

/* copy_message deep-copies @m, taking references to entry bufs. */
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
    dst->append_entries.entries = xrealloc(
        c, NULL, m->append_entries.n_entries * sizeof(struct raft_entry));
    for (i = 0; i < m->append_entries.n_entries; i++) {
        dst->append_entries.entries[i] = m->append_entries.entries[i];
        raft_buf_ref(dst->append_entries.entries[i].data);
    }
}

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

static void release_write(struct cwrite *w)
{
    unsigned i;

    for (i = 0; i < w->n_entries; i++) {
        raft_buf_unref(w->entries[i].data);
    }
    free(w->entries);
    for (i = 0; i < w->n_held; i++) {
        release_message(&w->held[i]);
    }
    free(w->held);
}


/* enqueue puts one copy of @m on the wire with a random delay. */
static void enqueue(struct cluster *c, const struct raft_message *m)
{
    struct cmsg *q;

    if (c->n_net == c->cap_net) {
        c->cap_net = c->cap_net ? c->cap_net * 2 : 64;
        c->net = xrealloc(c, c->net, c->cap_net * sizeof *c->net);
    }
    q = &c->net[c->n_net++];
    q->at = c->now + rng_range(c, c->cfg.net_min, c->cfg.net_max);
    q->seq = c->seq++;
    copy_message(c, &q->m, m);
}

/* send checks that what @m depends on is durable (driver rule 1), then
 * puts it on the wire subject to links, loss and duplication. */
static void send(struct cluster *c, struct cnode *n,
                 const struct raft_message *m)
{
    if (m->from != n->id) {
        cluster_fail(c, "node %llu sends as %llu", (unsigned long long)n->id,
                     (unsigned long long)m->from);
    }
    /* Answers that refuse may carry a term whose write is still queued
     * (an earlier update's); what a vote or an append relies on may not. */
    if ((m->type == RAFT_MSG_APPEND_ENTRIES ||
         (m->type == RAFT_MSG_REQUEST_VOTE && !m->request_vote.pre_vote)) &&
        raft_message_term(m) > n->hs.term) {
        cluster_fail(c, "node %llu sends term %llu before its term is "
                     "durable (%llu)", (unsigned long long)n->id,
                     (unsigned long long)raft_message_term(m),
                     (unsigned long long)n->hs.term);
    }
    if (m->type == RAFT_MSG_REQUEST_VOTE_RESULT &&
        m->request_vote_result.vote_granted &&
        !m->request_vote_result.pre_vote &&
        (n->hs.term != m->request_vote_result.term || n->hs.vote != m->to)) {
        cluster_fail(c, "node %llu grants a vote that is not durable",
                     (unsigned long long)n->id);
    }
    /* A pre-vote asks for the term after the sender's, which it has not
     * entered: that term must be durable, the vote need not be. */
    if (m->type == RAFT_MSG_REQUEST_VOTE && m->request_vote.pre_vote &&
        m->request_vote.term != n->hs.term + 1) {
        cluster_fail(c, "node %llu pre-votes for term %llu at durable term "
                     "%llu", (unsigned long long)n->id,
                     (unsigned long long)m->request_vote.term,
                     (unsigned long long)n->hs.term);
    }
    if (m->type == RAFT_MSG_REQUEST_VOTE && !m->request_vote.pre_vote &&
        (n->hs.term != m->request_vote.term || n->hs.vote != n->id)) {
        cluster_fail(c, "node %llu asks votes before voting for itself "
                     "durably", (unsigned long long)n->id);
    }
    if (m->to == 0 || m->to > c->cfg.n || !c->link[m->from - 1][m->to - 1]) {
        return;
    }
    if (rng_range(c, 0, 99) < c->cfg.drop_pct) {
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
    if (rng_range(c, 0, 99) < c->cfg.dup_pct) {
        enqueue(c, m);
    }
}

/* check_completeness: paper §5.4 Leader Completeness. Every entry handed
 * out committed at index >= @from is in the log of leader @n. Called when
 * @n becomes leader of a term (for every committed entry), and when an
 * entry is first handed out (for it, on leaders of a term at least the
 * reporting node's: the term of the commit is no later). */
static void check_completeness(struct cluster *c, const struct cnode *n,
                               raft_index from)
{
    raft_term t = raft_current_term(n->raft);
    raft_index i;

    for (i = from; i <= c->committed_last; i++) {
        const struct raft_entry *g = &c->committed[i - 1];
        /* Only leaders of the commit's term or later must hold it: a
         * leader elected late in an older term (its votes were delayed)
         * may lack an entry committed in a newer term. The recorded term
         * is an upper bound of the commit's term, so an entry is checked
         * only when it was surely committed by term @t. */
        if (g->index != 0 && c->commit_term[i - 1] > t) {
            continue;
        }
        if (g->index != 0 && i >= n->raft->log.first &&
            log_term_at(&n->raft->log, i) != g->term) {
            cluster_fail(c, "leader completeness: leader %llu of term %llu "
                         "lacks committed entry %llu of term %llu",
                         (unsigned long long)n->id,
                         (unsigned long long)raft_current_term(n->raft),
                         (unsigned long long)i, (unsigned long long)g->term);
        }
    }
}

static void check_leaders(struct cluster *c)
{
    unsigned i;

    for (i = 0; i < c->cfg.n; i++) {
        struct cnode *n = &c->nodes[i];
        raft_term t;
        if (n->raft == NULL || raft_role(n->raft) != RAFT_LEADER) {
            continue;
        }
        t = raft_current_term(n->raft);
        if (t >= c->n_leaders) {
            size_t old = c->n_leaders;
            c->n_leaders = t + 16;
            c->leaders =
                xrealloc(c, c->leaders, c->n_leaders * sizeof *c->leaders);
            memset(c->leaders + old, 0,
                   (c->n_leaders - old) * sizeof *c->leaders);
        }
        if (c->leaders[t] != 0 && c->leaders[t] != n->id) {
            cluster_fail(c, "two leaders in term %llu: %llu and %llu",
                         (unsigned long long)t,
                         (unsigned long long)c->leaders[t],
                         (unsigned long long)n->id);
        }
        if (c->leaders[t] == 0) {
            c->leaders[t] = n->id;
            check_completeness(c, n, 1);
        }
    }
}

/* check_log_matching: paper §5.3 Log Matching on durable logs. If two logs
 * hold an entry with the same index and term, they are identical up to it.
 * Checked between @n and every other node. */
static void check_log_matching(struct cluster *c, const struct cnode *n)
{
    unsigned i;

    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *o = &c->nodes[i];
        raft_index lo;
        raft_index k;
        raft_index j;
        if (o == n) {
            continue;
        }
        /* Below both boundaries the entries are in snapshots (committed,
         * checked by State Machine Safety). */
        lo = (n->base > o->base ? n->base : o->base) + 1;
        k = durable_last(n) < durable_last(o) ? durable_last(n)
                                              : durable_last(o);
        while (k >= lo && durable_term(n, k) != durable_term(o, k)) {
            k--;
        }
        for (j = lo; j <= k; j++) {
            const struct raft_entry *a = durable_at(n, j);
            const struct raft_entry *b = durable_at(o, j);
            if (a->term != b->term || a->type != b->type ||
                !buf_equal(a->data, b->data)) {
                cluster_fail(c, "log matching: nodes %llu and %llu agree at "
                             "%llu but differ at %llu",
                             (unsigned long long)n->id,
                             (unsigned long long)o->id,
                             (unsigned long long)k, (unsigned long long)j);
            }
        }
    }
}

/* check_durable_quorum: an entry first handed out committed must be in
 * the durable logs of a majority, crashed nodes included (Durability: no
 * crash schedule can then lose it, given that no write replaces it, which
 * complete_write checks). */
static void check_durable_quorum(struct cluster *c, const struct raft_entry *e)
{
    unsigned i;
    unsigned k = 0;

    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *o = &c->nodes[i];
        /* In its snapshot, or in its durable log. */
        if (e->index <= o->base || durable_term(o, e->index) == e->term) {
            k++;
        }
    }
    if (k < c->cfg.n / 2 + 1) {
        cluster_fail(c, "durability: entry %llu of term %llu handed out "
                     "committed but durable on %u of %u nodes",
                     (unsigned long long)e->index,
                     (unsigned long long)e->term, k, c->cfg.n);
    }
}

static void apply_committed(struct cluster *c, struct cnode *n,
                            const struct raft_entry *e)
{
    struct raft_entry *g;
    unsigned i;

    if (e->index != n->n_applied + 1) {
        cluster_fail(c, "node %llu hands out %llu after %u",
                     (unsigned long long)n->id,
                     (unsigned long long)e->index, n->n_applied);
    }
    if (durable_at(n, e->index) == NULL ||
        durable_at(n, e->index)->term != e->term) {
        cluster_fail(c, "node %llu hands out %llu which is not durable",
                     (unsigned long long)n->id, (unsigned long long)e->index);
    }
    /* State Machine Safety (paper §5.4.3). */
    if (e->index > c->n_committed) {
        size_t old = c->n_committed;
        c->n_committed = e->index + 64;
        c->committed =
            xrealloc(c, c->committed, c->n_committed * sizeof *c->committed);
        memset(c->committed + old, 0,
               (c->n_committed - old) * sizeof *c->committed);
        c->commit_term = xrealloc(c, c->commit_term,
                                  c->n_committed * sizeof *c->commit_term);
        memset(c->commit_term + old, 0,
               (c->n_committed - old) * sizeof *c->commit_term);
    }
    g = &c->committed[e->index - 1];
    if (g->index == 0) {
        *g = *e;
        c->commit_term[e->index - 1] = raft_current_term(n->raft);
        raft_buf_ref(g->data);
        if (e->index > c->committed_last) {
            c->committed_last = e->index;
        }
        check_durable_quorum(c, e);
        for (i = 0; i < c->cfg.n; i++) {
            const struct cnode *l = &c->nodes[i];
            if (l->raft != NULL && raft_role(l->raft) == RAFT_LEADER &&
                raft_current_term(l->raft) >= raft_current_term(n->raft)) {
                check_completeness(c, l, e->index);
            }
        }
    } else if (g->term != e->term || g->type != e->type ||
               !buf_equal(g->data, e->data)) {
        cluster_fail(c, "state machine safety: node %llu applies term %llu "
                     "at %llu, another applied term %llu",
                     (unsigned long long)n->id, (unsigned long long)e->term,
                     (unsigned long long)e->index,
                     (unsigned long long)g->term);
    }
    if (n->n_applied == n->cap_applied) {
        n->cap_applied = n->cap_applied ? n->cap_applied * 2 : 64;
        n->applied =
            xrealloc(c, n->applied, n->cap_applied * sizeof *n->applied);
    }
    n->applied[n->n_applied] = *e;
    raft_buf_ref(n->applied[n->n_applied].data);
    n->n_applied++;
}

static void schedule_snapshot(struct cluster *c, const struct cnode *n,
                              raft_id to);

/* window_of returns what the harness saw of leader @n's window for
 * follower @to, started over for a new instance or term of @n. */
static struct cwin *window_of(struct cluster *c, const struct cnode *n,
                              raft_id to)
{
    struct cwin *w = &c->win[n->id - 1][to - 1];
    raft_term term = raft_current_term(n->raft);

    if (w->restarts != n->n_restarts || w->term != term) {
        memset(w, 0, sizeof *w);
        w->restarts = n->n_restarts;
        w->term = term;
    }
    return w;
}

/* check_seq_sent: a leader numbers its AppendEntries to each follower
 * with increasing seqs. */
static void check_seq_sent(struct cluster *c, const struct cnode *n,
                           const struct raft_message *m)
{
    struct cwin *w = window_of(c, n, m->to);

    if (m->append_entries.seq == 0 || m->append_entries.seq <= w->sent) {
        cluster_fail(c, "node %llu sends seq %llu to %llu after %llu",
                     (unsigned long long)n->id,
                     (unsigned long long)m->append_entries.seq,
                     (unsigned long long)m->to,
                     (unsigned long long)w->sent);
    }
    w->sent = m->append_entries.seq;
}

/* check_windows: the in-order rule of raft/progress.h on every leader's
 * view of every follower, after every step. Within one leader instance
 * and term the window epoch never goes back and, within an epoch, the
 * newest seq accounted for (acked_seq) never goes back; the window holds
 * at most max_inflight_msgs requests, sent in this epoch, not yet
 * accounted for, with increasing seqs and last indexes, at most
 * max_inflight_bytes of payload (one larger request alone excepted); a
 * rejection set aside waits for older requests. */
static void check_windows(struct cluster *c)
{
    unsigned i;
    unsigned j;
    unsigned k;

    for (i = 0; i < c->cfg.n; i++) {
        struct cnode *n = &c->nodes[i];
        if (n->raft == NULL || raft_role(n->raft) != RAFT_LEADER) {
            continue;
        }
        for (j = 0; j < c->cfg.n; j++) {
            const struct raft_peer_progress *p = &n->raft->progress[j];
            const struct raft_inflights *f = &p->inflights;
            struct cwin *w;
            if (j == i) {
                continue;
            }
            w = window_of(c, n, j + 1);
            if (p->epoch < w->epoch ||
                (p->epoch == w->epoch && p->acked_seq < w->acked)) {
                cluster_fail(c, "in-order: leader %llu, follower %u: "
                             "epoch/acked went from %llu/%llu to %llu/%llu",
                             (unsigned long long)n->id, j + 1,
                             (unsigned long long)w->epoch,
                             (unsigned long long)w->acked,
                             (unsigned long long)p->epoch,
                             (unsigned long long)p->acked_seq);
            }
            w->epoch = p->epoch;
            w->acked = p->acked_seq;
            if (f->n > f->cap || (f->n > 0 && p->state !=
                                  RAFT_PROGRESS_REPLICATE) ||
                (c->cfg.max_inflight_bytes != 0 && f->n > 1 &&
                 f->bytes > c->cfg.max_inflight_bytes)) {
                cluster_fail(c, "in-order: leader %llu, follower %u: "
                             "window of %u requests, %llu bytes, state %u",
                             (unsigned long long)n->id, j + 1, f->n,
                             (unsigned long long)f->bytes, p->state);
            }
            for (k = 0; k < f->n; k++) {
                const struct raft_inflight *a = inflights_at(f, k);
                if (a->seq < p->epoch_seq || a->seq <= p->acked_seq ||
                    a->seq >= p->next_seq || a->last >= p->next ||
                    (k > 0 && (a->seq <= inflights_at(f, k - 1)->seq ||
                               a->last <= inflights_at(f, k - 1)->last))) {
                    cluster_fail(c, "in-order: leader %llu, follower %u: "
                                 "window member %u (seq %llu, last %llu) "
                                 "out of order", (unsigned long long)n->id,
                                 j + 1, k, (unsigned long long)a->seq,
                                 (unsigned long long)a->last);
                }
            }
            if (p->pending.seq != 0) {
                const struct raft_inflight *o = inflights_oldest(f);
                if (p->pending.seq < p->epoch_seq ||
                    (o != NULL && o->seq >= p->pending.seq &&
                     p->pending.in_window && o->seq == p->pending.seq)) {
                    cluster_fail(c, "in-order: leader %llu, follower %u: "
                                 "rejection %llu set aside needlessly",
                                 (unsigned long long)n->id, j + 1,
                                 (unsigned long long)p->pending.seq);
                }
                if (!w->pending) {
                    c->stats.n_deferred++;
                }
            }
            w->pending = p->pending.seq != 0;
        }
    }
}

/* handle_update carries out one update as a driver would. */
static void handle_update(struct cluster *c, struct cnode *n,
                          const struct raft_update *u)
{
    unsigned i;
    struct cwrite *w;

    trace_update(c, n->id, u);
    for (i = 0; i < u->n_snapshot_to; i++) {
        schedule_snapshot(c, n, u->snapshot_to[i]);
    }
    for (i = 0; i < u->n_messages; i++) {
        const struct raft_message *m = &u->messages[i];
        if (m->type == RAFT_MSG_APPEND_ENTRIES) {
            check_seq_sent(c, n, m);
        }
        if (m->type == RAFT_MSG_APPEND_ENTRIES_RESULT &&
            m->append_entries_result.success &&
            (m->append_entries_result.last_log_index >
                 raft_persisted_index(n->raft) ||
             m->append_entries_result.last_log_index > durable_last(n))) {
            cluster_fail(c, "node %llu acknowledges %llu, persisted %llu",
                         (unsigned long long)n->id,
                         (unsigned long long)
                             m->append_entries_result.last_log_index,
                         (unsigned long long)raft_persisted_index(n->raft));
        }
    }
    for (i = 0; i < u->n_committed; i++) {
        apply_committed(c, n, &u->committed[i]);
    }
    if (!u->hard_state_changed && u->n_entries == 0) {
        for (i = 0; i < u->n_messages; i++) {
            send(c, n, &u->messages[i]);
        }
        return;
    }
    if (n->n_writes == n->cap_writes) {
        n->cap_writes = n->cap_writes ? n->cap_writes * 2 : 8;
        n->writes = xrealloc(c, n->writes, n->cap_writes * sizeof *n->writes);
    }
    w = &n->writes[n->n_writes++];
    memset(w, 0, sizeof *w);
    w->at = c->now + rng_range(c, c->cfg.disk_min, c->cfg.disk_max);
    if (n->n_writes > 1 && w->at < n->writes[n->n_writes - 2].at) {
        w->at = n->writes[n->n_writes - 2].at;
    }
    w->hs_changed = u->hard_state_changed;
    w->hs = u->hard_state;
    if (u->n_entries > 0) {
        w->entries = xrealloc(c, NULL, u->n_entries * sizeof *w->entries);
        for (i = 0; i < u->n_entries; i++) {
            w->entries[i] = u->entries[i];
            raft_buf_ref(w->entries[i].data);
        }
        w->n_entries = u->n_entries;
    }
    if (u->hard_state_changed) {
        /* Driver rule 1: hold the messages until the write is done. */
        if (u->n_messages > 0) {
            w->held = xrealloc(c, NULL, u->n_messages * sizeof *w->held);
        }
        for (i = 0; i < u->n_messages; i++) {
            copy_message(c, &w->held[i], &u->messages[i]);
        }
        w->n_held = u->n_messages;
    } else {
        for (i = 0; i < u->n_messages; i++) {
            send(c, n, &u->messages[i]);
        }
    }
}

static void maybe_compact(struct cluster *c, struct cnode *n);

static void step_node(struct cluster *c, struct cnode *n,
                      const struct raft_event *e)
{
    struct raft_update u;
    int rc = raft_step(n->raft, e, &u);
    if (rc != 0) {
        cluster_fail(c, "node %llu: raft_step(type %d): %s",
                     (unsigned long long)n->id, e->type, raft_strerror(rc));
    }
    handle_update(c, n, &u);
    check_leaders(c);
    check_windows(c);
    if (u.n_committed > 0) {
        maybe_compact(c, n);
    }
}

/* maybe_compact plays the driver's periodic compaction: once more than
 * compact_every applied entries lie past @n's boundary, the durable log
 * through (applied - compact_trailing) is deleted (the state machine
 * holds it) and RAFT_EVENT_COMPACT stepped. */
static void maybe_compact(struct cluster *c, struct cnode *n)
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
    if (index > durable_last(n)) {
        index = durable_last(n);
    }
    if (index <= n->base) {
        return;
    }
    n->base_term = durable_term(n, index);
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
    step_node(c, n, &e);
}

static void schedule_snapshot(struct cluster *c, const struct cnode *n,
                              raft_id to)
{
    struct csnap *q;

    if (to == 0 || to > c->cfg.n || to == n->id) {
        cluster_fail(c, "node %llu asks a snapshot for %llu",
                     (unsigned long long)n->id, (unsigned long long)to);
    }
    if (c->n_snaps == c->cap_snaps) {
        c->cap_snaps = c->cap_snaps ? c->cap_snaps * 2 : 8;
        c->snaps = xrealloc(c, c->snaps, c->cap_snaps * sizeof *c->snaps);
    }
    q = &c->snaps[c->n_snaps++];
    q->at = c->now + rng_range(c, c->cfg.snap_min, c->cfg.snap_max);
    q->from = n->id;
    q->from_restarts = n->n_restarts;
    q->term = raft_current_term(n->raft);
    q->to = to;
    c->stats.n_snapshots_asked++;
}

/* install plays the follower's driver: the leader @l's state machine
 * through @index (its applied entries) replaces @f's, the durable log is
 * reset to start after @index (writes in progress become stale), then
 * RAFT_EVENT_SNAPSHOT_INSTALLED is stepped. A state machine already past
 * @index is left alone. */
static void install(struct cluster *c, struct cnode *f, const struct cnode *l,
                    raft_term term, raft_index index, raft_term last_term)
{
    struct raft_event e;
    unsigned k;

    if (index > f->n_applied) {
        for (k = 0; k < f->n_applied; k++) {
            if (f->applied[k].term != l->applied[k].term) {
                cluster_fail(c, "state machine safety: snapshot of %llu "
                             "differs from %llu's state at %u",
                             (unsigned long long)l->id,
                             (unsigned long long)f->id, k + 1);
            }
        }
        /* Durability: a reset must not delete a copy of a committed
         * entry past the snapshot. */
        for (raft_index i = index + 1;
             durable_term(f, index) != last_term && i <= durable_last(f);
             i++) {
            const struct raft_entry *g = cluster_committed(c, i);
            if (g != NULL && durable_term(f, i) == g->term) {
                cluster_fail(c, "durability: snapshot %llu installed on "
                             "%llu deletes committed entry %llu",
                             (unsigned long long)index,
                             (unsigned long long)f->id,
                             (unsigned long long)i);
            }
        }
        if (index > f->cap_applied) {
            f->cap_applied = (unsigned)index * 2;
            f->applied =
                xrealloc(c, f->applied, f->cap_applied * sizeof *f->applied);
        }
        for (k = f->n_applied; k < index; k++) {
            f->applied[k] = l->applied[k];
            raft_buf_ref(f->applied[k].data);
        }
        f->n_applied = (unsigned)index;
        if (durable_at(f, index) != NULL &&
            durable_at(f, index)->term == last_term) {
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
    step_node(c, f, &e);
}

/* complete_snapshot ends transfer @slot: abandoned when the leader
 * instance is gone; failed (SNAPSHOT_FAILED on the leader) when the
 * follower is down, a link is cut, or by chance (snap_fail_pct);
 * installed otherwise, with the leader's applied state of now. */
static void complete_snapshot(struct cluster *c, unsigned slot)
{
    struct csnap q = c->snaps[slot];
    struct cnode *l = node_of(c, q.from);
    struct cnode *f = node_of(c, q.to);
    struct raft_event e;

    c->snaps[slot] = c->snaps[--c->n_snaps];
    if (l->raft == NULL || l->n_restarts != q.from_restarts) {
        return;
    }
    if (f->raft == NULL || !c->link[q.from - 1][q.to - 1] ||
        !c->link[q.to - 1][q.from - 1] ||
        rng_range(c, 0, 99) < c->cfg.snap_fail_pct || l->n_applied == 0) {
        c->stats.n_snapshots_failed++;
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_SNAPSHOT_FAILED;
        e.unreachable.id = q.to;
        step_node(c, l, &e);
        return;
    }
    install(c, f, l, q.term, l->n_applied,
            l->applied[l->n_applied - 1].term);
}

/* check_no_overwrite: Durability. Write @w deletes @n's durable entries
 * from its first index on and writes its own: a durable copy of a
 * committed entry may only be rewritten with itself. */
static void check_no_overwrite(struct cluster *c, const struct cnode *n,
                               const struct cwrite *w, unsigned skip)
{
    raft_index first = w->entries[skip].index;
    raft_index i;

    if (first <= n->base) {
        first = n->base + 1;
    }
    for (i = first; i <= durable_last(n) && i <= c->committed_last; i++) {
        const struct raft_entry *g = &c->committed[i - 1];
        raft_index k = i - w->entries[0].index;
        if (g->index == 0 || durable_term(n, i) != g->term) {
            continue; /* not the committed entry: a stale one goes */
        }
        if (k >= w->n_entries || w->entries[k].term != g->term) {
            cluster_fail(c, "durability: node %llu deletes committed entry "
                         "%llu of term %llu", (unsigned long long)n->id,
                         (unsigned long long)i, (unsigned long long)g->term);
        }
    }
}

static void complete_write(struct cluster *c, struct cnode *n)
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
        w.entries[skip].index > durable_last(n) + 1) {
        skip = w.n_entries;
    }
    if (skip < w.n_entries) {
        raft_index first = w.entries[skip].index;
        unsigned k = w.n_entries - skip;
        if (first == 0 || first > durable_last(n) + 1) {
            cluster_fail(c, "node %llu writes %llu after %llu: a gap",
                         (unsigned long long)n->id,
                         (unsigned long long)first,
                         (unsigned long long)durable_last(n));
        }
        if (first <= durable_last(n)) {
            n->n_truncations++;
        }
        if (c->verbose) {
            fprintf(stderr, "t=%llu node %llu writes %llu..%llu (term "
                    "%llu..%llu) over %llu\n", (unsigned long long)c->now,
                    (unsigned long long)n->id, (unsigned long long)first,
                    (unsigned long long)(first + k - 1),
                    (unsigned long long)w.entries[skip].term,
                    (unsigned long long)w.entries[w.n_entries - 1].term,
                    (unsigned long long)durable_last(n));
        }
        check_no_overwrite(c, n, &w, skip);
        /* Driver rule 2: delete index >= first, then append. */
        while (durable_last(n) >= first) {
            raft_buf_unref(n->log[--n->n_log].data);
        }
        if (n->n_log + k > n->cap_log) {
            n->cap_log = (n->n_log + k) * 2;
            n->log = xrealloc(c, n->log, n->cap_log * sizeof *n->log);
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
        send(c, n, &w.held[i]);
    }
    if (skip < w.n_entries) {
        check_log_matching(c, n);
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_PERSISTED;
        e.persisted.index = w.entries[w.n_entries - 1].index;
        e.persisted.term = w.entries[w.n_entries - 1].term;
        release_write(&w);
        step_node(c, n, &e);
        return;
    }
    release_write(&w);
}

static void start_node(struct cluster *c, struct cnode *n)
{
    struct raft_config rc;
    int rv;

    memset(&rc, 0, sizeof rc);
    rc.id = n->id;
    rc.voters = c->ids;
    rc.n_voters = c->cfg.n;
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
    n->next_tick = c->now + rng_range(c, 0, c->cfg.tick_ms);
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
        start_node(c, &c->nodes[i]);
    }
    return c;
}

static void stop_node(struct cnode *n)
{
    unsigned i;

    raft_close(n->raft);
    n->raft = NULL;
    for (i = 0; i < n->n_writes; i++) {
        release_write(&n->writes[i]);
    }
    n->n_writes = 0;
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
        free(n->writes);
        for (k = 0; k < n->n_log; k++) {
            raft_buf_unref(n->log[k].data);
        }
        free(n->log);
        for (k = 0; k < n->n_applied; k++) {
            raft_buf_unref(n->applied[k].data);
        }
        free(n->applied);
    }
    free(c->snaps);
    for (i = 0; i < c->n_net; i++) {
        release_message(&c->net[i].m);
    }
    free(c->net);
    for (k = 0; k < c->n_committed; k++) {
        raft_buf_unref(c->committed[k].data);
    }
    free(c->committed);
    free(c->commit_term);
    free(c->leaders);
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
        if (n->raft != NULL && n->n_writes > 0 &&
            (!found || n->writes[0].at < *at)) {
            found = true;
            *at = n->writes[0].at;
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
        if (n->raft != NULL && !n->frozen &&
            (!found || n->next_tick < *at)) {
            found = true;
            *at = n->next_tick;
            *kind = 2;
            *which = i;
        }
    }
    return found;
}

/* trace_message prints a delivered message (CLUSTER_TRACE). */
static void trace_message(const struct cluster *c, const struct raft_message *m)
{
    const struct raft_append_entries *ae = &m->append_entries;
    const struct raft_append_entries_result *ar = &m->append_entries_result;

    fprintf(stderr, "t=%llu %llu->%llu ", (unsigned long long)c->now,
            (unsigned long long)m->from, (unsigned long long)m->to);
    switch (m->type) {
        case RAFT_MSG_REQUEST_VOTE:
            fprintf(stderr, "RV%s term %llu last %llu/%llu\n",
                    m->request_vote.pre_vote ? "(pre)" : "",
                    (unsigned long long)m->request_vote.term,
                    (unsigned long long)m->request_vote.last_log_index,
                    (unsigned long long)m->request_vote.last_log_term);
            break;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            fprintf(stderr, "RVR%s term %llu granted %d\n",
                    m->request_vote_result.pre_vote ? "(pre)" : "",
                    (unsigned long long)m->request_vote_result.term,
                    m->request_vote_result.vote_granted);
            break;
        case RAFT_MSG_APPEND_ENTRIES:
            fprintf(stderr, "AE term %llu prev %llu/%llu commit %llu n %u"
                    "%s%llu\n", (unsigned long long)ae->term,
                    (unsigned long long)ae->prev_log_index,
                    (unsigned long long)ae->prev_log_term,
                    (unsigned long long)ae->leader_commit, ae->n_entries,
                    ae->n_entries > 0 ? " last term " : "",
                    ae->n_entries > 0
                        ? (unsigned long long)ae->entries[ae->n_entries - 1]
                              .term
                        : 0ULL);
            break;
        default:
            fprintf(stderr, "AER term %llu ok %d reject %llu last %llu "
                    "conflict %llu\n", (unsigned long long)ar->term,
                    ar->success, (unsigned long long)ar->reject_index,
                    (unsigned long long)ar->last_log_index,
                    (unsigned long long)ar->conflict_index);
            break;
    }
}

static void deliver(struct cluster *c, unsigned slot)
{
    struct cmsg q = c->net[slot];
    struct cnode *to;
    struct raft_event e;

    c->net[slot] = c->net[--c->n_net];
    to = &c->nodes[q.m.to - 1];
    if (to->raft != NULL && c->link[q.m.from - 1][q.m.to - 1]) {
        if (c->verbose) {
            trace_message(c, &q.m);
        }
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_RECEIVE;
        e.receive = q.m;
        step_node(c, to, &e);
    }
    release_message(&q.m);
}

void cluster_step(struct cluster *c)
{
    uint64_t at = 0;
    int kind = 0;
    unsigned which = 0;
    struct raft_event e;

    if (!next_event(c, &at, &kind, &which)) {
        c->now++;
        return;
    }
    if (at > c->now) {
        c->now = at;
    }
    switch (kind) {
        case 0:
            complete_write(c, &c->nodes[which]);
            break;
        case 1:
            deliver(c, which);
            break;
        case 3:
            complete_snapshot(c, which);
            break;
        default:
            memset(&e, 0, sizeof e);
            e.type = RAFT_EVENT_TICK;
            e.tick.now = c->now;
            c->nodes[which].next_tick = c->now + c->cfg.tick_ms;
            step_node(c, &c->nodes[which], &e);
            break;
    }
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
    return node_of(c, id)->raft;
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

int cluster_propose(struct cluster *c, raft_id id, const void *data,
                    size_t len)
{
    struct cnode *n = node_of(c, id);
    struct raft_buf *b;
    struct raft_event e;
    struct raft_update u;
    int rc;

    if (n->raft == NULL) {
        return RAFT_SHUTDOWN;
    }
    b = raft_buf_copy(data, len);
    if (b == NULL) {
        cluster_fail(c, "out of memory");
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_PROPOSE;
    e.propose.bufs = &b;
    e.propose.n = 1;
    rc = raft_step(n->raft, &e, &u);
    raft_buf_unref(b);
    if (rc == 0) {
        handle_update(c, n, &u);
        check_leaders(c);
        check_windows(c);
    }
    return rc;
}

void cluster_crash(struct cluster *c, raft_id id)
{
    if (c->verbose) {
        fprintf(stderr, "t=%llu node %llu crashes\n",
                (unsigned long long)c->now, (unsigned long long)id);
    }
    stop_node(node_of(c, id));
}

void cluster_restart(struct cluster *c, raft_id id)
{
    struct cnode *n = node_of(c, id);

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
    return node_of(c, id)->raft != NULL;
}

void cluster_set_link(struct cluster *c, raft_id from, raft_id to, bool up)
{
    node_of(c, from);
    node_of(c, to);
    c->link[from - 1][to - 1] = up;
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
        }
    }
    c->cfg.drop_pct = 0;
    c->cfg.dup_pct = 0;
}

void cluster_set_faults(struct cluster *c, unsigned drop_pct,
                        unsigned dup_pct, unsigned net_min, unsigned net_max)
{
    c->cfg.drop_pct = drop_pct;
    c->cfg.dup_pct = dup_pct;
    c->cfg.net_min = net_min;
    c->cfg.net_max = net_max;
}

void cluster_freeze(struct cluster *c, raft_id id, bool frozen)
{
    struct cnode *n = node_of(c, id);

    n->frozen = frozen;
    if (!frozen && n->next_tick < c->now) {
        n->next_tick = c->now;
    }
}

unsigned cluster_n_applied(const struct cluster *c, raft_id id)
{
    return node_of(c, id)->n_applied;
}

const struct raft_entry *cluster_applied(const struct cluster *c, raft_id id,
                                         unsigned i)
{
    const struct cnode *n = node_of(c, id);
    return i < n->n_applied ? &n->applied[i] : NULL;
}

bool cluster_has_applied(const struct cluster *c, raft_id id,
                         const void *data, size_t len)
{
    const struct cnode *n = node_of(c, id);
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

raft_index cluster_durable_last(const struct cluster *c, raft_id id)
{
    return durable_last(node_of(c, id));
}

raft_index cluster_durable_first(const struct cluster *c, raft_id id)
{
    return node_of(c, id)->base + 1;
}

void cluster_drop_results(struct cluster *c, raft_id from, unsigned every)
{
    node_of(c, from);
    c->drop_from = from;
    c->drop_every = every;
    c->drop_count = 0;
}

void cluster_set_snapshot_failures(struct cluster *c, unsigned pct)
{
    c->cfg.snap_fail_pct = pct;
}

struct cluster_stats cluster_stats(const struct cluster *c)
{
    return c->stats;
}

raft_term cluster_durable_term(const struct cluster *c, raft_id id,
                               raft_index index)
{
    return durable_term(node_of(c, id), index);
}

unsigned cluster_n_truncations(const struct cluster *c, raft_id id)
{
    return node_of(c, id)->n_truncations;
}

raft_index cluster_committed_last(const struct cluster *c)
{
    return c->committed_last;
}

const struct raft_entry *cluster_committed(const struct cluster *c,
                                           raft_index index)
{
    if (index == 0 || index > c->committed_last ||
        c->committed[index - 1].index == 0) {
        return NULL;
    }
    return &c->committed[index - 1];
}

struct raft_hard_state cluster_hard_state(const struct cluster *c,
                                          raft_id id)
{
    return node_of(c, id)->hs;
}

raft_term cluster_log_term(const struct cluster *c, raft_id id,
                           raft_index index)
{
    const struct cnode *n = node_of(c, id);

    if (n->raft == NULL) {
        return 0;
    }
    return log_term_at(&n->raft->log, index);
}

uint64_t cluster_n_messages(const struct cluster *c, uint8_t type)
{
    return type < 8 ? c->n_sent[type] : 0;
}

uint64_t cluster_n_rejections(const struct cluster *c, raft_id id)
{
    node_of(c, id);
    return c->n_rejections[id - 1];
}
