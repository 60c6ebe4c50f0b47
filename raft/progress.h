/* What a leader tracks for one follower (etcd tracker/progress.go): match
 * and next index, the PROBE / REPLICATE / SNAPSHOT state, and the window of
 * pipelined AppendEntries not yet answered (inflights.h).
 *
 * Answers in request order. Every AppendEntries to a follower carries a
 * request number (seq, increasing, never 0) that its answer echoes. The
 * window is a FIFO of the requests with entries that are in flight, oldest
 * first; their seq and last index both increase. Answers may arrive late,
 * twice, or before the answers of earlier requests (the network reorders;
 * a follower answers a request as soon as it is durable). They are
 * accounted for strictly in request order:
 *
 *  - A window has a version (epoch). A rejection, a timeout (no progress
 *    for an election timeout), RAFT_EVENT_UNREACHABLE, and every change of
 *    state start a new window: the ring is emptied, the epoch bumped and
 *    epoch_seq set to the next seq, so every answer to a request of an
 *    older window (seq < epoch_seq) is ignored. seq 0 marks an answer to
 *    no request (a follower's acknowledgement of an installed snapshot,
 *    or of entries that became durable before it accepted any request of
 *    this leader): it is a success, which is always true (see below).
 *  - A success is cumulative: whatever request it answers, it says the
 *    follower durably holds the leader's entries through last_log_index
 *    (Log Matching, paper §5.3). It raises match and frees the members of
 *    the window that end at or below last_log_index: always a prefix of
 *    the window, so members leave in request order, and a success for a
 *    later request that arrives first accounts for its predecessors only
 *    through what they provably hold. acked_seq, the newest seq accounted
 *    for, only grows within an epoch.
 *  - A rejection is not cumulative and is acted upon only once all its
 *    predecessors are accounted for: a rejection of request s while an
 *    older member of the window is unanswered is set aside (the earliest
 *    one is kept) and applied when s becomes the window's oldest member,
 *    or at the next heartbeat round (the predecessors were lost: the
 *    follower refused s because it lacked their entries), unless a new
 *    window began meanwhile or a success accounted for s (a duplicate of
 *    s was accepted later). Applied, it starts a new window in PROBE at
 *    match + 1. A rejection of a request already accounted for is stale,
 *    and so is a rejection at or below match of a request that is not in
 *    the window (a heartbeat, sent at match).
 *
 * So a reordered rejection never throws away a window whose earlier
 * requests succeed, a duplicate never acts twice (the first one started a
 * new window), and nothing older than the current window moves progress
 * backwards. */

#ifndef RAFT_PROGRESS_H
#define RAFT_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "inflights.h"
#include "raft.h"

/* The most send marks one follower's progress keeps (progress_mark_send):
 * under steady load one every quarter heartbeat interval, so the marks
 * cover the last eight heartbeat intervals at least (an idle leader's,
 * thirty-two heartbeats). */
#define RAFT__SEND_MARKS 32

/* When a leader's requests to one follower went out: every request from
 * @seq up to the next mark's seq (excluded) was sent at @at or later. */
struct raft_send_mark {
    uint64_t seq; /* the first request number of the mark, 0: none */
    uint64_t at;  /* the time (ms) it was sent */
};

/* A rejection set aside until its predecessors are accounted for. */
struct raft_pending_reject {
    uint64_t seq;        /* request refused, 0 when none is pending */
    bool in_window;      /* that request is a member of the window */
    raft_index reject;   /* its prev_log_index */
    raft_index hint;     /* the follower's last index */
    raft_index conflict; /* first index of its conflicting term, or 0 */
};

/* One follower's replication progress.
 * Invariant: match < next.
 * Invariant: in PROBE and SNAPSHOT the window is empty; in REPLICATE its
 * members' seq are >= epoch_seq and > acked_seq, and < next_seq.
 * Invariant: in SNAPSHOT, snapshot_index >= next - 1 was compacted. */
