/* The core's entry points: raft_new, raft_close, the raft_step dispatch
 * (event checks, the term rules every message obeys, then the handler for
 * the server's role) and the accessors. Election logic is in election.c,
 * log replication in replication.c. */

#include <stdlib.h>
#include <string.h>

#include "configuration.h"
#include "raft_internal.h"

unsigned raft_slot_of(const struct raft *r, raft_id id)
{
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        if (r->conf.servers[i].id == id) {
            return i;
        }
    }
    return RAFT_MAX_SERVERS;
}

raft_term raft_message_term(const struct raft_message *m)
{
    switch (m->type) {
        case RAFT_MSG_REQUEST_VOTE:
            return m->request_vote.term;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            return m->request_vote_result.term;
        case RAFT_MSG_APPEND_ENTRIES:
            return m->append_entries.term;
        case RAFT_MSG_APPEND_ENTRIES_RESULT:
            return m->append_entries_result.term;
        case RAFT_MSG_TIMEOUT_NOW:
            return m->timeout_now.term;
        default:
            return 0;
    }
}

struct raft_message *raft_out_message(struct raft *r, uint8_t type, raft_id to)
{
    struct raft_message *m;

    if (r->n_msgs == r->cap_msgs) {
        unsigned cap = r->cap_msgs * 2;
        struct raft_message *grown = realloc(r->msgs, cap * sizeof *grown);
        if (grown == NULL) {
            return NULL;
        }
        r->msgs = grown;
        r->cap_msgs = cap;
    }
    m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof *m);
    m->type = type;
    m->from = r->id;
    m->to = to;
    return m;
}

void raft_mark_written(struct raft *r, raft_index index)
{
    if (r->step_first_new == 0 || index < r->step_first_new) {
        r->step_first_new = index;
    }
}

static int check_config(const struct raft_config *cfg)
{
    unsigned i;
    unsigned j;

    if (cfg->id == 0 || (cfg->voters == NULL && cfg->n_voters > 0) ||
        cfg->n_voters > RAFT_MAX_VOTERS || cfg->election_timeout == 0 ||
        cfg->heartbeat_interval == 0 ||
        cfg->heartbeat_interval >= cfg->election_timeout ||
        cfg->max_inflight_msgs == 0) {
        return RAFT_INVALID;
    }
    for (i = 0; i < cfg->n_voters; i++) {
        if (cfg->voters[i] == 0) {
            return RAFT_INVALID;
        }
        for (j = 0; j < i; j++) {
            if (cfg->voters[j] == cfg->voters[i]) {
                return RAFT_INVALID;
            }
        }
    }
    return 0;
}

/* create is raft_new and raft_restore: the log starts at @first_index,
 * after a boundary of term @snapshot_term (0 when unknown). */
static int create(const struct raft_config *cfg,
                  const struct raft_hard_state *hs, raft_index first_index,
                  raft_term snapshot_term, const struct raft_entry *entries,
                  unsigned n_entries, raft_index applied, struct raft **out)
{
    struct raft *r;
    unsigned i;
    int rc;

    if (cfg == NULL || out == NULL) {
        return RAFT_INVALID;
    }
    rc = check_config(cfg);
    if (rc != 0) {
        return rc;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL) {
        return RAFT_NOMEM;
    }
    r->id = cfg->id;
    r->election_timeout = cfg->election_timeout;
    r->heartbeat_interval = cfg->heartbeat_interval;
    r->max_size_per_msg = cfg->max_size_per_msg;
    r->max_inflight_msgs = cfg->max_inflight_msgs;
    r->max_inflight_bytes = cfg->max_inflight_bytes;
    r->pre_vote = !cfg->disable_pre_vote;
    r->check_quorum = !cfg->disable_check_quorum;
    r->prng = cfg->seed;
    if (hs != NULL) {
        r->term = hs->term;
        r->vote = hs->vote;
    }
    rc = log_init(&r->log, first_index, snapshot_term, entries, n_entries);
    if (rc != 0) {
        goto err_free;
    }
    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        rc = progress_init(&r->progress[i], r->max_inflight_msgs,
                           r->max_inflight_bytes);
        if (rc != 0) {
            goto err_progress;
        }
    }
    rc = membership_init(r, cfg);
    if (rc != 0) {
        goto err_progress;
    }
    r->cap_msgs = 4 * (r->conf.n + 1);
    r->msgs = malloc(r->cap_msgs * sizeof *r->msgs);
    if (r->msgs == NULL) {
        rc = RAFT_NOMEM;
        goto err_progress;
    }
    r->role = RAFT_FOLLOWER;
    r->persisted = log_last_index(&r->log);
    /* Entries before first_index were compacted into a snapshot, which the
     * state machine holds: they count as applied. Applied entries were
     * committed, so the commit index starts there. */
    r->handed = applied;
    if (r->handed < first_index - 1) {
        r->handed = first_index - 1;
    }
    r->commit = r->handed;
    election_reset_timer(r);
    *out = r;
    return 0;

