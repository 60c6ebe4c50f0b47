/* Log replication (paper §5.3, Fig. 2 AppendEntries; thesis §3.5, §10.2):
 * the leader's AppendEntries and heartbeats driven by per-follower progress,
 * the follower's consistency check, truncation and durable acknowledgement,
 * and commit advancement by counting replicas of current-term entries
 * (paper §5.4.2). */

#include "quorum.h"
#include "raft_internal.h"

/* min_index returns the smaller of two indexes. */
static raft_index min_index(raft_index a, raft_index b)
{
    return a < b ? a : b;
}

/* send_append sends follower @slot one AppendEntries from its next index,
 * with as many entries as fit max_size_per_msg (at least one). With
 * @allow_empty a PROBE follower may get one without entries. Returns true
 * when a message went out. */
static bool send_append(struct raft *r, unsigned slot, bool allow_empty)
{
    struct raft_peer_progress *p = &r->progress[slot];
    raft_index last = log_last_index(&r->log);
    raft_index prev;
    raft_index i;
    uint64_t bytes = 0;
    unsigned n = 0;
    struct raft_message *m;
    struct raft_append_entries *ae;

    if (progress_is_paused(p)) {
        return false;
    }
    if (p->next > last &&
        (!allow_empty || p->state == RAFT_PROGRESS_REPLICATE)) {
        return false;
    }
    prev = p->next - 1;
    if (prev + 1 < r->log.first) {
        /* The entries were compacted: a snapshot would be needed, which
         * this core does not send yet. */
        return false;
    }
    for (i = p->next; i <= last; i++) {
        const struct raft_entry *e = log_get(&r->log, i);
        uint64_t len = e->data != NULL ? e->data->len : 0;
        if (n > 0 && bytes + len > r->max_size_per_msg) {
            break;
        }
        bytes += len;
        n++;
    }
    m = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES, r->voters[slot]);
    if (m == NULL) {
        return false;
    }
    ae = &m->append_entries;
    ae->term = r->term;
    ae->prev_log_index = prev;
    ae->prev_log_term = log_term_at(&r->log, prev);
    ae->entries = n > 0 ? (struct raft_entry *)log_get(&r->log, p->next)
                        : NULL;
    ae->n_entries = n;
    /* Without entries this is a heartbeat: it carries no more commit than
     * the follower is known to hold. */
    ae->leader_commit = n > 0 ? r->commit : min_index(r->commit, p->match);
    progress_sent(p, prev + n, n);
    return true;
}

/* send_appends sends follower @slot what it lacks, as far as its progress
 * allows (one probe, or a window of pipelined messages). */
static void send_appends(struct raft *r, unsigned slot)
{
    while (send_append(r, slot, false)) {
        if (r->progress[slot].state == RAFT_PROGRESS_PROBE) {
            break;
        }
    }
}

/* send_heartbeat sends a REPLICATE follower an empty AppendEntries at its
 * match index, which it is known to hold. */
static void send_heartbeat(struct raft *r, unsigned slot)
{
    struct raft_peer_progress *p = &r->progress[slot];
    struct raft_message *m;

    m = raft_out_message(r, RAFT_MSG_APPEND_ENTRIES, r->voters[slot]);
    if (m == NULL) {
        return;
    }
    m->append_entries.term = r->term;
    m->append_entries.prev_log_index = p->match;
    m->append_entries.prev_log_term = log_term_at(&r->log, p->match);
    m->append_entries.leader_commit = min_index(r->commit, p->match);
}

/* maybe_commit advances the leader's commit index to the largest index a
 * majority holds durably, if that entry is of the current term (paper
 * §5.4.2: never commit an older term's entry by counting replicas). The
 * leader counts itself only up to its persisted index. */
