/* The private definition of struct raft and the functions the core's files
 * share (raft.c dispatch, election.c, replication.c). Not for the driver. */

#ifndef RAFT_INTERNAL_H
#define RAFT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"
#include "progress.h"
#include "quorum.h"
#include "raft.h"

/* The servers a leader keeps replicating to though the configuration in
 * force no longer holds them (thesis §4.2.2, as etcd and hashicorp do):
 * each until the entry that removed it is committed and an election
 * timeout more, so that it receives that entry and learns that it
 * committed, hence that it was removed and must not campaign. The
 * timeout counts from the server's last progress as long as it does not
 * hold that entry (a snapshot on its way holds it back altogether), so a
 * server catching up is not cut off half-way. They count for nothing (no
 * quorum, no vote). Server i is in slot conf.n + i of the per-server
 * arrays of struct raft.
 * Invariant: conf.n + servers.n <= RAFT_MAX_SERVERS; none is a member. */
struct raft_leaving {
    struct raft_configuration servers;       /* the servers, n of them */
    raft_index index[RAFT_MAX_SERVERS];      /* entry that removed server i
                                                (or a snapshot boundary
                                                past it) */
    bool committed[RAFT_MAX_SERVERS];        /* that entry was seen committed */
    uint64_t committed_at[RAFT_MAX_SERVERS]; /* ... at this time, or the
                                                later progress that brought
                                                the server to hold it */
    bool holds[RAFT_MAX_SERVERS];            /* its match reached index */
};

/* The most reads a leader holds pending (RAFT_EVENT_READ_INDEX); one more
 * is refused with RAFT_BUSY. */
#define RAFT__READS_MAX 4096

/* A read registered with RAFT_EVENT_READ_INDEX, not handed out yet. */
struct raft__read {
    uint64_t tag;   /* the caller's */
    uint64_t start; /* when it was registered, ms of the TICK clock */
    bool in_round;  /* the running round serves it */
};

/* A leader's ReadIndex state (read_index.c, thesis §6.4).
 * Invariant: cap >= n_pending, and out has cap slots, so that every
 * pending read can be handed out in one step without allocating.
 * Invariant: reads with in_round were registered before the running
 * round started; none has it while no round runs. */
struct raft_read_index {
    struct raft__read *pending; /* registered, n_pending */
    unsigned n_pending;
    unsigned cap;          /* slots of pending and of out */
    struct raft_read *out; /* the step's output, n_out */
    unsigned n_out;
    raft_index term_start;            /* the NOOP of this leader's term:
                                          no read index before it commits */
    bool round_active;                /* a heartbeat round runs */
    raft_index round_index;           /* the read index it confirms */
    unsigned n_round;                 /* servers of the round: */
    raft_id ids[RAFT_MAX_SERVERS];    /* each one's id (by id, not slot:
                                         a configuration change moves the
                                         slots), */
    uint64_t marks[RAFT_MAX_SERVERS]; /* the first seq the round sent it,
                                       */
    int8_t acked[RAFT_MAX_SERVERS];   /* and 1 once it answered a request
                                         of seq >= its mark */
};

/* One Raft server's core state.
 * Invariant: handed <= min(commit, persisted) once anything was handed out
 * past the initial applied index; persisted <= last log index.
 * Invariant: msgs[] entries pointers point into log.entries, which is not
 * moved nor truncated in the step after a message is added (room for the
 * step's appends is reserved when the step starts). */