err_progress:
    while (i-- > 0) {
        progress_close(&r->progress[i]);
    }
    log_close(&r->log);
err_free:
    free(r);
    return rc;
}

int raft_new(const struct raft_config *cfg, const struct raft_hard_state *hs,
             raft_index first_index, const struct raft_entry *entries,
             unsigned n_entries, raft_index applied, struct raft **out)
{
    return create(cfg, hs, first_index, 0, entries, n_entries, applied, out);
}

int raft_restore(const struct raft_config *cfg,
                 const struct raft_hard_state *hs, raft_index snapshot_index,
                 raft_term snapshot_term, const struct raft_entry *entries,
                 unsigned n_entries, raft_index applied, struct raft **out)
{
    if (applied < snapshot_index || snapshot_index == UINT64_MAX) {
        return RAFT_INVALID;
    }
    return create(cfg, hs, snapshot_index + 1, snapshot_term, entries,
                  n_entries, applied, out);
}

void raft_close(struct raft *r)
{
    unsigned i;

    if (r == NULL) {
        return;
    }
    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        progress_close(&r->progress[i]);
    }
    read_index_close(r);
    log_close(&r->log);
    free(r->msgs);
    free(r);
}

/* check_message tells whether @m is a Raft RPC addressed to @r by another
 * server, with consistent entries whose configurations decode. The sender
 * need not be a member: a leader unknown to a joining server, a candidate
 * of a newer configuration (the handlers ignore answers from
 * non-members). */
static int check_message(const struct raft *r, const struct raft_message *m)
{
    const struct raft_append_entries *ae;
    unsigned i;

    if (m->to != r->id || m->from == r->id || m->from == 0) {
        return RAFT_INVALID;
    }
    switch (m->type) {
        case RAFT_MSG_REQUEST_VOTE:
        case RAFT_MSG_REQUEST_VOTE_RESULT:
        case RAFT_MSG_APPEND_ENTRIES_RESULT:
        case RAFT_MSG_TIMEOUT_NOW:
            return 0;
        case RAFT_MSG_APPEND_ENTRIES:
            ae = &m->append_entries;
            if (ae->n_entries > 0 && ae->entries == NULL) {
                return RAFT_INVALID;
            }
            for (i = 0; i < ae->n_entries; i++) {
                if (ae->entries[i].index != ae->prev_log_index + 1 + i) {
                    return RAFT_INVALID;
                }
            }
            return membership_check_entries(ae->entries, ae->n_entries);
        default:
            /* Not one of the core's types (the runtime's frames never
             * reach it: frame.h). */
            return RAFT_INVALID;
    }
}

/* recv_stale answers a message of an older term so its sender learns the
 * current term (paper Fig. 2: reply false if term < currentTerm). */
static void recv_stale(struct raft *r, const struct raft_message *m)
{
    struct raft_message *out;

    if (m->type == RAFT_MSG_APPEND_ENTRIES) {
        out = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES_RESULT, m->from);
        if (out != NULL) {
            out->append_entries_result.term = r->term;
            out->append_entries_result.success = false;
            out->append_entries_result.reject_index =
                m->append_entries.prev_log_index;
            out->append_entries_result.last_log_index = log_last_index(&r->log);
            out->append_entries_result.seq = m->append_entries.seq;
            out->append_entries_result.sent_at = r->now + 1;
        }
    } else if (m->type == RAFT_MSG_REQUEST_VOTE) {
        out = raft_out_message(r, RAFT_MSG_REQUEST_VOTE_RESULT, m->from);
        if (out != NULL) {
            out->request_vote_result.term = r->term;
            out->request_vote_result.vote_granted = false;
            out->request_vote_result.pre_vote = m->request_vote.pre_vote;
        }
    }
}

