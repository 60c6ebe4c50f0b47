/* Log replication (paper §5.3, Fig. 2 AppendEntries; thesis §3.5, §10.2):
 * the leader's AppendEntries and heartbeats driven by per-follower progress,
 * the follower's consistency check, truncation and durable acknowledgement,
 * and commit advancement by counting replicas of current-term entries
 * (paper §5.4.2). */

#include "persist.h"
#include "quorum.h"
#include "raft_internal.h"

/* min_index returns the smaller of two indexes. */
static raft_index min_index(raft_index a, raft_index b)
{
    return a < b ? a : b;
}

/* offer_snapshot tells whether follower @slot needs entries that were
 * compacted (its next index is at or below the snapshot boundary, paper
 * §7). It is first probed once at the boundary itself (whose term is
 * known): a follower that holds the boundary entry needs no snapshot,
 * and one that refuses it holds no entry of the leader's log from the
 * boundary on, so an installed snapshot, which resets its log, deletes
 * none of its copies of committed entries. Then, unless it waits for a
 * snapshot already or a failed transfer is too recent, it enters
 * SNAPSHOT and its id goes to the update's snapshot_to, once. Returns
 * false when an AppendEntries (the boundary probe) may go. */
static bool offer_snapshot(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = &r->progress[slot];

    if (p->next >= r->log.first) {
        return false;
    }
    if (p->state == RAFT_PROGRESS_SNAPSHOT) {
        return true;
    }
    if (!p->boundary_probed) {
        if (p->state == RAFT_PROGRESS_REPLICATE) {
            progress_become_probe(p, r->now);
        }
        p->next = r->log.first;
        p->boundary_probed = true;
        return false;
    }
    if (r->now >= p->snapshot_retry && r->n_snapshot_to < RAFT_MAX_SERVERS) {
        progress_become_snapshot(p, r->log.first - 1, r->now);
        r->snapshot_to[r->n_snapshot_to++] = raft_slot_id(r, slot);
    }
    return true;
}

/* quorum_contact_told is the quorum_contact an AppendEntries of this
 * leader carries: how long ago a quorum of voters was last known to
 * follow it (raft_quorum_contact: timed by the send time of the requests
 * they answered), capped to the field's u32 (a follower takes its
 * commit index as current as of then, raft_leader_quorum_contact). */
static uint32_t quorum_contact_told(const struct raft *r)
{
    uint64_t age = raft_quorum_contact(r);
    return age > UINT32_MAX ? UINT32_MAX : (uint32_t)age;
}

/* mark_gap is the least time, in ms, between two send marks of one
 * follower's progress (progress_take_seq): a quarter of the heartbeat
 * interval, so that a request's send time is known within that, and
 * RAFT__SEND_MARKS marks cover eight heartbeat intervals or more. Same
 * thread as raft_step. */
static uint64_t mark_gap(const struct raft *r)
{
    return r->heartbeat_interval >= 4 ? r->heartbeat_interval / 4 : 1;
}

/* stamp_append fills what every AppendEntries to follower @p carries
 * beside its entries: the term, @prev and its term, the commit index,
 * the quorum contact, the echo of the follower's latest answer (wire
 * version 7; RAFT_ECHO_NONE before one came) and a new seq, whose send
 * time is marked. Same thread as raft_step. */
static void stamp_append(struct raft *r, struct raft_peer_progress *p,
                         raft_index prev, struct raft_append_entries *ae)
{
    ae->term = r->term;
    ae->prev_log_index = prev;
    ae->prev_log_term = log_term_at(&r->log, prev);
    /* The follower commits only what it verified against this leader's
     * log (replication_recv_append_entries), so the full commit index is
     * safe to send. */
    ae->leader_commit = r->commit;
    ae->quorum_contact = quorum_contact_told(r);
    ae->echo = p->echo != 0 ? p->echo : RAFT_ECHO_NONE;
    ae->seq = progress_take_seq(p, r->now, mark_gap(r));
}

/* send_append sends follower @slot one AppendEntries from its next index,
 * with as many entries as fit max_size_per_msg and the room of its window
 * (at least one entry when the window is empty). With @allow_empty a
 * PROBE follower may get one without entries. A follower that needs
 * compacted entries is offered a snapshot instead. Returns true when a
 * message went out. */
