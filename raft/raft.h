/* The Raft consensus core: a pure state machine with no I/O, threads, clock
 * or hidden randomness. Events go in through raft_step (time, received
 * messages, proposals, storage completions); each step hands back an update
 * saying what to persist, what to send and what to apply.
 *
 * Sources: Ongaro & Ousterhout, "In Search of an Understandable Consensus
 * Algorithm" (the paper, Figure 2 and §5), Ongaro's thesis (§3, §6.2, §9.6),
 * and etcd-io/raft's Ready/Advance contract (persist before acknowledging).
 *
 * The driver contract (what the caller of raft_step must do with an update):
 *   1. If update.hard_state_changed, the new term and vote must be durable
 *      before any message of that same update is sent. Otherwise messages
 *      may be sent at once, in parallel with the disk write (the leader's
 *      AppendEntries go out while its own fsync runs).
 *   2. update.entries must be written to the durable log in update order,
 *      after deleting every stored entry with index >= entries[0].index (a
 *      conflicting suffix, paper Fig. 2 receiver rule 3). When they and the
 *      hard state are durable, step a RAFT_EVENT_PERSISTED with the index and
 *      term of the last entry written. The core acknowledges entries to the
 *      leader, and the leader counts its own vote, only after that event.
 *   3. update.committed entries are committed and durable on this node; apply
 *      them in order. They are never handed out twice by one raft instance.
 *
 * Threads: a struct raft is used by one thread at a time (the loop thread in
 * the node runtime); several instances may live in one process. */

#ifndef RAFT_H
#define RAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

typedef uint64_t raft_term;  /* election term, 0 before the first */
typedef uint64_t raft_index; /* log index, first entry is 1; 0 means none */
typedef uint64_t raft_id;    /* server id, > 0 */

/* Roles of a server (paper §5.1). A server running a pre-vote round
 * (thesis §9.6) has not started an election: it is still a FOLLOWER. */
enum raft_role {
    RAFT_FOLLOWER = 1,
    RAFT_CANDIDATE = 2,
    RAFT_LEADER = 3,
};

/* Entry types. NORMAL carries an application payload; NOOP is the empty
 * entry each new leader appends to commit entries of earlier terms (paper
 * §5.4.2, thesis §6.4); CONFIG carries an encoded struct
 * raft_configuration (configuration.h), which every server uses as soon
 * as it is in its log, committed or not (thesis §4.1). */
enum raft_entry_type {
    RAFT_ENTRY_NORMAL = 1,
    RAFT_ENTRY_NOOP = 2,
    RAFT_ENTRY_CONFIG = 3,
};

/* The most servers (voters and learners) a configuration may hold. */
#define RAFT_MAX_SERVERS 16

/* The most voters a configuration may hold (every server may vote). */
#define RAFT_MAX_VOTERS RAFT_MAX_SERVERS

/* The longest server address, bytes (without the terminating NUL). */
#define RAFT_ADDRESS_MAX 255

/* Roles of a server in a configuration (thesis §4.2.1). A learner receives
 * the log and snapshots, never campaigns once its configuration is known
 * committed, and never counts toward any quorum (commit, election,
 * check-quorum). Like any server it answers RequestVote when asked (as
 * etcd's learners do: it may be a voter of the candidate's newer
 * configuration without knowing it yet); its grant counts only where it
 * is a voter. */
enum raft_server_role {
    RAFT_VOTER = 1,
    RAFT_LEARNER = 2,
};

/* One server of a configuration. The core only carries @address and
 * @auto_promote (a leader's driver promotes such a learner once it caught
 * up, thesis §4.2.1; replicated with the configuration, so that a new
 * leader does too). */
struct raft_server {
    raft_id id;                         /* > 0 */
    uint8_t role;                       /* enum raft_server_role */
    bool auto_promote;                  /* a learner to promote to voter
                                           once caught up (learners only) */
    char address[RAFT_ADDRESS_MAX + 1]; /* opaque, NUL-terminated */
};

/* A configuration: the servers of the group (configuration.h has its
 * functions and codec). Fixed-size: plain assignment copies it. */
struct raft_configuration {
    unsigned n;                                   /* servers, at most
                                                     RAFT_MAX_SERVERS */
    struct raft_server servers[RAFT_MAX_SERVERS]; /* in order of addition */
};

/* One log entry. @data is NULL for an empty payload. Whoever stores an entry
 * beyond the call that handed it over takes its own reference to @data. */
struct raft_entry {
    raft_term term;        /* term of the leader that created it */
    raft_index index;      /* position in the log */
    uint8_t type;          /* enum raft_entry_type */
    struct raft_buf *data; /* payload, NULL when empty */
};

/* The state that must survive a restart (paper Fig. 2 "persistent state"),
 * besides the log itself. */
struct raft_hard_state {
    raft_term term; /* currentTerm */
    raft_id vote;   /* votedFor in @term, 0 for none */
};

/* Message types: Raft's RPCs and their answers (paper Fig. 2) and
 * TimeoutNow (thesis §3.10), the only messages the core sends and
 * receives. What else servers send each other (forwarded client requests,
 * snapshot chunks) belongs to the node runtime and travels in frames of
 * its own (frame.h), which share the wire's type byte with these: 1..4 and
 * 9 are the core's, 5..8 the runtime's. */
enum raft_message_type {
    RAFT_MSG_REQUEST_VOTE = 1,
    RAFT_MSG_REQUEST_VOTE_RESULT = 2,
    RAFT_MSG_APPEND_ENTRIES = 3,
    RAFT_MSG_APPEND_ENTRIES_RESULT = 4,
    RAFT_MSG_TIMEOUT_NOW = 9,
};

