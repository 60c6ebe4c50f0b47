/* The cluster's safety checks (cluster.h): election safety, log matching,
 * leader completeness, state machine safety, durability, the driver
 * contract and the in-order rule of raft/progress.h. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft/configuration.h"
#include "raft/inflights.h"
#include "raft/message.h"
#include "raft/raft_internal.h"
#include "tests/lib/cluster_internal.h"

static bool buf_equal(const struct raft_buf *a, const struct raft_buf *b)
{
    size_t la = a != NULL ? a->len : 0;
    size_t lb = b != NULL ? b->len : 0;
    return la == lb && (la == 0 || memcmp(a->data, b->data, la) == 0);
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
            cluster_fail(c,
                         "leader completeness: leader %llu of term %llu "
                         "lacks committed entry %llu of term %llu",
                         (unsigned long long)n->id,
                         (unsigned long long)raft_current_term(n->raft),
                         (unsigned long long)i, (unsigned long long)g->term);
        }
    }
}

/* ballot_of returns the candidate voter @v granted its vote in @term
 * (0: none seen), growing the record to hold @term. */
static raft_id *ballot_of(struct cluster *c, raft_term term, raft_id v)
{
    if (term >= c->n_ballots) {
        size_t old = c->n_ballots;
        c->n_ballots = term + 64;
        c->ballots =
            cluster_alloc(c, c->ballots, c->n_ballots * sizeof *c->ballots);
        memset(c->ballots + old, 0, (c->n_ballots - old) * sizeof *c->ballots);
    }
    return &c->ballots[term][v - 1];
}

/* check_election: a new leader @n of @term is a voter of the configuration
 * it uses (or that configuration is not committed as far as it knows: it
 * may have to win to commit it), and a majority of its voters granted it
 * their vote in @term (itself included when a voter): the votes of
 * learners and of non-members never count. */
static void check_election(struct cluster *c, const struct cnode *n,
                           raft_term term)
{
    const struct raft_configuration *conf = raft_current_configuration(n->raft);
    unsigned voters = raft_configuration_n_voters(conf);
    unsigned granted = 0;
    unsigned i;

    if (raft_configuration_role(conf, n->id) != RAFT_VOTER &&
        raft_configuration_index(n->raft) <= raft_commit_index(n->raft)) {
        cluster_fail(c, "node %llu leads term %llu but is no voter",
                     (unsigned long long)n->id, (unsigned long long)term);
    }
    for (i = 0; i < conf->n; i++) {
        raft_id v = conf->servers[i].id;
        if (conf->servers[i].role != RAFT_VOTER || v > c->cfg.n) {
            continue;
        }
        if (v == n->id || *ballot_of(c, term, v) == n->id) {
            granted++;
        }
    }
    if (granted < voters / 2 + 1) {
        cluster_fail(c,
                     "node %llu leads term %llu with the votes of %u of "
                     "its %u voters",
                     (unsigned long long)n->id, (unsigned long long)term,
                     granted, voters);
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
        if (n->hs.term < t) {
            /* The only voter elected itself in the step that raised its
             * term, which is not durable yet: a crash now forgets the
             * term and the leadership, which did nothing (the core sends
             * nothing of the term before it is durable). It counts as a
             * leader once durable. */
            continue;
        }
        if (t >= c->n_leaders) {
            size_t old = c->n_leaders;
            c->n_leaders = t + 16;
            c->leaders =
                cluster_alloc(c, c->leaders, c->n_leaders * sizeof *c->leaders);
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
            check_election(c, n, t);
        }
    }
}

void cluster_check_log_matching(struct cluster *c, const struct cnode *n)
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
        k = cluster_disk_last(n) < cluster_disk_last(o) ? cluster_disk_last(n)
                                                        : cluster_disk_last(o);
        while (k >= lo && cluster_disk_term(n, k) != cluster_disk_term(o, k)) {
            k--;
        }
        for (j = lo; j <= k; j++) {
            const struct raft_entry *a = cluster_disk_at(n, j);
            const struct raft_entry *b = cluster_disk_at(o, j);
            if (a->term != b->term || a->type != b->type ||
                !buf_equal(a->data, b->data)) {
                cluster_fail(c,
                             "log matching: nodes %llu and %llu agree at "
                             "%llu but differ at %llu",
                             (unsigned long long)n->id,
                             (unsigned long long)o->id, (unsigned long long)k,
                             (unsigned long long)j);
            }
        }
    }
}