struct raft {
    raft_id id;                     /* this server */
    struct raft_configuration conf; /* in force: the latest in the log
                                          (thesis §4.1); slot i of the
                                          per-server arrays below is
                                          conf.servers[i] */
    raft_index conf_index;          /* entry holding conf, 0: base */
    struct raft_configuration base; /* in force at log.first - 1 (the
                                          snapshot's) */
    unsigned self_slot;             /* conf.servers[self_slot].id == id,
                                          RAFT_MAX_SERVERS when not a
                                          member */
    bool conf_changed;              /* step: conf (or leaving) changed */
    struct raft_leaving leaving;    /* leader: removed servers it still
                                          replicates to */
    raft_id transfer_to;            /* leader: transferee, 0 none */
    uint64_t transfer_start;        /* when the transfer began */
    bool transfer_sent;             /* TimeoutNow went out */
    bool transfer_any;              /* the transferee was picked (TRANSFER
                                       to 0), not named */
    bool disrupt;                   /* candidate: this election was
                                          started by TimeoutNow */
    bool term_unsure;            /* leader elected by its own vote alone, in the
                         step that raised its term: nothing of the term
                         goes out before an entry of it is persisted
                         (with the hard state, driver rule 2) */
    unsigned election_timeout;   /* base election timeout, ms */
    unsigned heartbeat_interval; /* ms between heartbeats */
    uint64_t max_size_per_msg;   /* payload bytes per AppendEntries */
    unsigned max_inflight_msgs;  /* REPLICATE window */
    uint64_t max_inflight_bytes; /* REPLICATE window bytes, 0 no
                                          limit */
    bool pre_vote;               /* run a pre-vote round first */
    bool check_quorum;           /* check-quorum and stickiness */
    uint64_t prng;               /* splitmix64 state */
    raft_term term;              /* currentTerm (durable) */
    raft_id vote;                /* votedFor in term (durable) */
    struct raft_log log;         /* the log (durable up to persisted) */
    enum raft_role role;         /* follower, candidate or leader */
    raft_id leader;              /* known leader of term, 0 if none */
    raft_index commit;           /* commitIndex */
    raft_index persisted;        /* last index durable (PERSISTED) */
    raft_index handed;           /* last index handed out committed */
    raft_index verified;         /* follower: last index known to
                                          match the leader's log this term */
    uint64_t ack_seq;            /* follower: highest seq accepted
                                          from the leader of this term */
    bool storage_stalled;        /* STORAGE_STALLED: no leading,
                                          no campaigning */
    bool declining;              /* DECLINE: TimeoutNow ignored */
    uint64_t n_conflicts;        /* AppendEntries dropped for contradicting
                                    committed history (raft_conflicts) */
    struct raft_conflict conflict;  /* the latest of them */
    bool ticked;                    /* a TICK set the time base */
    uint64_t now;                   /* clock of the last TICK, ms */
    uint64_t election_start;        /* when the election timer started */
    uint64_t campaign_at;           /* when this server last became a
                                       candidate: its RequestVotes went
                                       out no earlier (a new leader's
                                       contact with its voters,
                                       contact_at in progress.h) */
    uint64_t election_rand;         /* randomized timeout, ms */
    uint64_t heartbeat_start;       /* leader: last heartbeat round */
    int8_t votes[RAFT_MAX_SERVERS]; /* candidate or pre-candidate: 1
                                          granted, -1 refused */
    bool pre_candidate;             /* follower running a pre-vote
                                          round for term + 1 */
    uint64_t leader_seen;           /* follower: when the leader of
                                          this term was last heard */
    uint64_t leader_alive;          /* follower: when bytes of the
                                          leader's were last seen in
                                          the middle of a message
                                          (CONTACT), for stickiness */
    uint64_t quorum_start;          /* leader: start of the current
                                          check-quorum round */
    raft_index leader_commit_seen;  /* highest leader_commit received
                                          since start (contact.c) */
    uint64_t leader_commit_at;      /* follower: the time, by this
                                          server's clock, as of which the
                                          leader of leader_commit_term
                                          last told a current commit
                                          index (the echoed send time of
                                          its answer: contact.c) */
    raft_term leader_commit_term;   /* that leader's term, 0 none */
    uint32_t leader_quorum_contact; /* follower: that AppendEntries'
                                          quorum_contact (contact.c) */
    bool active[RAFT_MAX_SERVERS];  /* leader: peer heard from in the
                                          current check-quorum round */
    struct raft_peer_progress progress[RAFT_MAX_SERVERS]; /* leader view */
    struct raft_message *msgs;             /* step output messages */
    unsigned n_msgs;                       /* messages in this step */
    unsigned cap_msgs;                     /* allocated message slots */
    raft_index step_first_new;             /* first index written this step,
                                          0 when none */
    bool step_vote_granted;                /* a vote was granted this step */
    struct raft_hard_state step_hs;        /* term and vote when step began */
    raft_id snapshot_to[RAFT_MAX_SERVERS]; /* step: followers newly in
                                          SNAPSHOT */
    unsigned n_snapshot_to;                /* ids in snapshot_to */
    struct raft_read_index read_index;     /* leader: pending reads */
};