/* RequestVote (paper Fig. 2; pre-vote, thesis §9.6). */
struct raft_request_vote {
    raft_term term;            /* candidate's term (the next term for a
                                  pre-vote, which does not change it) */
    raft_index last_log_index; /* index of candidate's last log entry */
    raft_term last_log_term;   /* term of candidate's last log entry */
    bool pre_vote;             /* true for a pre-vote request */
    bool disrupt;              /* true for the election a leadership
                                  transfer started (TimeoutNow): it
                                  overrides leader stickiness */
};

/* RequestVote response. */
struct raft_request_vote_result {
    raft_term term;    /* responder's current term (or the request's term
                          when answering a pre-vote it grants) */
    bool vote_granted; /* true when the vote is granted */
    bool pre_vote;     /* true when answering a pre-vote */
};

/* AppendEntries (paper Fig. 2). With no entries it is a heartbeat. The
 * entries array and their bufs belong to the sender of the message (the core
 * for outgoing messages, the decoder for incoming ones). @seq numbers the
 * leader's AppendEntries to one follower (increasing, never 0); the answer
 * echoes it, which lets the leader handle answers in request order and
 * ignore answers to a window it has reset (raft/progress.h). */
struct raft_append_entries {
    raft_term term;             /* leader's term */
    raft_index prev_log_index;  /* index of the entry before the new ones */
    raft_term prev_log_term;    /* term of that entry */
    raft_index leader_commit;   /* leader's commit index */
    struct raft_entry *entries; /* new entries, n_entries long */
    uint32_t n_entries;         /* number of entries, 0 for a heartbeat */
    uint64_t seq;               /* request number, echoed by the answer */
    uint32_t quorum_contact;    /* ms since the leader last heard a
                                   quorum of voters when it sent this
                                   (raft_quorum_contact, capped at
                                   UINT32_MAX): leader_commit is known
                                   current as of then (wire version 6;
                                   0 from an older leader) */
    uint64_t echo;              /* the sent_at of the latest answer the
                                   leader took from this follower in
                                   its term when it sent this,
                                   RAFT_ECHO_NONE when it took none yet
                                   (wire version 7; 0 from an older
                                   leader) */
};

/* The echo of an AppendEntries whose leader took no answer from the
 * follower in its term yet (raft_append_entries.echo). */
#define RAFT_ECHO_NONE UINT64_MAX

/* AppendEntries response. On success @last_log_index is the index of the
 * last entry the follower now holds durably that matches the request. On
 * rejection @reject_index is the request's prev_log_index and
 * @last_log_index the follower's last log index; when the follower holds an
 * entry at prev_log_index of another term, @conflict_index is the first
 * index of that conflicting term in its log (never at or below its commit
 * index), else 0. With these hints the leader skips a whole term per round
 * trip instead of one entry (paper §5.3, "the follower can include the term
 * of the conflicting entry and the first index it stores for that term").
 * @seq is the @seq of the request answered; a success sent when entries
 * became durable carries the highest @seq the follower accepted from that
 * leader, and the acknowledgement of an installed snapshot carries 0. A
 * success is cumulative: whatever request it answers, the follower holds
 * the leader's entries through @last_log_index durably. */
struct raft_append_entries_result {
    raft_term term;            /* responder's current term */
    bool success;              /* true when the entries matched */
    raft_index reject_index;   /* prev_log_index of a rejected request */
    raft_index last_log_index; /* see above */
    raft_index conflict_index; /* rejection: first index of the
                                  conflicting term, 0 when none */
    uint64_t seq;              /* the answered request's seq, or 0 */
    uint64_t sent_at;          /* the responder's TICK clock (ms) when
                                  it sent this, plus one, which its
                                  leader echoes (wire version 7; 0
                                  from an older responder) */
};

/* TimeoutNow (thesis §3.10): the leader, transferring its leadership,
 * tells an up-to-date voter to start an election at once, without a
 * pre-vote round. */
struct raft_timeout_now {
    raft_term term; /* leader's term */
};

/* A message of the core, between two servers. */
struct raft_message {
    uint8_t type; /* enum raft_message_type */
    raft_id from; /* sender id */
    raft_id to;   /* receiver id */
    union {
        struct raft_request_vote request_vote;
        struct raft_request_vote_result request_vote_result;
        struct raft_append_entries append_entries;
        struct raft_append_entries_result append_entries_result;
        struct raft_timeout_now timeout_now;
    };
};

/* raft_message_term returns the term @m carries; 0 for a type the core
 * does not have. Any thread. */
raft_term raft_message_term(const struct raft_message *m);

/* Static configuration of one server. Times are in milliseconds of the
 * clock carried by RAFT_EVENT_TICK.
 *
 * The cluster configuration in force (thesis §4.1) is the latest
 * RAFT_ENTRY_CONFIG entry of the log, committed or not; when the log holds
 * none, it is the one of the compacted prefix: @configuration when given
 * (the snapshot's, which the driver reads from the state machine), else
 * @voters, all voters (a driver without membership: today's static
 * cluster). This server need not be a member: a server that joins (empty
 * log, empty configuration), a learner, or one that was removed never
 * campaigns once its configuration is known committed (raft_self_role
 * says why: 0 not a member, RAFT_LEARNER), and takes AppendEntries and
 * snapshots from any leader. While the configuration that demotes or
 * removes it is not known committed, it may still campaign (hashicorp's
 * rule: the voters may need it to commit that entry); it then leads
 * without counting itself and steps down once the entry commits. A server
 * whose configuration is empty grants no vote and no pre-vote (it may be
 * a voter whose state was lost); one with a configuration votes, member
 * or not. */