static void maybe_commit(struct raft *r)
{
    raft_index matches[RAFT_MAX_VOTERS];
    raft_index index;
    unsigned i;

    for (i = 0; i < r->n_voters; i++) {
        matches[i] = i == r->self_slot ? r->persisted : r->progress[i].match;
    }
    index = quorum_commit_index(matches, r->n_voters);
    if (index > r->commit && log_term_at(&r->log, index) == r->term) {
        r->commit = index;
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
    for (i = 0; i < r->n_voters; i++) {
        progress_reset(&r->progress[i], last + 1, r->now);
        r->active[i] = false;
    }
    /* Thesis §6.4: a new leader commits an entry of its own term at once,
     * which commits every earlier entry it holds. */
    noop = log_append(&r->log, r->term, RAFT_ENTRY_NOOP, NULL);
    raft_mark_written(r, noop);
    for (i = 0; i < r->n_voters; i++) {
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
    int8_t heard[RAFT_MAX_VOTERS];
    unsigned i;

    if (!r->check_quorum ||
        r->now - r->quorum_start < r->election_timeout) {
        return true;
    }
    for (i = 0; i < r->n_voters; i++) {
        heard[i] = i == r->self_slot || r->active[i] ? 1 : 0;
        r->active[i] = false;
    }
    r->quorum_start = r->now;
    if (quorum_vote_result(heard, r->n_voters) != QUORUM_WON) {
        election_become_follower(r, r->term, 0);
        return false;
    }
    return true;
}

void replication_tick(struct raft *r)
{
    raft_index last = log_last_index(&r->log);
    unsigned i;

    if (!check_quorum(r)) {
        return;
    }
    if (r->now - r->heartbeat_start < r->heartbeat_interval) {
        return;
    }
    r->heartbeat_start = r->now;
    for (i = 0; i < r->n_voters; i++) {
        struct raft_peer_progress *p = &r->progress[i];
        if (i == r->self_slot) {
            continue;
        }
        if (p->state == RAFT_PROGRESS_REPLICATE && p->n_inflight > 0 &&
            p->match < last &&
            r->now - p->last_progress >= r->election_timeout) {
            /* No answer for an election timeout: messages were lost.
             * Start over from what the follower is known to hold. */
            progress_become_probe(p, r->now);
        }
        if (p->state == RAFT_PROGRESS_PROBE) {
            /* A heartbeat interval passed: the probe may go again, and it
             * is the heartbeat. */
            p->paused = false;
            send_append(r, i, true);
        } else {
            send_heartbeat(r, i);
            send_appends(r, i);
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
    for (i = 0; i < r->n_voters; i++) {
        if (i != r->self_slot) {
            send_appends(r, i);
        }
    }
    maybe_commit(r);
    return first;
}

/* reply_append sends the leader an AppendEntries answer. */
static void reply_append(struct raft *r, raft_id to, bool success,
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

    if (!prev_matches(r, ae->prev_log_index, ae->prev_log_term)) {
        reply_append(r, m->from, false, ae->prev_log_index,
                     log_last_index(&r->log),
                     find_conflict(r, ae->prev_log_index));
        return;
    }

    /* Receiver rules 3 and 4: skip entries we hold, truncate at the first
     * conflict, append the rest. */
    for (i = 0; i < ae->n_entries; i++) {
        const struct raft_entry *e = &ae->entries[i];
        if (e->index < r->log.first) {
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
                return;
            }
            log_truncate(&r->log, e->index);
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
        reply_append(r, m->from, true, 0, end, 0);
    }
}

void replication_recv_append_entries_result(struct raft *r,
                                            const struct raft_message *m)
{
    const struct raft_append_entries_result *res = &m->append_entries_result;
    unsigned slot = raft_slot_of(r, m->from);
    struct raft_peer_progress *p = &r->progress[slot];

    if (r->role != RAFT_LEADER) {
        return;
    }
    if (res->success) {
        if (res->last_log_index > log_last_index(&r->log)) {
            return; /* acknowledges entries we never sent: bogus */
        }
        if (progress_maybe_update(p, res->last_log_index, r->now)) {
            maybe_commit(r);
        }
        progress_free_le(p, res->last_log_index);
        if (p->state == RAFT_PROGRESS_PROBE) {
            progress_become_replicate(p, r->now);
        }
        send_appends(r, slot);
        return;
    }
    if (progress_maybe_decr(p, res->reject_index, res->last_log_index,
                            res->conflict_index, r->now)) {
        send_append(r, slot, true);
    }
}

void replication_persisted(struct raft *r, raft_index index, raft_term term)
{
    raft_index ack;

    /* An event for entries since truncated does not match the log. */
    if (index <= r->persisted || log_term_at(&r->log, index) != term) {
        return;
    }
    r->persisted = index;
    if (r->role == RAFT_LEADER) {
        maybe_commit(r);
        return;
    }
    ack = min_index(r->persisted, r->verified);
    if (r->role == RAFT_FOLLOWER && r->leader != 0 && ack > 0) {
        reply_append(r, r->leader, true, 0, ack, 0);
    }
}