struct raft_peer_progress {
    raft_index match;       /* highest index known durable on the peer */
    raft_index next;        /* next index to send */
    uint8_t state;          /* enum raft_progress_state */
    bool paused;            /* PROBE: one AppendEntries is outstanding */
    uint64_t last_progress; /* time (ms) match last rose or state changed */
    struct raft_inflights inflights; /* REPLICATE window */
    uint64_t next_seq;               /* seq of the next AppendEntries, >= 1 */
    uint64_t epoch;                  /* window version, bumped at every reset */
    uint64_t epoch_seq;              /* first seq of the window: older answers
                                are ignored */
    uint64_t acked_seq; /* newest seq accounted for in the window */
    struct raft_pending_reject pending; /* rejection waiting its turn */
    raft_index snapshot_index; /* SNAPSHOT: what the snapshot must reach */
    bool boundary_probed;      /* this window probed the snapshot boundary
                                (before offering a snapshot) */
    uint64_t snapshot_retry;   /* no snapshot offered before this time */
    bool heard;                /* an answer came in this leader's term */
    uint64_t last_heard;       /* time (ms) of its last answer's ARRIVAL:
                                  liveness (transfer.c, last_contact) */
    uint64_t contact_at;       /* time (ms), 0: unknown, by which the
                                  peer was last known to follow this
                                  leader in its term: the SEND time of
                                  the newest request it answered
                                  (progress_answered), or the campaign's
                                  start when it granted the vote; what
                                  raft_quorum_contact counts, so that an
                                  answer delayed in transit is not taken
                                  for recent contact */
    struct raft_send_mark marks[RAFT__SEND_MARKS]; /* ring, oldest first
                                  from marks_start: when this term's
                                  requests went out */
    uint64_t echo;                    /* the sent_at of the latest answer it
                                  took from the peer in this term, which
                                  its AppendEntries echo (0: none) */
    unsigned marks_start;             /* slot of the oldest mark */
    unsigned n_marks;                 /* marks held */
    struct raft_send_mark mark_floor; /* the newest mark dropped from the
                                  ring (seq 0: none): still a lower
                                  bound for its seqs and later ones */
    bool unreachable;        /* its connection broke (RAFT_EVENT_UNREACHABLE)
                                  and nothing came from it since */
    raft_index round_target; /* catch-up round (thesis §4.2.1): the
                                  leader's last index when it began */
    uint64_t round_start;    /* when the round began */
    uint64_t round_ms;       /* duration of the last finished round */
    bool round_done;         /* a round finished this term */
};

/* progress_round notes that the peer now matches @match while the
 * leader's last index is @last, at @now: the round ends when @match
 * reaches its target, and the next one starts with @last as target. */
void progress_round(struct raft_peer_progress *p, raft_index match,
                    raft_index last, uint64_t now);

/* progress_caught_up tells whether the peer's last round took less than
 * @timeout ms and the current one has not lasted longer (thesis §4.2.1:
 * a new server is caught up when a round lasts less than an election
 * timeout). */
bool progress_caught_up(const struct raft_peer_progress *p, uint64_t timeout,
                        uint64_t now);

/* progress_init allocates @p's window of @cap (>= 1) messages and
 * @max_bytes payload bytes (0: unlimited) and resets it to PROBE with
 * match 0 and next 1. Errors: RAFT_NOMEM. */
int progress_init(struct raft_peer_progress *p, unsigned cap,
                  uint64_t max_bytes);

/* progress_close frees @p's window. */
void progress_close(struct raft_peer_progress *p);

/* progress_reset starts tracking anew for a new leader term: PROBE,
 * match 0, next @next, at time @now, in a new window, contact unknown
 * and no send marks. */
void progress_reset(struct raft_peer_progress *p, raft_index next,
                    uint64_t now);

/* progress_become_probe moves to PROBE at next = match + 1, unpaused,
 * in a new window. */
void progress_become_probe(struct raft_peer_progress *p, uint64_t now);

/* progress_become_replicate moves to REPLICATE at next = match + 1 in a
 * new window. */
void progress_become_replicate(struct raft_peer_progress *p, uint64_t now);

/* progress_become_snapshot moves to SNAPSHOT: the follower needs a
 * snapshot through at least @index (the leader's boundary); new window. */
void progress_become_snapshot(struct raft_peer_progress *p, raft_index index,
                              uint64_t now);

/* progress_take_seq returns the seq for an AppendEntries about to go at
 * @now (a heartbeat too) and marks when it went: a new send mark unless
 * the newest one is less than @gap ms old (it then stands for this
 * request, a little earlier than it went: a lower bound). Loop thread
 * (the core's). */