struct raft_config {
    raft_id id;                  /* this server's id, > 0 */
    const raft_id *voters;       /* ids of all voting servers, n_voters
                                    (NULL when 0), used when
                                    @configuration is NULL */
    unsigned n_voters;           /* 0..RAFT_MAX_VOTERS */
    unsigned election_timeout;   /* ms; the actual timeout is randomized in
                                    [election_timeout, 2*election_timeout) */
    unsigned heartbeat_interval; /* ms, < election_timeout */
    uint64_t max_size_per_msg;   /* max payload bytes in one AppendEntries
                                    (at least one entry is always sent) */
    unsigned max_inflight_msgs;  /* pipelined AppendEntries per follower */
    uint64_t seed;               /* seed of the core's own PRNG */
    bool disable_pre_vote;       /* false (the default): an election starts
                                    with a pre-vote round that does not
                                    raise any term (thesis §9.6) */
    bool disable_check_quorum;   /* false (the default): a leader that did
                                    not hear from a quorum within an
                                    election timeout steps down, and a
                                    server that heard from its leader within
                                    the minimum election timeout ignores
                                    RequestVote (leader stickiness, thesis
                                    §6.2 and §9.6) */
    uint64_t max_inflight_bytes; /* most payload bytes of AppendEntries in
                                    flight to one follower, 0 unlimited
                                    (one entry larger than it still goes,
                                    alone) */
    const struct raft_configuration *configuration; /* the configuration
                                    of the compacted prefix (the
                                    snapshot's), or NULL: @voters; copied */
};

/* Replication state of one follower, as seen by a leader (etcd tracker). */
enum raft_progress_state {
    RAFT_PROGRESS_PROBE = 1,     /* one AppendEntries at a time */
    RAFT_PROGRESS_REPLICATE = 2, /* pipelined, up to max_inflight_msgs */
    RAFT_PROGRESS_SNAPSHOT = 3,  /* needs a snapshot (its entries were
                                    compacted): heartbeats only */
};

/* Event types fed to raft_step. */
enum raft_event_type {
    RAFT_EVENT_TICK = 1,      /* time passed: @tick.now is the clock, ms */
    RAFT_EVENT_RECEIVE = 2,   /* a message arrived: @receive */
    RAFT_EVENT_PROPOSE = 3,   /* append payloads to the log: @propose */
    RAFT_EVENT_PERSISTED = 4, /* the log through @persisted is durable */
    RAFT_EVENT_COMPACT = 5,   /* the log through @compact.index is in a
                                 snapshot and was deleted from storage:
                                 drop it from memory */
    RAFT_EVENT_SNAPSHOT_INSTALLED = 6, /* follower: @snapshot is installed
                                          and the durable log reset */
    RAFT_EVENT_SNAPSHOT_FAILED = 7,    /* leader: sending a snapshot to
                                          @unreachable.id failed */
    RAFT_EVENT_UNREACHABLE = 8,        /* the connection to @unreachable.id
                                          broke: reset its inflight window */
    RAFT_EVENT_STORAGE_STALLED = 9,    /* the driver cannot persist (or can
                                          again): @storage.stalled */
    RAFT_EVENT_CHANGE = 10,            /* leader: change the configuration
                                          by one server: @change */
    RAFT_EVENT_TRANSFER = 11,          /* leader: hand leadership to
                                          @transfer.id (thesis §3.10) */
    RAFT_EVENT_DECLINE = 12,           /* ignore TimeoutNow (or take it
                                          again): @decline.on */
    RAFT_EVENT_READ_INDEX = 13,        /* leader: a linearizable read,
                                          @read_index.tag (thesis §6.4) */
    RAFT_EVENT_CONTACT = 14,           /* peer @contact.id is alive, in the
                                          middle of a message: liveness
                                          only (see below) */
    RAFT_EVENT_SNAPSHOT_PROGRESS = 15, /* leader: the snapshot to
                                          @unreachable.id is on its way */
};

/* Kinds of RAFT_EVENT_CHANGE: each changes one server (thesis §4.1). */
enum raft_change_kind {
    RAFT_CHANGE_ADD = 1,            /* add @id at @address as @role */
    RAFT_CHANGE_REMOVE = 2,         /* remove @id */
    RAFT_CHANGE_PROMOTE = 3,        /* make learner @id a voter */
    RAFT_CHANGE_DEMOTE = 4,         /* make voter @id a learner */
    RAFT_CHANGE_UPDATE_ADDRESS = 5, /* give @id the address @address */
};