static void step_receive(struct raft *r, const struct raft_message *m)
{
    raft_term term = raft_message_term(m);
    unsigned slot;

    /* Thesis §4.2.3: a server that campaigns though it is no member was
     * removed without learning it (it was down while its removal
     * committed and the leader replicated to it). Its pre-votes and
     * votes are refused or ignored below, so it disrupts nobody, but
     * nobody would ever tell it either: the leader replicates to it
     * again (membership_recall). Not one whose own term is ahead of
     * ours: its answers would depose this leader (a pre-candidate asks
     * for its term + 1). */
    if (m->type == RAFT_MSG_REQUEST_VOTE && r->role == RAFT_LEADER &&
        raft_slot_of(r, m->from) == RAFT_MAX_SERVERS &&
        term <= r->term + (m->request_vote.pre_vote ? 1 : 0)) {
        membership_recall(r, m->from);
    }
    /* Leader stickiness (thesis §6.2, §9.6): while our leader is alive, a
     * RequestVote of a higher term comes from a server that should not
     * disrupt it (a removed one, thesis §4.2.3); ignore it, term included.
     * An election a leadership transfer started is meant to (§3.10). */
    if (m->type == RAFT_MSG_REQUEST_VOTE && term > r->term &&
        !m->request_vote.disrupt && election_in_lease(r)) {
        return;
    }
    /* Thesis §9.6: a pre-vote request never changes the receiver's term,
     * and a granted pre-vote carries the term the pre-candidate asked for,
     * one ahead of its own: neither goes through the term rule below. */
    if (m->type == RAFT_MSG_REQUEST_VOTE && m->request_vote.pre_vote) {
        if (term < r->term) {
            recv_stale(r, m);
        } else {
            election_recv_pre_vote(r, m);
        }
        return;
    }
    if (m->type == RAFT_MSG_REQUEST_VOTE_RESULT &&
        m->request_vote_result.pre_vote &&
        m->request_vote_result.vote_granted) {
        election_recv_pre_vote_result(r, m);
        return;
    }

    /* Paper Fig. 2 "All servers": a higher term makes us its follower. */
    if (term > r->term) {
        election_become_follower(r, term,
                                 m->type == RAFT_MSG_APPEND_ENTRIES ||
                                         m->type == RAFT_MSG_TIMEOUT_NOW
                                     ? m->from
                                     : 0);
    } else if (term < r->term) {
        recv_stale(r, m);
        return;
    }
    /* Invariant: term == r->term from here on. */
    slot = raft_track_of(r, m->from);
    if (r->role == RAFT_LEADER && slot < RAFT_MAX_SERVERS) {
        /* Check-quorum: the peer is alive in this term (arrival time,
         * as etcd's RecentActive). */
        r->active[slot] = true;
        r->progress[slot].heard = true;
        r->progress[slot].last_heard = r->now;
        r->progress[slot].unreachable = false;
        if (m->type == RAFT_MSG_APPEND_ENTRIES_RESULT) {
            /* Bounded staleness: it followed this leader when the
             * request it answers arrived, not when its answer did. */
            progress_answered(&r->progress[slot], m->append_entries_result.seq,
                              m->append_entries_result.sent_at);
        }
    }
    if (m->type == RAFT_MSG_APPEND_ENTRIES && r->role != RAFT_LEADER) {
        contact_note_append(r, m);
    }
    switch (m->type) {
        case RAFT_MSG_REQUEST_VOTE:
            election_recv_request_vote(r, m);
            break;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            if (m->request_vote_result.pre_vote) {
                election_recv_pre_vote_result(r, m);
            } else {
                election_recv_request_vote_result(r, m);
            }
            break;
        case RAFT_MSG_APPEND_ENTRIES:
            replication_recv_append_entries(r, m);
            break;
        case RAFT_MSG_TIMEOUT_NOW:
            election_recv_timeout_now(r, m);
            break;
        default:
            if (r->role == RAFT_LEADER) {
                /* Any answer of this term confirms the leadership to a
                 * ReadIndex round, a rejection too. */
                read_index_ack(r, m->from, m->append_entries_result.seq);
            }
            replication_recv_append_entries_result(r, m);
            break;
    }
}