static bool send_append(struct raft *r, unsigned slot, bool allow_empty)
{
    struct raft_peer_progress *p = &r->progress[slot];
    raft_index last = log_last_index(&r->log);
    uint64_t room = progress_room(p);
    raft_index prev;
    raft_index i;
    uint64_t bytes = 0;
    unsigned n = 0;
    struct raft_message *m;
    struct raft_append_entries *ae;

    if (r->term_unsure || progress_is_paused(p) || offer_snapshot(r, slot)) {
        return false;
    }
    if (p->next > last &&
        (!allow_empty || p->state == RAFT_PROGRESS_REPLICATE)) {
        return false;
    }
    prev = p->next - 1;
    for (i = p->next; i <= last; i++) {
        const struct raft_entry *e = log_get(&r->log, i);
        uint64_t len = e->data != NULL ? e->data->len : 0;
        if (n > 0 &&
            (bytes + len > r->max_size_per_msg || bytes + len > room)) {
            break;
        }
        if (n == 0 && len > room && p->inflights.n > 0) {
            /* max_inflight_bytes: wait for room (an entry larger than the
             * whole limit goes alone, into an empty window). */
            return false;
        }
        bytes += len;
        n++;
    }
    m = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES, raft_slot_id(r, slot));
    if (m == NULL) {
        return false;
    }
    ae = &m->append_entries;
    ae->entries = n > 0 ? (struct raft_entry *)log_get(&r->log, p->next) : NULL;
    ae->n_entries = n;
    stamp_append(r, p, prev, ae);
    progress_sent(p, ae->seq, prev + n, n, bytes);
    return true;
}

/* send_appends sends follower @slot what it lacks, as far as its progress
 * allows (one probe, or a window of pipelined messages). Returns true
 * when anything went out. */
static bool send_appends(struct raft *r, unsigned slot)
{
    bool sent = false;

    while (send_append(r, slot, false)) {
        sent = true;
        if (r->progress[slot].state != RAFT_PROGRESS_REPLICATE) {
            break;
        }
    }
    return sent;
}

/* send_heartbeat sends follower @slot an empty AppendEntries at its match
 * index, which it is known to hold (at index 0, which always matches,
 * when the term of match was compacted away), with the commit index. */
static void send_heartbeat(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = &r->progress[slot];
    struct raft_message *m;
    raft_index prev = p->match;

    if (r->term_unsure) {
        return;
    }
    if (prev + 1 < r->log.first) {
        prev = 0;
    }
    m = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES, raft_slot_id(r, slot));
    if (m == NULL) {
        return;
    }
    stamp_append(r, p, prev, &m->append_entries);
}

void replication_heartbeat(struct raft *r, unsigned slot)
{
    send_heartbeat(r, slot);
}

/* broadcast_commit tells every REPLICATE follower the new commit index at
 * once: with its next entries when there are any to send, else in an
 * empty AppendEntries. PROBE and SNAPSHOT followers learn it with their
 * next probe or heartbeat. */
static void broadcast_commit(struct raft *r)
{
    unsigned i;

    for (i = 0; i < raft_n_slots(r); i++) {
        if (i == r->self_slot ||
            r->progress[i].state != RAFT_PROGRESS_REPLICATE) {
            continue;
        }
        if (!send_appends(r, i)) {
            send_heartbeat(r, i);
        }
    }
}

/* maybe_commit advances the leader's commit index to the largest index a
 * majority of the voters of the configuration in force holds durably
 * (learners never count; a leader that is no voter does not count
 * itself, thesis §4.2.2), if that entry is of the current term (paper
 * §5.4.2: never commit an older term's entry by counting replicas), and
 * then tells the followers. The leader counts itself only up to its
 * persisted index. */
static void maybe_commit(struct raft *r)
{
    raft_index index = membership_commit_index(r);

    if (index > r->commit && log_term_at(&r->log, index) == r->term) {
        r->commit = index;
        broadcast_commit(r);
    }
}

void replication_become_leader(struct raft *r)
{
    raft_index last = log_last_index(&r->log);
    raft_index noop;
    unsigned i;

    r->role = RAFT_LEADER;
    r->leader = r->id;
    r->pre_candidate = false;
    r->heartbeat_start = r->now;
    r->quorum_start = r->now;
    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        progress_reset(&r->progress[i], last + 1, r->now);
        r->active[i] = false;
        if (r->votes[i] > 0) {
            /* It granted its vote for this term after the campaign's
             * RequestVotes went out: it followed this server then. */
            r->progress[i].contact_at = r->campaign_at;
        }
    }
    membership_lead(r);
    /* Thesis §6.4: a new leader commits an entry of its own term at once,
     * which commits every earlier entry it holds. */
    noop = log_append(&r->log, r->term, RAFT_ENTRY_NOOP, NULL);
    raft_mark_written(r, noop);
    read_index_lead(r, noop);
    replication_send_all(r);
}