/* The snapshot events in detail.
 *
 * COMPACT {index}: the driver put the state machine through @index in a
 * snapshot and deleted the durable log through @index. @index must be at
 * most the last index handed out as committed (or the applied index given
 * to raft_new) and at most the persisted index, else RAFT_INVALID; an
 * @index at or below the current boundary changes nothing. The core drops
 * its entries through @index, remembers the term of entry @index (so an
 * AppendEntries whose prev_log_index is @index still matches) and
 * raft_first_index becomes @index + 1. A leader then offers a snapshot
 * (update.snapshot_to) to each follower that needs a compacted entry.
 *
 * SNAPSHOT_INSTALLED {leader, term, index, last_term}: when @index is above
 * the last index handed out as committed, the driver has already installed the
 * snapshot in the state machine and changed the durable log in the same
 * storage step, by paper §7: if the durable log holds entry @index of term
 * @last_term, it deleted the log through @index only (the entries after it are
 * the leader's and may be committed copies: keep them); otherwise it reset the
 * log to an empty one that starts after @index (the entries of a write of an
 * earlier update that completes after such a reset must be dropped, all of
 * them: they belong to the log that was reset, even those that would follow it
 * contiguously; the core ignores PERSISTED events for entries it no longer
 * holds; raft_snapshot_resets_log tells the driver beforehand). The core does
 * the same to its log (it holds entry @index of @last_term durably exactly
 * when the durable log does), takes (@index, @last_term) as its boundary and
 * never hands out entries up to @index. When @index is not above that index
 * the core changes nothing, and the durable log must be unchanged or compacted
 * through @index only (a repair: the driver replaced the state machine with a
 * snapshot at an index it had handed out already, and compacted as for
 * COMPACT); the driver then steps COMPACT {@index} after this event so the
 * core drops the same prefix. Either way, when @term is not below the current
 * term (a higher one is adopted, as from any message) the core answers @leader
 * with a successful AppendEntries result of last_log_index @index and seq 0. A
 * leader or candidate that gets this event steps down. @configuration, when
 * not NULL, is the snapshot's configuration: it becomes the one of the
 * compacted prefix, in force unless a later RAFT_ENTRY_CONFIG entry is kept
 * (NULL keeps the one the core had, as a driver without membership does).
 * Errors: RAFT_INVALID (@leader is 0 or this server, @index is 0, the server
 * leads @term itself, or @configuration is not valid). @leader need not be a
 * member: a joining server learns its first configuration so.
 *
 * SNAPSHOT_FAILED {unreachable.id}: the leader's driver could not deliver
 * the snapshot it was asked for: the follower goes back to probing and is
 * offered a snapshot again no sooner than a heartbeat interval later.
 * Ignored unless this server leads and the follower waits for a snapshot.
 *
 * SNAPSHOT_PROGRESS {unreachable.id}: the leader's driver is still
 * delivering the snapshot it was asked for (its chunks are acknowledged,
 * or the follower installs the file): the follower's SNAPSHOT state
 * counts it as progress, so that it does not expire (after 10 election
 * timeouts without progress the core takes the snapshot for lost and
 * probes again, and the follower then holds nothing of the log: a large
 * snapshot, or a paced one, takes longer than that). The driver steps it
 * while its transfer runs and the follower is connected, and
 * SNAPSHOT_FAILED when the transfer fails.
 * Ignored unless this server leads and the follower waits for a
 * snapshot.
 *
 * UNREACHABLE {unreachable.id}: the connection to that peer broke. A
 * leader resets the peer's inflight window and probes it again; a
 * follower waiting for a snapshot is left alone (its driver reports
 * SNAPSHOT_FAILED). Ignored when not leading.
 * Errors (all three): RAFT_INVALID when the id is 0 or this server's. An id
 * that is not a member (any more) is ignored.
 *
 * STORAGE_STALLED {stalled}: true when the driver has been unable to
 * persist for a while (a full log or disk whose writes it keeps retrying,
 * or a write error it cannot recover from); false once a write succeeds
 * again. While stalled, a leader or candidate becomes a follower of its
 * term that knows no leader, and the server starts no election (nor
 * pre-vote round): a server that cannot make its own entries durable
 * cannot commit them, and leading would only stop the others from electing
 * a leader that can (its followers' heartbeats keep arriving, so they would
 * never time out). It still answers RequestVote and AppendEntries (their
 * answers wait for the disk, driver rules 1 and 2). Clearing it restarts
 * the election timer. Never an error.
 *
 * DECLINE {on}: while on, this server ignores TimeoutNow: a leader's
 * transfer to it times out and that leader serves again. The driver sets
 * it while its state machine cannot serve (a diverged replica: it asks
 * the application, uv_node.h's diverged callback), so that a leadership
 * handed on lands on a healthy server. It changes nothing else: the server still votes and campaigns
 * on an election timeout (a TimeoutNow may be lost anyway, so ignoring
 * one is always safe). Never an error.
 *
 * CHANGE {kind, id, role, address}: the leader appends a RAFT_ENTRY_CONFIG
 * entry holding its configuration changed by one server (thesis §4.1: any
 * two consecutive configurations then share a majority), in force at once;
 * update.proposed_index is its index: the change is done once that index
 * is committed. Ongaro's fix (raft-dev, 2015): the leader appends one only
 * once an entry of its own term is committed (its NOOP), and only one
 * configuration entry may be uncommitted at a time. ADD of a learner
 * with @auto_promote marks it so in the configuration; PROMOTE and DEMOTE
 * clear the mark. A leader that removes
 * or demotes itself keeps leading, without counting itself, until the
 * entry commits, then steps down (thesis §4.2.2). A server it removes
 * keeps receiving AppendEntries (counting for nothing) until the entry is
 * committed and an election timeout more (raft_leaving): it learns so
 * that it was removed, and never campaigns again; one that was down then
 * and campaigns later is replicated to again (raft_leaving).
 * A change of the voters (ADD of a voter, PROMOTE, DEMOTE, REMOVE of a
 * voter) is refused while a majority of the voters it leaves is not
 * known to hold a configuration (this leader, and followers that
 * acknowledged an entry in its term): a server without one grants no
 * vote, so a voter promoted or added before it received anything could
 * leave a configuration that elects nobody.
 * Errors: RAFT_NOTLEADER; RAFT_BUSY (a configuration entry is not
 * committed yet, no entry of this term is, a transfer runs, or the
 * voters it leaves could elect nobody, as above);
 * RAFT_NOTFOUND (REMOVE, PROMOTE, DEMOTE or UPDATE_ADDRESS of a server
 * that is not a member); RAFT_INVALID (unknown kind or role, id 0, ADD of
 * a voter with @auto_promote, ADD of
 * a member, an address too long, ADD to a configuration of
 * RAFT_MAX_SERVERS servers, PROMOTE of a voter, DEMOTE of a learner,
 * REMOVE or DEMOTE of the last voter).
 *
 * TRANSFER {id}: leadership transfer (thesis §3.10). The leader refuses
 * proposals and changes (RAFT_BUSY) while it brings @id (0: the voter with
 * the highest match index) up to date, then sends it TimeoutNow; @id
 * starts an election at once, without a pre-vote round, and its
 * RequestVote overrides leader stickiness. After an election timeout
 * without a new leader the transfer is abandoned and the leader resumes.
 * Errors: RAFT_NOTLEADER; RAFT_BUSY (a transfer runs already);
 * RAFT_NOTFOUND (@id is not a member, or @id is 0 and there is no other
 * voter); RAFT_INVALID (@id is this server or a learner). */