static void step_tick(struct raft *r, uint64_t now)
{
    if (!r->ticked) {
        /* The first tick sets the time base of every timer. */
        r->ticked = true;
        r->now = now;
        r->election_start = now;
        r->heartbeat_start = now;
        return;
    }
    r->now = now;
    if (r->role == RAFT_LEADER) {
        read_index_tick(r);
        replication_tick(r);
    } else {
        election_tick(r);
    }
}

/* step_storage_stalled records whether the driver can persist; a server
 * that cannot stops leading (raft.h, STORAGE_STALLED). */
static void step_storage_stalled(struct raft *r, bool stalled)
{
    if (stalled == r->storage_stalled) {
        return;
    }
    r->storage_stalled = stalled;
    if (stalled && r->role != RAFT_FOLLOWER) {
        election_become_follower(r, r->term, 0);
    } else if (stalled) {
        r->pre_candidate = false;
    } else {
        election_reset_timer(r);
    }
}

/* check_event validates @e against @r and writes to @out_room how many
 * log slots the step may append. Returns 0 or the error of raft_step. */
static int check_event(const struct raft *r, const struct raft_event *e,
                       size_t *out_room)
{
    unsigned i;
    int rc;

    switch (e->type) {
        case RAFT_EVENT_TICK:
            if (r->ticked && e->tick.now < r->now) {
                return RAFT_INVALID;
            }
            *out_room = 1; /* a single voter may elect itself: a NOOP */
            return 0;
        case RAFT_EVENT_RECEIVE:
            rc = check_message(r, &e->receive);
            if (rc != 0) {
                return rc;
            }
            *out_room = 1;
            if (e->receive.type == RAFT_MSG_APPEND_ENTRIES) {
                *out_room = e->receive.append_entries.n_entries;
            }
            return 0;
        case RAFT_EVENT_PROPOSE:
            if (e->propose.n == 0 || e->propose.bufs == NULL) {
                return RAFT_INVALID;
            }
            for (i = 0; i < e->propose.n; i++) {
                if (e->propose.bufs[i] == NULL) {
                    return RAFT_INVALID;
                }
            }
            if (r->role != RAFT_LEADER) {
                return RAFT_NOTLEADER;
            }
            if (r->transfer_to != 0) {
                return RAFT_BUSY;
            }
            *out_room = e->propose.n;
            return 0;
        case RAFT_EVENT_PERSISTED:
        case RAFT_EVENT_STORAGE_STALLED:
        case RAFT_EVENT_DECLINE:
            *out_room = 0;
            return 0;
        case RAFT_EVENT_COMPACT:
            *out_room = 0;
            if (e->compact.index > r->handed ||
                e->compact.index > r->persisted) {
                return RAFT_INVALID;
            }
            return 0;
        case RAFT_EVENT_SNAPSHOT_INSTALLED:
            *out_room = 0;
            if (e->snapshot.leader == 0 || e->snapshot.leader == r->id ||
                e->snapshot.index == 0 ||
                (r->role == RAFT_LEADER && e->snapshot.term == r->term)) {
                return RAFT_INVALID;
            }
            if (e->snapshot.configuration != NULL &&
                !raft_configuration_valid(e->snapshot.configuration)) {
                return RAFT_INVALID;
            }
            return 0;
        case RAFT_EVENT_SNAPSHOT_FAILED:
        case RAFT_EVENT_SNAPSHOT_PROGRESS:
        case RAFT_EVENT_UNREACHABLE:
            *out_room = 0;
            if (e->unreachable.id == 0 || e->unreachable.id == r->id) {
                return RAFT_INVALID;
            }
            return 0;
        case RAFT_EVENT_CONTACT:
            *out_room = 0;
            if (e->contact.id == 0 || e->contact.id == r->id) {
                return RAFT_INVALID;
            }
            return 0;
        case RAFT_EVENT_CHANGE:
            *out_room = 1;
            return membership_check_change(r, e);
        case RAFT_EVENT_TRANSFER:
            *out_room = 0;
            return transfer_check(r, e->transfer.id);
        case RAFT_EVENT_READ_INDEX:
            *out_room = 0;
            return read_index_check(r);
        default:
            return RAFT_INVALID;
    }
}