void replication_send_all(struct raft *r)
{
    unsigned i;

    for (i = 0; i < raft_n_slots(r); i++) {
        if (i != r->self_slot) {
            send_appends(r, i);
        }
    }
    maybe_commit(r);
}

/* check_quorum ends a check-quorum round when an election timeout passed
 * since it began: a leader that heard from no quorum of voters in the round
 * steps down, so a leader cut off from the majority stops serving while
 * the others, their leases expired, elect another (thesis §6.2). Returns
 * false when it stepped down. */
static bool check_quorum(struct raft *r)
{
    int8_t heard[RAFT_MAX_SERVERS];
    unsigned i;

    if (!r->check_quorum || r->now - r->quorum_start < r->election_timeout) {
        return true;
    }
    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        heard[i] = i == r->self_slot || r->active[i] ? 1 : 0;
        r->active[i] = false;
    }
    r->quorum_start = r->now;
    /* Voters only: learners keep no leader in power. */
    if (membership_tally(r, heard) != QUORUM_WON) {
        election_become_follower(r, r->term, 0);
        return false;
    }
    return true;
}

/* Number of election timeouts a follower may wait in SNAPSHOT without
 * any progress (SNAPSHOT_PROGRESS: the driver still delivers it) before
 * it is probed (and offered a snapshot) again. */
#define RAFT__SNAPSHOT_TIMEOUTS 10

void replication_tick(struct raft *r)
{
    raft_index last = log_last_index(&r->log);
    unsigned i;

    if (!check_quorum(r)) {
        return;
    }
    transfer_tick(r);
    membership_leaving_tick(r);
    if (r->now - r->heartbeat_start < r->heartbeat_interval) {
        return;
    }
    r->heartbeat_start = r->now;
    for (i = 0; i < raft_n_slots(r); i++) {
        struct raft_peer_progress *p = &r->progress[i];
        uint64_t idle = r->now - p->last_progress;
        if (i == r->self_slot) {
            continue;
        }
        if (p->state == RAFT_PROGRESS_REPLICATE && p->inflights.n > 0 &&
            p->match < last && idle >= r->election_timeout) {
            /* No answer for an election timeout: messages were lost.
             * Start over from what the follower is known to hold. */
            progress_become_probe(p, r->now);
        }
        if (p->state == RAFT_PROGRESS_SNAPSHOT &&
            idle >= (uint64_t)RAFT__SNAPSHOT_TIMEOUTS * r->election_timeout) {
            /* The snapshot never arrived, nor did its failure. */
            progress_become_probe(p, r->now);
        }
        /* A rejection still waiting for its predecessors after a whole
         * heartbeat interval: they were lost (progress.h). */
        progress_apply_pending(p, true, r->now);
        switch (p->state) {
            case RAFT_PROGRESS_PROBE:
                /* A heartbeat interval passed: the probe may go again,
                 * and it is the heartbeat. */
                p->paused = false;
                if (!send_append(r, i, true)) {
                    send_heartbeat(r, i);
                }
                break;
            case RAFT_PROGRESS_REPLICATE:
                send_heartbeat(r, i);
                send_appends(r, i);
                break;
            default:
                send_heartbeat(r, i);
                break;
        }
    }
}

raft_index replication_propose(struct raft *r, struct raft_buf *const *bufs,
                               unsigned n)
{
    raft_index first = log_last_index(&r->log) + 1;
    unsigned i;

    for (i = 0; i < n; i++) {
        log_append(&r->log, r->term, RAFT_ENTRY_NORMAL, bufs[i]);
    }
    raft_mark_written(r, first);
    replication_send_all(r);
    return first;
}

/* reply_append sends the leader an AppendEntries answer to request
 * @seq. */
static void reply_append(struct raft *r, raft_id to, uint64_t seq, bool success,
                         raft_index reject_index, raft_index last_log_index,
                         raft_index conflict_index)
{
    struct raft_message *m;

    m = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES_RESULT, to);
    if (m == NULL) {
        return;
    }
    m->append_entries_result.term = r->term;
    m->append_entries_result.success = success;
    m->append_entries_result.reject_index = reject_index;
    m->append_entries_result.last_log_index = last_log_index;
    m->append_entries_result.conflict_index = conflict_index;
    m->append_entries_result.seq = seq;
    /* Wire version 7: the leader echoes it, and the commit index it
     * tells then is current as of this time (contact_note_append). */
    m->append_entries_result.sent_at = r->now + 1;
}