/* check_durable_quorum: an entry first handed out committed must be in
 * the durable logs of a majority, crashed nodes included, and stay there
 * (Durability: no crash schedule can then lose it; cluster_check_write
 * checks every write that deletes a copy). Node @without, when not NULL,
 * is about to delete its copy: it does not count. */
static void check_durable_quorum(struct cluster *c, const struct raft_entry *e,
                                 const struct cnode *without)
{
    unsigned i;
    unsigned k = 0;
    unsigned n = c->cfg.n;
    unsigned need = c->cfg.n / 2 + 1;

    if (c->cfg.n_founders != 0) {
        /* With membership: on enough voters of the latest committed
         * configuration that each of its majorities holds one (what any
         * later leader needs); an entry committed under it or under the
         * next one (one server apart, thesis §4.1) has as many. */
        n = raft_configuration_n_voters(&c->conf);
        need = (n + 1) / 2;
    }
    for (i = 0; i < c->cfg.n; i++) {
        const struct cnode *o = &c->nodes[i];
        if (c->cfg.n_founders != 0 &&
            raft_configuration_role(&c->conf, o->id) != RAFT_VOTER) {
            continue;
        }
        /* In its snapshot, or in its durable log. */
        if (o != without && (e->index <= o->base ||
                             cluster_disk_term(o, e->index) == e->term)) {
            k++;
        }
    }
    if (k < need) {
        cluster_fail(c,
                     "durability: entry %llu of term %llu handed out "
                     "committed but durable on %u of %u voters%s",
                     (unsigned long long)e->index, (unsigned long long)e->term,
                     k, n,
                     without != NULL ? " once a write deletes a copy" : "");
    }
}

void cluster_check_commit(struct cluster *c, struct cnode *n)
{
    const struct raft_configuration *conf;
    raft_index index;
    raft_term term;
    unsigned voters;
    unsigned k = 0;
    unsigned i;

    if (n->raft == NULL) {
        return;
    }
    index = raft_commit_index(n->raft);
    if (raft_role(n->raft) != RAFT_LEADER && raft_leader_id(n->raft) != 0) {
        n->commit_checked = index; /* a follower learns it */
        return;
    }
    if (index <= n->commit_checked || index < raft_first_index(n->raft)) {
        n->commit_checked = index;
        return;
    }
    /* This step's leader (or the leader that stepped down once its
     * removal committed) committed @index by counting. */
    n->commit_checked = index;
    conf = raft_current_configuration(n->raft);
    term = log_term_at(&n->raft->log, index);
    voters = raft_configuration_n_voters(conf);
    for (i = 0; i < conf->n; i++) {
        const struct cnode *o;
        if (conf->servers[i].role != RAFT_VOTER ||
            conf->servers[i].id > c->cfg.n) {
            continue;
        }
        o = cluster_node(c, conf->servers[i].id);
        if (index <= o->base || cluster_disk_term(o, index) == term) {
            k++;
        }
    }
    if (k < voters / 2 + 1) {
        cluster_fail(c,
                     "node %llu commits %llu of term %llu durable on %u of "
                     "the %u voters of its configuration",
                     (unsigned long long)n->id, (unsigned long long)index,
                     (unsigned long long)term, k, voters);
    }
}