/* raft_slot_of returns the position of @id in r->conf, or RAFT_MAX_SERVERS
 * when @id is not a member. */
unsigned raft_slot_of(const struct raft *r, raft_id id);

/* raft_n_slots returns the number of servers the per-server arrays track:
 * the members, then the leaving servers (a leader's). */
unsigned raft_n_slots(const struct raft *r);

/* raft_slot_id returns the id of the server in slot @slot (<
 * raft_n_slots). */
raft_id raft_slot_id(const struct raft *r, unsigned slot);

/* raft_track_of returns the slot of @id among the members and the leaving
 * servers, or RAFT_MAX_SERVERS when it is neither. */
unsigned raft_track_of(const struct raft *r, raft_id id);

/* raft_is_voter tells whether slot @slot (< RAFT_MAX_SERVERS or not) is a
 * voter of r->conf. */
bool raft_is_voter(const struct raft *r, unsigned slot);

/* raft_out_message adds a message of @type to @to to the step's output and
 * returns it (zeroed but for type, from, to), or NULL when out of memory:
 * the message is then dropped, which Raft tolerates like a network loss. */
struct raft_message *raft_out_message(struct raft *r, uint8_t type, raft_id to);

/* raft_mark_written notes that the log from @index on was (re)written in
 * this step, so the update hands it out to persist. */
void raft_mark_written(struct raft *r, raft_index index);

/* election_reset_timer restarts the election timer with a new randomized
 * timeout in [T, 2T) (paper §5.2). */
void election_reset_timer(struct raft *r);

/* election_become_follower makes @r a follower of @term (clearing the vote
 * when the term rises) that knows @leader (0 when unknown). */
void election_become_follower(struct raft *r, raft_term term, raft_id leader);

/* election_tick starts an election (or a pre-vote round first, thesis
 * §9.6) when a follower's or candidate's timer expired (paper Fig. 2
 * "Followers", "Candidates"). */
void election_tick(struct raft *r);

/* election_in_lease tells whether @r heard from a live leader of its term
 * within the minimum election timeout (or is that leader), with
 * check-quorum on: it then ignores RequestVote of higher terms (leader
 * stickiness, thesis §6.2 and §9.6). */
bool election_in_lease(const struct raft *r);

/* election_recv_pre_vote answers a pre-vote request whatever its term,
 * without changing @r's term or vote (thesis §9.6). */
void election_recv_pre_vote(struct raft *r, const struct raft_message *m);

/* election_recv_pre_vote_result counts a granted pre-vote for term + 1, or
 * a refusal, while @r runs a pre-vote round. */
void election_recv_pre_vote_result(struct raft *r,
                                   const struct raft_message *m);

/* election_recv_request_vote answers a RequestVote of r->term. */
void election_recv_request_vote(struct raft *r, const struct raft_message *m);

/* election_recv_request_vote_result counts a vote of r->term. */
void election_recv_request_vote_result(struct raft *r,
                                       const struct raft_message *m);

/* ---- membership.c: the configuration in force (thesis ch. 4) ---- */

/* membership_init sets r->base from @cfg and r->conf from the latest
 * RAFT_ENTRY_CONFIG entry of the log (or base), with the per-server
 * arrays set up. Errors: RAFT_INVALID (bad @cfg configuration),
 * RAFT_CORRUPT (a configuration entry does not decode). */
int membership_init(struct raft *r, const struct raft_config *cfg);

/* membership_check_entries tells whether every RAFT_ENTRY_CONFIG entry of
 * the @n at @entries decodes (0) or not (RAFT_INVALID). */
int membership_check_entries(const struct raft_entry *entries, unsigned n);

/* membership_appended notes that entry @index was appended: a
 * configuration entry comes into force. Its payload was checked. */
void membership_appended(struct raft *r, raft_index index);

/* membership_truncated notes that the log was truncated from @from: a
 * configuration entry deleted falls back to the previous one (the latest
 * left in the log, else base). */
void membership_truncated(struct raft *r, raft_index from);