/* find_conflict returns the first index of the term of our entry at @prev,
 * which conflicts with the leader's (fast backtracking, paper §5.3): the
 * leader's next probe then skips that whole term. Entries up to our commit
 * index match the leader's (Leader Completeness), so the search stops
 * above it. Returns 0 when we hold no entry at @prev. */
static raft_index find_conflict(const struct raft *r, raft_index prev)
{
    raft_term term;
    raft_index i;

    /* Invariant: prev >= r->log.first (prev_matches accepts the rest). */
    if (prev > log_last_index(&r->log)) {
        return 0;
    }
    term = log_term_at(&r->log, prev);
    i = prev;
    while (i > r->log.first && i - 1 > r->commit &&
           log_term_at(&r->log, i - 1) == term) {
        i--;
    }
    return i;
}

/* note_conflict records that AppendEntries @m contradicts our committed
 * history at @index (our term @ours, the leader's @theirs), before the
 * caller drops it (raft_conflicts). */
static void note_conflict(struct raft *r, const struct raft_message *m,
                          raft_index index, raft_term ours, raft_term theirs)
{
    r->n_conflicts++;
    r->conflict.leader = m->from;
    r->conflict.leader_term = m->append_entries.term;
    r->conflict.index = index;
    r->conflict.ours = ours;
    r->conflict.theirs = theirs;
    r->conflict.snapshot = index < r->log.first;
}

/* prev_matches: paper Fig. 2 AppendEntries receiver rule 2. Index 0 and
 * compacted entries (committed, so on every leader) always match. */
static bool prev_matches(const struct raft *r, raft_index prev,
                         raft_term prev_term)
{
    if (prev < r->log.first) {
        return true;
    }
    if (prev > log_last_index(&r->log)) {
        return false;
    }
    return log_term_at(&r->log, prev) == prev_term;
}

void replication_recv_append_entries(struct raft *r,
                                     const struct raft_message *m)
{
    const struct raft_append_entries *ae = &m->append_entries;
    raft_index end = ae->prev_log_index + ae->n_entries;
    raft_index commit;
    unsigned i;

    if (r->role == RAFT_LEADER) {
        /* Invariant: one leader per term (paper §5.2); ignore. */
        return;
    }
    if (r->role == RAFT_CANDIDATE || r->leader != m->from) {
        election_become_follower(r, r->term, m->from);
    }
    election_reset_timer(r);
    r->leader_seen = r->now;

    if (ae->prev_log_index != 0 && ae->prev_log_index == r->log.first - 1 &&
        r->log.snapshot_term != 0 &&
        ae->prev_log_term != r->log.snapshot_term) {
        note_conflict(r, m, ae->prev_log_index, r->log.snapshot_term,
                      ae->prev_log_term);
        return;
    }
    if (!prev_matches(r, ae->prev_log_index, ae->prev_log_term)) {
        reply_append(r, m->from, ae->seq, false, ae->prev_log_index,
                     log_last_index(&r->log),
                     find_conflict(r, ae->prev_log_index));
        return;
    }
    if (ae->seq > r->ack_seq) {
        r->ack_seq = ae->seq;
    }

    /* Receiver rules 3 and 4: skip entries we hold, truncate at the first
     * conflict, append the rest. */
    for (i = 0; i < ae->n_entries; i++) {
        const struct raft_entry *e = &ae->entries[i];
        if (e->index < r->log.first) {
            if (e->index == r->log.first - 1 && r->log.snapshot_term != 0 &&
                e->term != r->log.snapshot_term) {
                note_conflict(r, m, e->index, r->log.snapshot_term, e->term);
                return;
            }
            continue;
        }
        if (e->index > log_last_index(&r->log)) {
            break;
        }
        if (log_term_at(&r->log, e->index) != e->term) {
            if (e->index <= r->commit) {
                /* Invariant: committed entries never conflict (Leader
                 * Completeness, paper §5.4). A peer broke the protocol:
                 * drop its message rather than lose committed state. */
                note_conflict(r, m, e->index, log_term_at(&r->log, e->index),
                              e->term);
                return;
            }
            log_truncate(&r->log, e->index);
            membership_truncated(r, e->index);
            if (r->persisted >= e->index) {
                r->persisted = e->index - 1;
            }
            break;
        }
    }
    /* Invariant: entries from i on are past our last index (the loop
     * above skipped the compacted ones and stopped at the first new or
     * conflicting one), so they extend the log contiguously. */
    for (; i < ae->n_entries; i++) {
        const struct raft_entry *e = &ae->entries[i];
        log_append(&r->log, e->term, e->type, e->data);
        raft_mark_written(r, e->index);
        if (e->type == RAFT_ENTRY_CONFIG) {
            membership_appended(r, e->index);
        }
    }

    /* Entries up to @end now match the leader's log (Log Matching). */
    if (end > r->verified) {
        r->verified = end;
    }
    commit = min_index(ae->leader_commit, r->verified);
    if (commit > r->commit) {
        r->commit = commit;
    }
    /* Acknowledge only what is durable; the rest is acknowledged when
     * RAFT_EVENT_PERSISTED covers it. */
    if (end <= r->persisted) {
        reply_append(r, m->from, ae->seq, true, 0, end, 0);
    }
}