/* READ_INDEX {tag}: ReadIndex (thesis §6.4, raft/read_index.c). The
 * leader registers a read of @tag, a number of the caller's, and hands it
 * back in a later (or this) update's @reads: with status 0 and the read
 * index once an entry of its term is committed (it waits for its NOOP)
 * and a quorum of voters answered an AppendEntries sent after the read
 * index was taken (one heartbeat round serves every read registered
 * before it started; a single voter needs none). A read of the state
 * machine that has applied the log through that index is linearizable.
 * A read fails (status, index 0) with RAFT_NOTLEADER when this server
 * stops leading, or RAFT_TIMEOUT when no quorum confirmed it within an
 * election timeout of its registration. Every read registered comes back
 * exactly once, unless raft_close comes first.
 * Errors: RAFT_NOTLEADER (not the leader: nothing registered); RAFT_BUSY
 * (4096 reads pending already); RAFT_NOMEM. */

/* CONTACT {id}: the driver saw peer @id alive while no whole message of
 * it arrived: bytes of a frame from @id are arriving, or @id is taking
 * bytes that waited for it (its TCP window opened while a backlog was
 * queued to it, so its process reads). A large entry takes seconds to
 * cross, and the heartbeats queued behind it on the same connection
 * cannot arrive sooner; without this event the follower's election timer
 * and the leader's check-quorum would fire in the middle of a transfer
 * that is going well. Step it at most once per tick per peer (it costs
 * one comparison), before the TICK.
 *   - On a follower that knows @id as the leader of its term: the
 *     election timer restarts, and @id counts as heard for leader
 *     stickiness (election_in_lease), as a heartbeat would. It does not
 *     count for raft_leader_contact: no commit index arrived, so local
 *     reads do not become any fresher.
 *   - On a leader: voter @id counts as heard in the current
 *     check-quorum round, and a follower in REPLICATE whose window waits
 *     for answers is not taken for one that lost them (no re-probe,
 *     which would send the large entry again). It does not count for
 *     raft_quorum_contact nor for last_contact (no answer arrived). It
 *     clears UNREACHABLE's mark: a transfer may pick @id again (the
 *     driver also steps it when a leader's connection to @id comes
 *     back).
 *   - Otherwise (a candidate, a follower that knows another leader or
 *     none, a server that is not tracked): nothing.
 * Why it is safe: it changes no term, vote, log, commit index nor
 * progress index, and sends nothing; it only delays an election or a
 * step-down, which Raft's safety never depends on (paper §5.2: timers
 * are for liveness). How long it may delay one: only while @id keeps
 * sending or reading bytes on this very connection; a leader that was
 * deposed learns the higher term from the first whole message that
 * arrives, and bytes stop when a process stops or the network cuts.
 * A follower that moved to a newer term may still read the old leader's
 * bytes, and so keep it in its check-quorum round until that frame
 * ends: its answer then carries the newer term, which deposes it.
 * Errors: RAFT_INVALID when @id is 0 or this server's. */

/* RAFT_EVENT_SNAPSHOT_INSTALLED's fields. */
struct raft_snapshot_event {
    raft_id leader;      /* leader that sent it */
    raft_term term;      /* that leader's term */
    raft_index index;    /* the snapshot's last index */
    raft_term last_term; /* term of that entry */
    const struct raft_configuration *configuration; /* the snapshot's
                            configuration (copied), or NULL: unknown to
                            the driver */
};

/* One input to the core. For RECEIVE and PROPOSE, the core takes its own
 * references to any bufs it keeps; the caller keeps and drops its own. */
struct raft_event {
    uint8_t type; /* enum raft_event_type */
    union {
        struct {
            uint64_t now; /* monotonic clock, ms, never decreasing */
        } tick;
        struct raft_message receive;
        struct {
            struct raft_buf *const *bufs; /* payloads, one entry each */
            unsigned n;                   /* number of payloads, >= 1 */
        } propose;
        struct {
            raft_index index; /* last entry written durably */
            raft_term term;   /* term of that entry */
        } persisted;
        struct {
            raft_index index; /* new snapshot boundary, <= handed out
                                 and <= persisted index */
        } compact;
        struct raft_snapshot_event snapshot;
        struct {
            raft_id id; /* the follower or peer concerned */
        } unreachable;
        struct {
            bool stalled; /* true: cannot persist; false: can again */
        } storage;
        struct {
            bool on; /* true: ignore TimeoutNow; false: take it */
        } decline;
        struct {
            uint8_t kind;        /* enum raft_change_kind */
            raft_id id;          /* the server changed */
            uint8_t role;        /* ADD: RAFT_VOTER or RAFT_LEARNER */
            bool auto_promote;   /* ADD of a learner: to be promoted once
                                    caught up (struct raft_server) */
            const char *address; /* ADD, UPDATE_ADDRESS: NUL-terminated,
                                    at most RAFT_ADDRESS_MAX bytes, NULL
                                    for none; copied */
        } change;
        struct {
            raft_id id; /* the voter to lead, 0: the most caught-up one */
        } transfer;
        struct {
            uint64_t tag; /* the caller's, handed back in update.reads */
        } read_index;
        struct {
            raft_id id; /* the peer seen alive */
        } contact;
    };
};