void cluster_check_apply(struct cluster *c, struct cnode *n,
                         const struct raft_entry *e)
{
    struct raft_entry *g;
    unsigned i;

    if (e->index != n->n_applied + 1) {
        cluster_fail(c, "node %llu hands out %llu after %u",
                     (unsigned long long)n->id, (unsigned long long)e->index,
                     n->n_applied);
    }
    if (cluster_disk_at(n, e->index) == NULL ||
        cluster_disk_at(n, e->index)->term != e->term) {
        cluster_fail(c, "node %llu hands out %llu which is not durable",
                     (unsigned long long)n->id, (unsigned long long)e->index);
    }
    /* State Machine Safety (paper §5.4.3). */
    if (e->index > c->n_committed) {
        size_t old = c->n_committed;
        c->n_committed = e->index + 64;
        c->committed = cluster_alloc(c, c->committed,
                                     c->n_committed * sizeof *c->committed);
        memset(c->committed + old, 0,
               (c->n_committed - old) * sizeof *c->committed);
        c->commit_term = cluster_alloc(c, c->commit_term,
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
        if (e->type == RAFT_ENTRY_CONFIG &&
            raft_configuration_decode(e->data->data, e->data->len, &c->conf,
                                      NULL, 0) != 0) {
            cluster_fail(c, "configuration entry %llu does not decode",
                         (unsigned long long)e->index);
        }
        check_durable_quorum(c, e, NULL);
        for (i = 0; i < c->cfg.n; i++) {
            const struct cnode *l = &c->nodes[i];
            if (l->raft != NULL && raft_role(l->raft) == RAFT_LEADER &&
                raft_current_term(l->raft) >= raft_current_term(n->raft)) {
                check_completeness(c, l, e->index);
            }
        }
    } else if (g->term != e->term || g->type != e->type ||
               !buf_equal(g->data, e->data)) {
        cluster_fail(c,
                     "state machine safety: node %llu applies term %llu "
                     "at %llu, another applied term %llu",
                     (unsigned long long)n->id, (unsigned long long)e->term,
                     (unsigned long long)e->index, (unsigned long long)g->term);
    }
    if (n->n_applied == n->cap_applied) {
        n->cap_applied = n->cap_applied ? n->cap_applied * 2 : 64;
        n->applied =
            cluster_alloc(c, n->applied, n->cap_applied * sizeof *n->applied);
    }
    n->applied[n->n_applied] = *e;
    raft_buf_ref(n->applied[n->n_applied].data);
    n->n_applied++;
}

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
                     (unsigned long long)m->to, (unsigned long long)w->sent);
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
        const struct raft_configuration *conf;
        if (n->raft == NULL || raft_role(n->raft) != RAFT_LEADER) {
            continue;
        }
        conf = raft_current_configuration(n->raft);
        /* Slot j of the leader's arrays is its configuration's server j
         * (with static voters 1..n: node j + 1). */
        for (j = 0; j < conf->n; j++) {
            const struct raft_peer_progress *p = &n->raft->progress[j];
            const struct raft_inflights *f = &p->inflights;
            raft_id to = conf->servers[j].id;
            struct cwin *w;
            if (to == n->id || to > c->cfg.n) {
                continue;
            }
            w = window_of(c, n, to);
            if (p->epoch < w->epoch ||
                (p->epoch == w->epoch && p->acked_seq < w->acked)) {
                cluster_fail(c,
                             "in-order: leader %llu, follower %u: "
                             "epoch/acked went from %llu/%llu to %llu/%llu",
                             (unsigned long long)n->id, (unsigned)to,
                             (unsigned long long)w->epoch,
                             (unsigned long long)w->acked,
                             (unsigned long long)p->epoch,
                             (unsigned long long)p->acked_seq);
            }
            w->epoch = p->epoch;
            w->acked = p->acked_seq;
            if (f->n > f->cap ||
                (f->n > 0 && p->state != RAFT_PROGRESS_REPLICATE) ||
                (c->cfg.max_inflight_bytes != 0 && f->n > 1 &&
                 f->bytes > c->cfg.max_inflight_bytes)) {
                cluster_fail(c,
                             "in-order: leader %llu, follower %u: "
                             "window of %u requests, %llu bytes, state %u",
                             (unsigned long long)n->id, (unsigned)to, f->n,
                             (unsigned long long)f->bytes, p->state);
            }
            for (k = 0; k < f->n; k++) {
                const struct raft_inflight *a = inflights_at(f, k);
                if (a->seq < p->epoch_seq || a->seq <= p->acked_seq ||
                    a->seq >= p->next_seq || a->last >= p->next ||
                    (k > 0 && (a->seq <= inflights_at(f, k - 1)->seq ||
                               a->last <= inflights_at(f, k - 1)->last))) {
                    cluster_fail(c,
                                 "in-order: leader %llu, follower %u: "
                                 "window member %u (seq %llu, last %llu) "
                                 "out of order",
                                 (unsigned long long)n->id, (unsigned)to, k,
                                 (unsigned long long)a->seq,
                                 (unsigned long long)a->last);
                }
            }
            if (p->pending.seq != 0) {
                const struct raft_inflight *o = inflights_oldest(f);
                if (p->pending.seq < p->epoch_seq ||
                    (o != NULL && o->seq >= p->pending.seq &&
                     p->pending.in_window && o->seq == p->pending.seq)) {
                    cluster_fail(c,
                                 "in-order: leader %llu, follower %u: "
                                 "rejection %llu set aside needlessly",
                                 (unsigned long long)n->id, (unsigned)to,
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

void cluster_check_write(struct cluster *c, const struct cnode *n,
                         const struct raft_entry *entries, unsigned cnt)
{
    raft_index first = entries[0].index;
    raft_index i;

    if (first <= n->base) {
        first = n->base + 1;
    }
    for (i = first; i <= cluster_disk_last(n) && i <= c->committed_last; i++) {
        const struct raft_entry *g = &c->committed[i - 1];
        raft_index k = i - entries[0].index;
        if (g->index == 0 || cluster_disk_term(n, i) != g->term ||
            (k < cnt && entries[k].term == g->term)) {
            continue; /* not the committed entry, or rewritten as itself */
        }
        /* The write deletes a durable copy of a committed entry. Only a
         * copy the core no longer counts as persisted may go (it dropped
         * the entry from its log, so it acknowledged it to nobody since;
         * the write that caught up with that waited in the queue), and
         * the entry stays durable on a majority without it. */
        if (i <= raft_persisted_index(n->raft) &&
            log_term_at(&n->raft->log, i) == g->term) {
            cluster_fail(c,
                         "durability: node %llu deletes committed entry "
                         "%llu of term %llu",
                         (unsigned long long)n->id, (unsigned long long)i,
                         (unsigned long long)g->term);
        }
        check_durable_quorum(c, g, n);
    }
}

void cluster_check_step(struct cluster *c)
{
    check_leaders(c);
    check_windows(c);
}

void cluster_check_update(struct cluster *c, const struct cnode *n,
                          const struct raft_update *u)
{
    unsigned i;

    for (i = 0; i < u->n_messages; i++) {
        const struct raft_message *m = &u->messages[i];
        if (m->type == RAFT_MSG_APPEND_ENTRIES) {
            check_seq_sent(c, n, m);
        }
        /* A learner, or a server removed, that knows its configuration
         * committed never campaigns (thesis §4.2.1, §4.2.3). */
        if (m->type == RAFT_MSG_REQUEST_VOTE &&
            raft_self_role(n->raft) != RAFT_VOTER &&
            raft_configuration_index(n->raft) <= raft_commit_index(n->raft)) {
            cluster_fail(c,
                         "node %llu campaigns though its configuration "
                         "(index %llu, committed) makes it no voter",
                         (unsigned long long)n->id,
                         (unsigned long long)raft_configuration_index(n->raft));
        }
        if (m->type == RAFT_MSG_APPEND_ENTRIES_RESULT &&
            m->append_entries_result.success &&
            (m->append_entries_result.last_log_index >
                 raft_persisted_index(n->raft) ||
             m->append_entries_result.last_log_index > cluster_disk_last(n))) {
            cluster_fail(
                c, "node %llu acknowledges %llu, persisted %llu",
                (unsigned long long)n->id,
                (unsigned long long)m->append_entries_result.last_log_index,
                (unsigned long long)raft_persisted_index(n->raft));
        }
    }
}

void cluster_check_send(struct cluster *c, const struct cnode *n,
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
        cluster_fail(c,
                     "node %llu sends a message of type %u and term %llu "
                     "before its term is durable (%llu)",
                     (unsigned long long)n->id, (unsigned)m->type,
                     (unsigned long long)raft_message_term(m),
                     (unsigned long long)n->hs.term);
    }
    /* A vote is durable when the durable hard state holds it, or a later
     * term (a later update merged into the same write may have moved the
     * term on): the node never votes in that term again. */
    if (m->type == RAFT_MSG_REQUEST_VOTE_RESULT &&
        m->request_vote_result.vote_granted &&
        !m->request_vote_result.pre_vote) {
        raft_id *b = ballot_of(c, m->request_vote_result.term, n->id);
        if (*b != 0 && *b != m->to) {
            cluster_fail(c, "node %llu votes twice in term %llu",
                         (unsigned long long)n->id,
                         (unsigned long long)m->request_vote_result.term);
        }
        *b = m->to;
    }
    if (m->type == RAFT_MSG_REQUEST_VOTE_RESULT &&
        m->request_vote_result.vote_granted &&
        !m->request_vote_result.pre_vote &&
        (n->hs.term < m->request_vote_result.term ||
         (n->hs.term == m->request_vote_result.term && n->hs.vote != m->to))) {
        cluster_fail(c,
                     "node %llu grants a vote in term %llu that is not "
                     "durable (durable term %llu, vote %llu)",
                     (unsigned long long)n->id,
                     (unsigned long long)m->request_vote_result.term,
                     (unsigned long long)n->hs.term,
                     (unsigned long long)n->hs.vote);
    }
    /* A pre-vote asks for the term after the sender's, which it has not
     * entered. It relies on nothing durable (the sender's own term may
     * still wait in a write, behind a full log: raft.h rule 1 holds
     * messages only for the update that changed the hard state), but it
     * never asks beyond the term after the sender's. */
    if (m->type == RAFT_MSG_REQUEST_VOTE && m->request_vote.pre_vote &&
        m->request_vote.term > raft_current_term(n->raft) + 1) {
        cluster_fail(c, "node %llu pre-votes for term %llu at term %llu",
                     (unsigned long long)n->id,
                     (unsigned long long)m->request_vote.term,
                     (unsigned long long)raft_current_term(n->raft));
    }
    if (m->type == RAFT_MSG_REQUEST_VOTE && !m->request_vote.pre_vote &&
        n->hs.term == m->request_vote.term && n->hs.vote != n->id) {
        cluster_fail(c,
                     "node %llu asks votes before voting for itself "
                     "durably",
                     (unsigned long long)n->id);
    }
}

void cluster_check_free(struct cluster *c)
{
    size_t k;

    for (k = 0; k < c->n_committed; k++) {
        raft_buf_unref(c->committed[k].data);
    }
    free(c->committed);
    free(c->commit_term);
    free(c->leaders);
    free(c->ballots);
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

void cluster_check_install(struct cluster *c, const struct cnode *f,
                           const struct cnode *l)
{
    unsigned k;

    for (k = 0; k < f->n_applied; k++) {
        if (f->applied[k].term != l->applied[k].term) {
            cluster_fail(c,
                         "state machine safety: snapshot of %llu "
                         "differs from %llu's state at %u",
                         (unsigned long long)l->id, (unsigned long long)f->id,
                         k + 1);
        }
    }
}

void cluster_check_reset(struct cluster *c, const struct cnode *f,
                         raft_index index)
{
    /* Durability: a reset must not delete a copy of a committed
     * entry past the snapshot. */
    for (raft_index i = index + 1; i <= cluster_disk_last(f); i++) {
        const struct raft_entry *g = cluster_committed(c, i);
        if (g != NULL && cluster_disk_term(f, i) == g->term) {
            cluster_fail(c,
                         "durability: snapshot %llu installed on "
                         "%llu deletes committed entry %llu",
                         (unsigned long long)index, (unsigned long long)f->id,
                         (unsigned long long)i);
        }
    }
}