/* membership_compacting notes, before the log drops its entries through
 * @index, that base becomes the configuration in force at @index
 * (@snapshot when not NULL). */
void membership_compacting(struct raft *r, raft_index index,
                           const struct raft_configuration *snapshot);

/* membership_reset notes that the log was reset to a boundary after an
 * installed snapshot: base is @snapshot (NULL: the configuration in force
 * so far) and is in force. */
void membership_reset(struct raft *r,
                      const struct raft_configuration *snapshot);

/* membership_check_change checks a RAFT_EVENT_CHANGE (raft.h for its
 * errors). */
int membership_check_change(const struct raft *r, const struct raft_event *e);

/* membership_change appends the configuration entry of a checked
 * RAFT_EVENT_CHANGE (room reserved), puts it in force and writes its index
 * to *@out_index. Errors: RAFT_NOMEM (nothing changed). */
int membership_change(struct raft *r, const struct raft_event *e,
                      raft_index *out_index);

/* membership_commit_index returns the largest index a majority of the
 * voters holds (the leader counting its persisted index when it is a
 * voter). */
raft_index membership_commit_index(const struct raft *r);

/* membership_tally tallies @votes (per slot: 1, -1, 0) over the voters. */
enum quorum_vote membership_tally(const struct raft *r, const int8_t *votes);

/* membership_lead sets up a new leader's leaving servers: those of the
 * configuration in force at its commit index that the configuration in
 * force (not committed yet) removed. */
void membership_lead(struct raft *r);

/* membership_unlead forgets the leaving servers (a leader stepping
 * down). */
void membership_unlead(struct raft *r);

/* membership_leaving_tick stops replicating to each leaving server once
 * an election timeout passed since the entry that removed it was seen
 * committed and since its last progress (its match rose, or its state
 * changed), unless a snapshot is on its way to it. */
void membership_leaving_tick(struct raft *r);

/* membership_recall has a leader replicate again to server @id, which
 * is no member but campaigns (thesis §4.2.3: removed while it was down,
 * it never learned it): as a leaving server whose removal committed now,
 * for an election timeout past its last progress (a snapshot on its way
 * keeps it), refreshed while it keeps campaigning, so that it receives
 * its removal, or a snapshot whose configuration leaves it out, and
 * knows it committed. It gets a heartbeat at once. Nothing on a server
 * that does not lead, for a member, or when no slot is left. */
void membership_recall(struct raft *r, raft_id id);

/* membership_after_step makes a leader that is no voter of its committed
 * configuration step down (thesis §4.2.2). */
void membership_after_step(struct raft *r);

/* replication_become_leader sets up progress, appends the NOOP entry of the
 * new term (thesis §6.4) and sends it. */
void replication_become_leader(struct raft *r);

/* replication_tick sends heartbeats when one interval passed, and with
 * check-quorum steps down when no quorum was heard from for an election
 * timeout (leader). */
void replication_tick(struct raft *r);

/* replication_propose appends @n payloads as NORMAL entries of r->term and
 * sends them; returns the index of the first. Room must be reserved. */
raft_index replication_propose(struct raft *r, struct raft_buf *const *bufs,
                               unsigned n);

/* replication_recv_append_entries handles an AppendEntries of r->term. */
void replication_recv_append_entries(struct raft *r,
                                     const struct raft_message *m);

/* replication_recv_append_entries_result handles an answer of r->term. */
void replication_recv_append_entries_result(struct raft *r,
                                            const struct raft_message *m);

/* replication_persisted handles a RAFT_EVENT_PERSISTED. */
void replication_persisted(struct raft *r, raft_index index, raft_term term);

/* replication_compact handles a valid RAFT_EVENT_COMPACT: drops the log
 * through @index (a no-op at or below the boundary). */
void replication_compact(struct raft *r, raft_index index);

/* replication_snapshot_installed handles a valid
 * RAFT_EVENT_SNAPSHOT_INSTALLED (raft.h). */
void replication_snapshot_installed(struct raft *r,
                                    const struct raft_snapshot_event *s);

/* replication_send_all sends every other member what it lacks, as far as
 * its progress allows, then advances the commit index if it can. */
void replication_send_all(struct raft *r);

/* ---- transfer.c: leadership transfer (thesis §3.10) ---- */