/* A read of RAFT_EVENT_READ_INDEX handed back (see there): ready with
 * status 0 at @index, or failed with @status. */
struct raft_read {
    uint64_t tag;     /* as registered */
    raft_index index; /* status 0: the read index, else 0 */
    int status;       /* 0, RAFT_NOTLEADER or RAFT_TIMEOUT */
};

/* The output of one raft_step. All arrays point into memory owned by the
 * core and stay valid until the next raft_step or raft_close on the same
 * instance; take references to entry bufs that must live longer. */
struct raft_update {
    bool hard_state_changed;           /* persist @hard_state (rule 1) */
    struct raft_hard_state hard_state; /* the new term and vote */
    const struct raft_entry *entries;  /* to persist (rule 2), n_entries */
    unsigned n_entries;
    const struct raft_message *messages; /* to send, n_messages */
    unsigned n_messages;
    const struct raft_entry *committed; /* to apply (rule 3), n_committed */
    unsigned n_committed;
    raft_index proposed_index;     /* PROPOSE: index of the first new entry */
    raft_term proposed_term;       /* PROPOSE: term of the new entries */
    const raft_id *snapshot_to;    /* leader: followers that need a snapshot
                                   (the entries they lack were compacted);
                                   the driver streams one to each and
                                   steps SNAPSHOT_FAILED if it cannot.
                                   Each id comes once per SNAPSHOT state
                                   of that follower */
    unsigned n_snapshot_to;        /* number of ids in @snapshot_to */
    const struct raft_read *reads; /* reads ready or failed (READ_INDEX),
                                      n_reads, in registration order */
    unsigned n_reads;
    bool configuration_changed; /* the configuration in force changed
                                   (an entry appended or truncated, a
                                   snapshot installed, a change):
                                   raft_current_configuration has it;
                                   or the leaving servers did
                                   (raft_leaving) */
};

struct raft; /* opaque */

/* raft_new creates a core from its configuration and from what was durable
 * at the last stop: @hs (NULL for a fresh server), and the log @entries,
 * n_entries long, contiguous, whose first index is @first_index (entries
 * before it were compacted into a snapshot; pass 1 for a full log). The core
 * keeps its own copy of @cfg's arrays and references to the entry bufs.
 * @applied is the last index already applied to the state machine: the
 * core never hands those out as committed again. The new core is a
 * follower of term hs->term. Writes *out only on success.
 * Errors: RAFT_NOMEM; RAFT_INVALID when @cfg is inconsistent (id 0, zero
 * or duplicate voter ids, heartbeat >= election timeout, too many voters,
 * an invalid @configuration) or the entries are not contiguous from
 * @first_index; RAFT_CORRUPT when a RAFT_ENTRY_CONFIG entry does not
 * decode. */
int raft_new(const struct raft_config *cfg, const struct raft_hard_state *hs,
             raft_index first_index, const struct raft_entry *entries,
             unsigned n_entries, raft_index applied, struct raft **out);

/* raft_restore is raft_new for a log whose prefix was compacted into a
 * snapshot: the snapshot reflects the log up to @snapshot_index, whose
 * entry had term @snapshot_term, and @entries (n_entries, possibly 0)
 * start at @snapshot_index + 1. The core's first index is then
 * @snapshot_index + 1, and an AppendEntries whose prev_log_index is
 * @snapshot_index matches when its prev_log_term is @snapshot_term.
 * raft_new(first_index) is raft_restore(first_index - 1, term 0): the
 * boundary's term unknown. Writes *out only on success.
 * Errors: as raft_new; also RAFT_INVALID when @applied < @snapshot_index
 * (the state machine lacks entries the log no longer has). */
int raft_restore(const struct raft_config *cfg,
                 const struct raft_hard_state *hs, raft_index snapshot_index,
                 raft_term snapshot_term, const struct raft_entry *entries,
                 unsigned n_entries, raft_index applied, struct raft **out);

/* raft_close frees the core and every reference it holds. NULL is ignored. */
void raft_close(struct raft *r);

/* raft_step feeds one event to the core and fills @update (which the caller
 * provides; its previous contents are ignored) with what to do next, as
 * described at the top of this file. On an error nothing changed and
 * @update is empty.
 * Errors: RAFT_NOTLEADER (PROPOSE, CHANGE, TRANSFER or READ_INDEX on a
 * non-leader); RAFT_BUSY (READ_INDEX: see above);
 * RAFT_BUSY (PROPOSE while a transfer runs; CHANGE and TRANSFER: see
 * above); RAFT_NOTFOUND (CHANGE, TRANSFER: see above); RAFT_INVALID
 * (malformed event, e.g. a message not addressed to this server, or a
 * configuration entry that does not decode); RAFT_NOMEM. */
int raft_step(struct raft *r, const struct raft_event *event,
              struct raft_update *update);