/* finish_step fills @u from what the step did. */
static void finish_step(struct raft *r, struct raft_update *u)
{
    raft_index upto;

    /* Driver rule 1. A granted vote is reported even when unchanged, so a
     * repeated grant is never sent before the first one is durable. */
    if (r->term != r->step_hs.term || r->vote != r->step_hs.vote ||
        r->step_vote_granted) {
        u->hard_state_changed = true;
    }
    u->hard_state.term = r->term;
    u->hard_state.vote = r->vote;

    /* Driver rule 2: everything from the first (re)written index on. */
    if (r->step_first_new != 0 &&
        r->step_first_new <= log_last_index(&r->log)) {
        u->entries = log_get(&r->log, r->step_first_new);
        u->n_entries =
            (unsigned)(log_last_index(&r->log) - r->step_first_new + 1);
    }

    u->configuration_changed = r->conf_changed;
    u->messages = r->n_msgs > 0 ? r->msgs : NULL;
    u->n_messages = r->n_msgs;
    u->snapshot_to = r->n_snapshot_to > 0 ? r->snapshot_to : NULL;
    u->n_snapshot_to = r->n_snapshot_to;
    u->reads = r->read_index.n_out > 0 ? r->read_index.out : NULL;
    u->n_reads = r->read_index.n_out;

    /* Driver rule 3: committed and durable here, each index once. */
    upto = r->commit < r->persisted ? r->commit : r->persisted;
    if (upto > r->handed && log_get(&r->log, r->handed + 1) != NULL) {
        u->committed = log_get(&r->log, r->handed + 1);
        u->n_committed = (unsigned)(upto - r->handed);
        r->handed = upto;
    }
}

int raft_step(struct raft *r, const struct raft_event *event,
              struct raft_update *update)
{
    size_t room = 0;
    int rc;

    if (update != NULL) {
        memset(update, 0, sizeof *update);
    }
    if (r == NULL || event == NULL || update == NULL) {
        return RAFT_INVALID;
    }
    r->n_msgs = 0;
    rc = check_event(r, event, &room);
    if (rc != 0) {
        return rc;
    }
    /* Reserve the step's appends now, so nothing fails half-way and the
     * log array does not move under the step's messages. */
    rc = log_reserve(&r->log, room);
    if (rc != 0) {
        return rc;
    }
    r->step_hs.term = r->term;
    r->step_hs.vote = r->vote;
    r->step_first_new = 0;
    r->step_vote_granted = false;
    r->n_snapshot_to = 0;
    r->conf_changed = false;
    read_index_begin_step(r);

    switch (event->type) {
        case RAFT_EVENT_TICK:
            step_tick(r, event->tick.now);
            break;
        case RAFT_EVENT_RECEIVE:
            step_receive(r, &event->receive);
            break;
        case RAFT_EVENT_PROPOSE:
            update->proposed_index =
                replication_propose(r, event->propose.bufs, event->propose.n);
            update->proposed_term = r->term;
            break;
        case RAFT_EVENT_PERSISTED:
            replication_persisted(r, event->persisted.index,
                                  event->persisted.term);
            break;
        case RAFT_EVENT_COMPACT:
            replication_compact(r, event->compact.index);
            break;
        case RAFT_EVENT_SNAPSHOT_INSTALLED:
            replication_snapshot_installed(r, &event->snapshot);
            break;
        case RAFT_EVENT_SNAPSHOT_FAILED:
            replication_snapshot_failed(
                r, raft_track_of(r, event->unreachable.id));
            break;
        case RAFT_EVENT_SNAPSHOT_PROGRESS:
            replication_snapshot_progress(
                r, raft_track_of(r, event->unreachable.id));
            break;
        case RAFT_EVENT_CHANGE:
            rc = membership_change(r, event, &update->proposed_index);
            if (rc != 0) {
                return rc; /* RAFT_NOMEM: nothing changed */
            }
            update->proposed_term = r->term;
            replication_send_all(r);
            break;
        case RAFT_EVENT_TRANSFER:
            transfer_start(r, event->transfer.id);
            break;
        case RAFT_EVENT_STORAGE_STALLED:
            step_storage_stalled(r, event->storage.stalled);
            break;
        case RAFT_EVENT_DECLINE:
            r->declining = event->decline.on;
            break;
        case RAFT_EVENT_CONTACT:
            contact_step(r, event->contact.id);
            break;
        case RAFT_EVENT_READ_INDEX:
            rc = read_index_request(r, event->read_index.tag);
            if (rc != 0) {
                return rc; /* RAFT_NOMEM: nothing changed */
            }
            break;
        default:
            replication_unreachable(r, raft_track_of(r, event->unreachable.id));
            transfer_unreachable(r, event->unreachable.id);
            break;
    }
    membership_after_step(r);
    read_index_after_step(r);
    finish_step(r, update);
    return 0;
}