/* transfer_check validates a RAFT_EVENT_TRANSFER to @id (raft.h). */
int transfer_check(const struct raft *r, raft_id id);

/* transfer_start starts a valid transfer to @id (0: the most caught-up
 * voter). */
void transfer_start(struct raft *r, raft_id id);

/* transfer_progress sends TimeoutNow to the transferee once it holds the
 * leader's whole log. */
void transfer_progress(struct raft *r);

/* transfer_hand_over sends TimeoutNow to the most caught-up voter when it
 * holds the leader's whole log (a leader stepping down). */
void transfer_hand_over(struct raft *r);

/* transfer_unreachable: the connection to @id broke. A transfer to a
 * picked voter (TRANSFER to 0) moves to the best other voter whose
 * connection is not known broken, or is abandoned when there is none:
 * its TimeoutNow, sent or not, may never arrive. A named transferee is
 * waited for (its connection may come back) until transfer_tick. */
void transfer_unreachable(struct raft *r, raft_id id);

/* transfer_tick abandons a transfer that lasted an election timeout, and
 * moves a transfer to a picked voter (TRANSFER to 0) that has not
 * answered for two heartbeat intervals on to one that has. */
void transfer_tick(struct raft *r);

/* election_recv_timeout_now starts an election at once, without pre-vote,
 * when @r is a voter that is not the leader (thesis §3.10). */
void election_recv_timeout_now(struct raft *r, const struct raft_message *m);

/* replication_snapshot_failed handles RAFT_EVENT_SNAPSHOT_FAILED for the
 * follower in @slot. */
void replication_snapshot_failed(struct raft *r, unsigned slot);

/* replication_snapshot_progress handles RAFT_EVENT_SNAPSHOT_PROGRESS for
 * the follower in @slot. */
void replication_snapshot_progress(struct raft *r, unsigned slot);

/* replication_unreachable handles RAFT_EVENT_UNREACHABLE for the peer in
 * @slot. */
void replication_unreachable(struct raft *r, unsigned slot);

/* ---- contact.c: what this server last heard of its leader ---- */

/* contact_note_append notes the leader_commit of AppendEntries @m, of the
 * current term, received by a server that does not lead, and the time it
 * is known current at: the send time of this server's answer that @m
 * echoes (its arrival when @m echoes nothing: an older leader). */
void contact_note_append(struct raft *r, const struct raft_message *m);

/* contact_step handles RAFT_EVENT_CONTACT from peer @id (raft.h): a
 * follower's leader restarts its election timer, a leader's voter counts
 * in the check-quorum round. Changes no term, vote, log nor index. */
void contact_step(struct raft *r, raft_id id);

/* replication_heartbeat sends follower @slot an empty AppendEntries at
 * its match index, with the commit index (a ReadIndex round's). */
void replication_heartbeat(struct raft *r, unsigned slot);

/* ---- read_index.c: linearizable reads (thesis §6.4) ---- */

/* read_index_check validates a RAFT_EVENT_READ_INDEX (raft.h for its
 * errors). */
int read_index_check(const struct raft *r);

/* read_index_request registers a checked read of @tag, at r->now.
 * Errors: RAFT_NOMEM (nothing changed). */
int read_index_request(struct raft *r, uint64_t tag);

/* read_index_lead notes that this server became leader with the NOOP at
 * @noop: reads wait for it to commit. */
void read_index_lead(struct raft *r, raft_index noop);

/* read_index_ack notes that server @id answered, in the leader's term,
 * the AppendEntries of request number @seq. */
void read_index_ack(struct raft *r, raft_id id, uint64_t seq);

/* read_index_tick fails the reads registered an election timeout ago or
 * more (RAFT_TIMEOUT). */
void read_index_tick(struct raft *r);

/* read_index_begin_step empties the step's output. */
void read_index_begin_step(struct raft *r);

/* read_index_after_step, at the end of every step: a server that does not
 * lead fails every pending read (RAFT_NOTLEADER); a leader hands out the
 * reads of a confirmed round and starts the next round when reads wait
 * and an entry of its term is committed. */
void read_index_after_step(struct raft *r);

/* read_index_close frees the read state. */
void read_index_close(struct raft *r);

#endif /* RAFT_INTERNAL_H */