/* Accessors, for status reports and tests. Same thread as raft_step. */
enum raft_role raft_role(const struct raft *r);
raft_term raft_current_term(const struct raft *r);
raft_id raft_leader_id(const struct raft *r); /* 0 when unknown */
raft_index raft_commit_index(const struct raft *r);
raft_index raft_last_index(const struct raft *r);
raft_index raft_first_index(const struct raft *r);
raft_index raft_persisted_index(const struct raft *r);
raft_index raft_snapshot_index(const struct raft *r); /* first - 1 */
raft_term raft_snapshot_term(const struct raft *r);   /* its term, 0 unknown */
/* The term of the entry at @index in this server's log (the snapshot
 * term at the snapshot's index), 0 when unknown: compacted, or past the
 * last index. */
raft_term raft_term_at(const struct raft *r, raft_index index);
bool raft_storage_stalled(const struct raft *r); /* STORAGE_STALLED state */
bool raft_declining(const struct raft *r);       /* DECLINE state */
/* Whether the current term is durable: false only for a leader elected
 * by its own vote alone, until an entry of its term is persisted; a
 * crash before then may bring it back in an earlier term, to lead this
 * term again. Nothing of the term goes out before (driver rule 2): a
 * runtime's grant under this leadership neither (ext/runtime/lease.c). */
bool raft_term_durable(const struct raft *r);

/* An AppendEntries that contradicts this server's committed history: at
 * an index it holds committed (its snapshot's boundary, or a committed
 * entry of its log) the leader's entry has another term. Under the
 * protocol it never happens (Log Matching and Leader Completeness, paper
 * §5.3 and §5.4); it does when two groups of servers each think they
 * founded the cluster, or a server's state was replaced behind the
 * protocol's back. The core drops such a message, unanswered, so the
 * committed state stays as it is. */
struct raft_conflict {
    raft_id leader;        /* the sender */
    raft_term leader_term; /* the term of its AppendEntries */
    raft_index index;      /* where the two histories contradict */
    raft_term ours;        /* our term there */
    raft_term theirs;      /* the leader's term there */
    bool snapshot;         /* @index is our snapshot's boundary (else an
                              entry of our log at or below our commit
                              index) */
};

/* raft_conflicts returns how many AppendEntries this core dropped since it
 * was created because they contradict its committed history (struct
 * raft_conflict), and writes the latest into *@out when there was one and
 * @out is not NULL. Same thread as raft_step. */
uint64_t raft_conflicts(const struct raft *r, struct raft_conflict *out);

/* raft_current_configuration returns the configuration in force (the
 * latest in the log, thesis §4.1); valid until the next raft_step or
 * raft_close. raft_configuration_index returns the index of the entry that
 * holds it, 0 when it is the compacted prefix's. raft_self_role returns
 * this server's role in it (enum raft_server_role), 0 when it is not a
 * member (a joining server that has not received its configuration yet,
 * or a removed one): with RAFT_LEARNER, why it does not campaign (see
 * struct raft_config). */
const struct raft_configuration *raft_current_configuration(
    const struct raft *r);
raft_index raft_configuration_index(const struct raft *r);
uint8_t raft_self_role(const struct raft *r);

/* raft_leaving returns the servers this leader still replicates to
 * though the configuration in force no longer holds them (thesis §4.2.2,
 * as etcd and hashicorp do): each was removed by an entry that is not
 * committed yet, or was seen committed less than an election timeout ago
 * (counted from its last progress until it holds that entry, and never
 * while a snapshot is on its way to it), so that the server receives that entry, learns that it
 * committed, and stops campaigning. A server that is no member and asks
 * this leader for a vote (a pre-vote too), of a term not ahead of its
 * own, was removed without learning it (down at the time): it is
 * recalled into this list as one whose removal just committed, for as
 * long as it campaigns, with an empty address (the driver reaches it over
 * the connection it opened). They count for nothing. Empty unless this
 * server leads. Valid until the next raft_step or raft_close. */
const struct raft_configuration *raft_leaving(const struct raft *r);

/* raft_transferee returns the voter this leader transfers its leadership
 * to, 0 when no transfer runs. */
raft_id raft_transferee(const struct raft *r);

/* raft_leader_contact returns how long ago, in ms of the TICK clock, this
 * server last heard from the leader of its term: 0 on the leader itself,
 * UINT64_MAX when it knows no leader. */
uint64_t raft_leader_contact(const struct raft *r);

/* raft_quorum_contact returns how long ago, in ms of the TICK clock, a
 * quorum of the voters in force was last known to follow this leader,
 * itself counted as now: the quorum-th most recent contact of this term,
 * where a voter's contact is the time the leader SENT the newest
 * AppendEntries (heartbeat or not) it answered (its seq echoed), not the
 * time the answer arrived, so that an answer delayed in transit does not
 * keep a leader cut off from the majority fresh (a voter that granted
 * its vote and has answered nothing yet counts from the campaign's
 * start; the send time is known within a quarter heartbeat, earlier,
 * for answers up to eight heartbeat intervals old at least, and an older
 * one counts for nothing). The voters check-quorum counts (contact.c),
 * but check-quorum itself keeps counting arrivals, as etcd does: it is
 * about liveness. UINT64_MAX on a server that does not lead, and while
 * no quorum is known to follow it (a voter added since the election
 * that has not answered). Same thread as raft_step. */
uint64_t raft_quorum_contact(const struct raft *r);

/* raft_leader_commit returns the highest commit index a leader told this
 * server (the leader_commit of the AppendEntries it received since
 * start, of any term: every one was committed), at least this server's
 * own commit index (a snapshot installed may carry it further); the
 * commit index on the leader itself. 0 before any contact. Same thread as
 * raft_step. */
raft_index raft_leader_commit(const struct raft *r);