bool raft_storage_stalled(const struct raft *r)
{
    return r->storage_stalled;
}

bool raft_declining(const struct raft *r)
{
    return r->declining;
}

enum raft_role raft_role(const struct raft *r)
{
    return r->role;
}

raft_term raft_current_term(const struct raft *r)
{
    return r->term;
}

raft_id raft_leader_id(const struct raft *r)
{
    return r->leader;
}

raft_index raft_commit_index(const struct raft *r)
{
    return r->commit;
}

raft_index raft_last_index(const struct raft *r)
{
    return log_last_index(&r->log);
}

raft_index raft_first_index(const struct raft *r)
{
    return r->log.first;
}

raft_term raft_term_at(const struct raft *r, raft_index index)
{
    return log_term_at(&r->log, index);
}

raft_index raft_persisted_index(const struct raft *r)
{
    return r->persisted;
}

bool raft_term_durable(const struct raft *r)
{
    return !r->term_unsure;
}

uint64_t raft_leader_contact(const struct raft *r)
{
    if (r->role == RAFT_LEADER) {
        return 0;
    }
    if (r->leader == 0) {
        return UINT64_MAX;
    }
    return r->now >= r->leader_seen ? r->now - r->leader_seen : 0;
}

const struct raft_configuration *raft_current_configuration(
    const struct raft *r)
{
    return &r->conf;
}

raft_index raft_configuration_index(const struct raft *r)
{
    return r->conf_index;
}

uint8_t raft_self_role(const struct raft *r)
{
    return r->self_slot < r->conf.n ? r->conf.servers[r->self_slot].role : 0;
}

const struct raft_configuration *raft_leaving(const struct raft *r)
{
    return &r->leaving.servers;
}

raft_id raft_transferee(const struct raft *r)
{
    return r->transfer_to;
}

raft_index raft_snapshot_index(const struct raft *r)
{
    return r->log.first - 1;
}

raft_term raft_snapshot_term(const struct raft *r)
{
    return r->log.snapshot_term;
}

uint64_t raft_conflicts(const struct raft *r, struct raft_conflict *out)
{
    if (out != NULL && r->n_conflicts > 0) {
        *out = r->conflict;
    }
    return r->n_conflicts;
}

int raft_progress(const struct raft *r, raft_id id,
                  struct raft_progress_info *out)
{
    unsigned slot;
    const struct raft_peer_progress *p;

    if (r->role != RAFT_LEADER) {
        return RAFT_NOTLEADER;
    }
    slot = raft_slot_of(r, id);
    if (slot == RAFT_MAX_SERVERS || slot == r->self_slot) {
        return RAFT_NOTFOUND;
    }
    p = &r->progress[slot];
    out->role = r->conf.servers[slot].role;
    out->last_contact = p->heard && r->now >= p->last_heard
                            ? r->now - p->last_heard
                            : UINT64_MAX;
    out->caught_up = progress_caught_up(p, r->election_timeout, r->now);
    out->round_ms = p->round_ms;
    out->match_index = p->match;
    out->next_index = p->next;
    out->state = p->state;
    out->inflight = p->inflights.n;
    out->inflight_bytes = p->inflights.bytes;
    out->snapshot_index = p->snapshot_index;
    return 0;
}