/* recv_success handles a successful answer of the current window from
 * follower @slot: a cumulative acknowledgement through @last
 * (progress.h). */
static void recv_success(struct raft *r, unsigned slot, raft_index last)
{
    struct raft_peer_progress *p = &r->progress[slot];
    bool raised;

    raised = progress_maybe_update(p, last, r->now);
    switch (p->state) {
        case RAFT_PROGRESS_SNAPSHOT:
            /* The follower acknowledges the installed snapshot (or holds
             * enough otherwise): replicate from what it holds. */
            if (last >= p->snapshot_index) {
                progress_become_replicate(p, r->now);
            }
            break;
        case RAFT_PROGRESS_PROBE:
            /* The probe found the match point. */
            progress_become_replicate(p, r->now);
            break;
        default:
            progress_ack(p, last);
            progress_apply_pending(p, false, r->now);
            break;
    }
    progress_round(p, p->match, log_last_index(&r->log), r->now);
    if (raised) {
        maybe_commit(r);
    }
    if (raft_slot_id(r, slot) == r->transfer_to) {
        transfer_progress(r);
    }
    if (p->state == RAFT_PROGRESS_PROBE) {
        send_append(r, slot, true);
    } else {
        send_appends(r, slot);
    }
}

void replication_recv_append_entries_result(struct raft *r,
                                            const struct raft_message *m)
{
    const struct raft_append_entries_result *res = &m->append_entries_result;
    unsigned slot = raft_track_of(r, m->from);
    struct raft_peer_progress *p;

    /* A server removed for good (or never a member) is not tracked. */
    if (r->role != RAFT_LEADER || slot >= raft_n_slots(r) ||
        slot == r->self_slot) {
        return;
    }
    p = &r->progress[slot];
    if (progress_is_stale(p, res->seq)) {
        return;
    }
    if (res->success) {
        if (res->last_log_index > log_last_index(&r->log)) {
            return; /* acknowledges entries we never sent: bogus */
        }
        recv_success(r, slot, res->last_log_index);
        return;
    }
    switch (p->state) {
        case RAFT_PROGRESS_PROBE:
            if (progress_maybe_decr(p, res->reject_index, res->last_log_index,
                                    res->conflict_index, r->now)) {
                send_append(r, slot, true);
            }
            break;
        case RAFT_PROGRESS_REPLICATE:
            if (progress_reject(p, res->seq, res->reject_index,
                                res->last_log_index, res->conflict_index,
                                r->now) == PROGRESS_RESET) {
                send_append(r, slot, true);
            }
            break;
        default:
            break; /* SNAPSHOT: heartbeats' answers carry nothing */
    }
}

void replication_persisted(struct raft *r, raft_index index, raft_term term)
{
    raft_index ack;

    /* An event for entries since truncated (or dropped by an installed
     * snapshot) does not match the log. */
    if (index <= r->persisted || log_term_at(&r->log, index) != term ||
        index < r->log.first) {
        return;
    }
    r->persisted = index;
    if (r->role == RAFT_LEADER) {
        if (r->term_unsure && term == r->term) {
            /* The term is durable with the entry: replicate now. */
            r->term_unsure = false;
            replication_send_all(r);
            return;
        }
        maybe_commit(r);
        return;
    }
    ack = min_index(r->persisted, r->verified);
    if (r->role == RAFT_FOLLOWER && r->leader != 0 && ack > 0) {
        reply_append(r, r->leader, r->ack_seq, true, 0, ack, 0);
    }
}