/* raft_leader_commit_contact returns how long ago, in ms of the TICK
 * clock, the commit index the leader of this server's term told it
 * (raft_leader_commit) is known to have been current: a round trip
 * timed by this server's own clock. Each AppendEntries answer carries
 * its send time (sent_at); the leader echoes the latest it took in its
 * next AppendEntries or heartbeat (echo), whose commit index was
 * current after that answer went, so the time the leader's messages
 * spend in transit counts against the bound (wire version 7). The
 * newest echo counts; an AppendEntries that echoes no answer of this
 * term yet (RAFT_ECHO_NONE: a new leader's first), or a time ahead of
 * this server's clock (a clock that restarted), tells no time. A leader
 * of wire version 6 or older echoes nothing (echo 0): its
 * AppendEntries' arrival counts, as before version 7, and a link slow
 * from it lets this server be up to that link's delay staler than it
 * says. 0 on the leader itself, UINT64_MAX when no leader is known or
 * the leader of this term has told it no time yet. Unlike raft_leader_contact,
 * a snapshot's chunks do not count: they carry no commit index, and the
 * snapshot's last index may lag the leader's commit index far behind (a
 * follower that counted a snapshot's arrival as contact called the
 * snapshot's state current: the simulation's seed 31014). Same thread
 * as raft_step. */
uint64_t raft_leader_commit_contact(const struct raft *r);

/* raft_leader_quorum_contact returns how long, in ms of the leader's
 * clock, the leader of this server's term had heard no quorum of voters
 * when it sent the AppendEntries this server last took from it (its
 * raft_quorum_contact then, as it told it: wire version 6; 0 from an
 * older leader). The commit index it told (raft_leader_commit) is known
 * current as of raft_leader_commit_contact() plus this much ago, not
 * later: a leader cut off from the majority with this server goes on
 * telling it its commit index until it steps down, while the majority
 * elects another and commits. 0 on the leader itself (its own
 * quorum contact is raft_quorum_contact) and when the leader of this
 * term has told it none. Same thread as raft_step. */
uint64_t raft_leader_quorum_contact(const struct raft *r);

/* raft_commit_current tells whether this server's commit index is at an
 * entry of its current term: on a leader, its NOOP is committed; on a
 * follower, the leader of its term told it a commit index at or past an
 * entry of that term it holds (a snapshot of that term counts). Until
 * then the commit index a new leader knows, and so what it tells its
 * followers (raft_leader_commit), may lag entries an earlier leader
 * committed (thesis §6.4: ReadIndex waits for the same), so that a
 * server that applied it cannot call its state current. False with no
 * leader known on a follower, a candidate, and a term with nothing
 * committed yet. Same thread as raft_step. */
bool raft_commit_current(const struct raft *r);

/* What a log does with its entries when a snapshot is installed over it
 * (paper §7). */
enum raft_snapshot_log_action {
    RAFT_SNAPSHOT_KEEP_SUFFIX = 1, /* delete the log through the
                                      snapshot's index only, keep what
                                      follows */
    RAFT_SNAPSHOT_RESET = 2,       /* delete the whole log: it restarts
                                      empty after the snapshot's index */
};

/* raft_snapshot_log_action makes paper §7's decision for a log that takes
 * a snapshot whose last entry is (index, @last_term): @held_term is the
 * term of the entry at that index in the log being changed, 0 when the
 * log holds no such entry (compacted, past its end, or, for the core, not
 * yet durable). When the log holds the snapshot's last entry
 * (@held_term == @last_term != 0) the entries after it are the leader's
 * too (Log Matching) and may be copies counted for a commit: KEEP_SUFFIX.
 * Otherwise RESET. The one place of that decision: the core asks it for
 * its durably persisted log (raft_snapshot_resets_log), the storage job
 * queue for the stored log (raft_persist_run), and the simulation's
 * checks for its disk. Pure; any thread. */
enum raft_snapshot_log_action raft_snapshot_log_action(raft_term held_term,
                                                       raft_term last_term);

/* raft_snapshot_resets_log says whether RAFT_EVENT_SNAPSHOT_INSTALLED of a
 * snapshot through (@index, @last_term), stepped now, makes the core reset
 * its log: true when @index is above the last index handed out as
 * committed and the core does not hold entry @index of @last_term durably
 * (paper §7, raft_snapshot_log_action); false when it keeps the
 * entries after @index or changes nothing. The durable log takes the same
 * decision. A driver asks before stepping the event, to drop the entries
 * of writes it still has queued when the log is reset. Same thread as
 * raft_step. */
bool raft_snapshot_resets_log(const struct raft *r, raft_index index,
                              raft_term last_term);

/* What a leader knows of one follower (voter or learner). */
struct raft_progress_info {
    uint8_t role;              /* enum raft_server_role */
    raft_index match_index;    /* highest index known replicated */
    raft_index next_index;     /* next index to send */
    uint8_t state;             /* enum raft_progress_state */
    unsigned inflight;         /* AppendEntries sent and not yet answered */
    uint64_t inflight_bytes;   /* their payload bytes */
    raft_index snapshot_index; /* SNAPSHOT: index the snapshot must
                                  reach, else 0 */
    uint64_t last_contact;     /* ms since its last answer this term,
                                  UINT64_MAX when none yet */
    bool caught_up;            /* its last catch-up round (thesis §4.2.1:
                                  from the leader's last index at the
                                  round's start to that index matched)
                                  took less than an election timeout, and
                                  the current one has not lasted longer */
    uint64_t round_ms;         /* duration of the last finished round */
};

/* raft_progress fills @out with the leader's view of follower @id.
 * Errors: RAFT_NOTLEADER when this server is not the leader; RAFT_NOTFOUND
 * when @id is not another member. */
int raft_progress(const struct raft *r, raft_id id,
                  struct raft_progress_info *out);

#endif /* RAFT_H */