uint64_t progress_take_seq(struct raft_peer_progress *p, uint64_t now,
                           uint64_t gap);

/* progress_answered notes an answer of this leader's term echoing @seq
 * (0: it answers no request) and stamped @sent_at by the peer (0: an
 * older peer's, wire version 6 or older). The peer followed this leader
 * when it received request @seq, so no earlier than @seq's send time,
 * which raises contact_at (never lowers it). An answer to a request
 * whose send time is no longer marked (older than the ring and its
 * floor) or that was never sent (@seq not below next_seq) does not
 * change contact_at. A stamp becomes the echo: the latest taken, not the
 * greatest, so that a peer whose clock restarted lower (a reboot) is
 * echoed its new clock from its first answer on. Same thread as
 * raft_step. */
void progress_answered(struct raft_peer_progress *p, uint64_t seq,
                       uint64_t sent_at);

/* progress_is_stale tells whether an answer echoing @seq answers a
 * request of an older window (then it is ignored). */
bool progress_is_stale(const struct raft_peer_progress *p, uint64_t seq);

/* progress_maybe_update records that the peer holds [1, @index] durably:
 * raises match (and next past it). Returns true when match rose. */
bool progress_maybe_update(struct raft_peer_progress *p, raft_index index,
                           uint64_t now);

/* progress_ack accounts for a success of the current window through
 * @index: frees the window's members ending at or below it, raises
 * acked_seq. Returns the number of members freed. */
unsigned progress_ack(struct raft_peer_progress *p, raft_index index);

/* progress_maybe_decr handles, in PROBE, a rejection of an AppendEntries
 * whose prev_log_index was @reject with the peer's last index @hint and
 * the first index @conflict of its conflicting term (0 when none). Returns
 * false when it does not answer the outstanding probe (ignored);
 * otherwise lowers next to min(@reject, @hint + 1, @conflict), never below
 * match + 1, unpauses and returns true: one round trip skips the peer's
 * whole conflicting term. A @hint below match means the peer lost its
 * durable log (wiped by an operator): match drops to 0 and the peer is
 * rebuilt from the log or a snapshot. In REPLICATE, see progress_reject. */
bool progress_maybe_decr(struct raft_peer_progress *p, raft_index reject,
                         raft_index hint, raft_index conflict, uint64_t now);

/* Outcome of progress_reject. */
enum progress_verdict {
    PROGRESS_IGNORED = 0,  /* stale: nothing changed */
    PROGRESS_DEFERRED = 1, /* set aside until its predecessors are
                              accounted for */
    PROGRESS_RESET = 2,    /* applied: back to PROBE in a new window */
};

/* progress_reject handles, in REPLICATE, a rejection of request @seq
 * whose prev_log_index was @reject (hints as progress_maybe_decr), by the
 * rules at the top of this file. */
enum progress_verdict progress_reject(struct raft_peer_progress *p,
                                      uint64_t seq, raft_index reject,
                                      raft_index hint, raft_index conflict,
                                      uint64_t now);

/* progress_apply_pending applies a set-aside rejection if its
 * predecessors are now accounted for, or whatever their state when
 * @force. Returns true when it moved the peer to PROBE. */
bool progress_apply_pending(struct raft_peer_progress *p, bool force,
                            uint64_t now);

/* progress_is_paused tells whether no AppendEntries with entries may be
 * sent now: PROBE with one outstanding, REPLICATE with a full window, or
 * SNAPSHOT. */
bool progress_is_paused(const struct raft_peer_progress *p);

/* progress_room returns how many payload bytes the next AppendEntries
 * may carry under the window's byte limit (UINT64_MAX: no limit; an empty
 * window always allows at least one entry, whatever its size). */
uint64_t progress_room(const struct raft_peer_progress *p);

/* progress_sent records an AppendEntries with request number @seq just
 * sent whose entries end at @last (@n_entries of them, @bytes payload
 * bytes): pauses PROBE; in REPLICATE advances next optimistically and
 * adds it to the window (when it has entries). */
void progress_sent(struct raft_peer_progress *p, uint64_t seq, raft_index last,
                   unsigned n_entries, uint64_t bytes);

#endif /* RAFT_PROGRESS_H */