void replication_compact(struct raft *r, raft_index index)
{
    /* Invariant: index <= handed and <= persisted (check_event), so the
     * entries dropped are committed, applied and durable: the snapshot
     * holds them (paper §7). */
    if (index < r->log.first) {
        return;
    }
    membership_compacting(r, index, NULL);
    log_compact(&r->log, index);
}

enum raft_snapshot_log_action raft_snapshot_log_action(raft_term held_term,
                                                       raft_term last_term)
{
    /* Paper §7: "If existing log entry has same index and term as
     * snapshot's last included entry, retain log entries following it."
     * Term 0 is no entry's. */
    if (held_term != 0 && held_term == last_term) {
        return RAFT_SNAPSHOT_KEEP_SUFFIX;
    }
    return RAFT_SNAPSHOT_RESET;
}

bool raft_snapshot_resets_log(const struct raft *r, raft_index index,
                              raft_term last_term)
{
    /* What we hold durably at @index decides (paper §7). */
    raft_term held = index <= r->persisted ? log_term_at(&r->log, index) : 0;

    return index > r->handed &&
           raft_snapshot_log_action(held, last_term) == RAFT_SNAPSHOT_RESET;
}

void replication_snapshot_installed(struct raft *r,
                                    const struct raft_snapshot_event *s)
{
    raft_id leader = s->leader;
    raft_term term = s->term;
    raft_index index = s->index;
    bool reset = raft_snapshot_resets_log(r, index, s->last_term);

    /* As for any message of @leader: a higher term is adopted (paper
     * Fig. 2 "All servers"), and a candidate or leader gives way. */
    if (term > r->term) {
        election_become_follower(r, term, leader);
    } else if (r->role != RAFT_FOLLOWER ||
               (term == r->term && r->leader != leader)) {
        election_become_follower(r, r->term, term == r->term ? leader : 0);
    }
    if (index > r->handed && !reset) {
        /* Paper §7: we hold the snapshot's last entry durably, so what
         * follows it is the leader's log too (Log Matching) and may hold
         * committed entries counted on our copy: the driver kept it, and
         * so do we; only the prefix goes, as in a compaction. */
        membership_compacting(r, index, s->configuration);
        log_compact(&r->log, index);
        r->handed = index;
        if (r->commit < index) {
            r->commit = index;
        }
        if (r->verified < index) {
            r->verified = index;
        }
    } else if (reset) {
        /* The driver installed the snapshot and reset the durable log:
         * every entry goes, the snapshot is the new boundary. Its entries
         * are committed (a leader snapshots only what it applied), hence
         * on every later leader's log (Leader Completeness, §5.4): they
         * count as verified. */
        log_reset(&r->log, index, s->last_term);
        membership_reset(r, s->configuration);
        r->persisted = index;
        r->handed = index;
        if (r->commit < index) {
            r->commit = index;
        }
        if (r->verified < index) {
            r->verified = index;
        }
    }
    if (term == r->term) {
        election_reset_timer(r);
        r->leader_seen = r->now;
        reply_append(r, leader, 0, true, 0, index, 0);
    }
}

/* follower_progress returns the progress of the follower in @slot of
 * this leader, NULL when not leading or @slot is no follower's (any
 * more): a driver's event about it comes too late. */
static struct raft_peer_progress *follower_progress(struct raft *r,
                                                    unsigned slot)
{
    if (r->role != RAFT_LEADER || slot >= raft_n_slots(r) ||
        slot == r->self_slot) {
        return NULL;
    }
    return &r->progress[slot];
}

void replication_snapshot_failed(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = follower_progress(r, slot);

    if (p == NULL || p->state != RAFT_PROGRESS_SNAPSHOT) {
        return;
    }
    progress_become_probe(p, r->now);
    p->snapshot_retry = r->now + r->heartbeat_interval;
}

void replication_snapshot_progress(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = follower_progress(r, slot);

    if (p != NULL && p->state == RAFT_PROGRESS_SNAPSHOT) {
        p->last_progress = r->now; /* the expiry counts from here */
    }
}

void replication_unreachable(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = follower_progress(r, slot);

    if (p == NULL) {
        return;
    }
    p->unreachable = true; /* until it is heard from again */
    /* Its process may restart, its clock too (a reboot): echo only what
     * it stamps from now on. */
    p->echo = 0;
    if (p->state == RAFT_PROGRESS_SNAPSHOT) {
        return;
    }
    /* Whatever was in flight on the broken connection is lost: a new
     * window, probing from match. */
    progress_become_probe(p, r->now);
}
