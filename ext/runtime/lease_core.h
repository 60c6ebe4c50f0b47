/* The write lease's rules (lease.h), without threads, clock or I/O: one
 * node's lease state and every decision on it, driven by explicit inputs
 * (a holder asks, commits, releases; a LEASE or LEASE_RESULT frame
 * arrives; the loop runs, with the core's role, term, leader, last and
 * commit index; the time) and handing back explicit outputs (frames to
 * send, a changeset to propose, holders to wake, the applier's hold and
 * its end). lease.c runs it under its mutex for the node's threads; the
 * deterministic simulation (tests/sim/sim_lease.h) runs the same code on
 * a virtual clock, so what the simulation checks is what ships.
 *
 * It includes raft/ headers and libc only (scripts/check-layering.sh):
 * the simulation links it beside the core.
 *
 * Every function takes the lease's state @c, which its caller serializes
 * (lease.c: its mutex). Holder calls: lease_core_ask, _ask_end,
 * _in_force, _commit, _commit_end, _release. Loop calls (they take the
 * core's view in @env): lease_core_loop, _proposed, _loop_end, _frame.
 * Strings: every @why gets at most @why_len bytes, NUL-terminated. */

#ifndef EXT_LEASE_CORE_H
#define EXT_LEASE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/buf.h"
#include "../../raft/frame.h"
#include "../../raft/raft.h"

/* Where the lease stands. */
enum {
    LEASE_NONE = 0,    /* none out */
    LEASE_ASKED = 1,   /* a holder waits for the loop's answer */
    LEASE_GRANTED = 2, /* in force: requests are held back */
};

/* Where the holder's commit stands. */
enum {
    COMMIT_NONE = 0,     /* no commit waits */
    COMMIT_QUEUED = 1,   /* waits for the loop (may be withdrawn) */
    COMMIT_TAKEN = 2,    /* the loop proposes it now */
    COMMIT_PROPOSED = 3, /* appended at index/pterm: waits for the commit */
    COMMIT_DONE = 4,     /* answered: commit_rc, commit_why */
};

/* A follower's ask or commit unanswered this long goes again (a lost
 * frame: the connection broke), ms. */
#define EXT__LEASE_RESEND_MS 200

/* The most frames one call hands back. */
#define LEASE_CORE_MAX_SENDS 6

/* A membership change that finds a lease in force on the leader waits
 * this long at most for the lease to end (its transaction's commit or
 * rollback: milliseconds as a rule), ms, while no lease is granted
 * (change.c); then it is appended anyway, and the lease's commit is
 * refused: a transaction left open must not block a raft_remove. */
#define LEASE_CORE_CHANGE_WAIT_MS 2000

/* The lease goes in turn: a server whose writer the leader answered busy
 * keeps its place in line while it asks again within this long, ms, and
 * the leader grants the next lease to the server in line the longest
 * (its own writers included), refusing the others busy meanwhile. The
 * leader's own writers, woken by a release and asking without a round
 * trip, otherwise took every lease while they wrote back to back, and a
 * follower's writer met SQLITE_BUSY (a trial: 3 tries in 30 s). A server
 * that stops asking loses its place after this long: no grant waits
 * longer for it. A follower's writer asks again every
 * EXT__LEASE_RETRY_MS plus a round trip, the leader's own every 10 ms
 * while another server holds the lease (lease.c). */
#define LEASE_CORE_TURN_MS 50

/* What the loop's core looks like now, and two questions the lease asks
 * the node. Filled by the loop's caller for each loop call. */
struct lease_core_env {
    uint64_t now_ms;         /* the clock, ms (lease.c: CLOCK_MONOTONIC) */
    bool leading;            /* this node leads in a durable term
                                (raft_term_durable: a lease granted in
                                a term a crash may undo would have its
                                id reused) and its driver works */
    raft_term term;          /* raft_current_term */
    raft_id leader;          /* raft_leader_id, 0: none known */
    raft_index last_index;   /* raft_last_index */
    raft_index commit_index; /* raft_commit_index */
    unsigned (*peer_wire)(void *arg, raft_id id);      /* the wire version
                                    server @id announced, 0: not known */
    int (*gate)(void *arg, char *why, size_t why_len); /* 0 when every
                                    member can apply changeset entries
                                    (wire_gate_changeset), else nonzero
                                    and @why says which cannot */
    void *arg;                                         /* for both */
    bool change_waiting; /* a membership change waits for the lease in
                            force to end (change.h): no lease is granted
                            meanwhile (asks answered RAFT_BUSY) */
};

/* What a call hands back for its caller to carry out, in this order:
 * end the hold, hold, send the frames, wake holders, wake the loop; a
 * proposal (lease_core_loop only) after the others, the state's lock
 * released. Zero it (lease_core_out_init) before each call. */
struct lease_core_out {
    struct raft_frame send[LEASE_CORE_MAX_SENDS]; /* frames, in order;
                                     lease.data is borrowed from the lease
                                     state until the next call on it */
    unsigned n_send;                              /* how many */
    bool hold_end;                                /* end the applier's hold
                                       (applier_lease_end) */
    raft_index hold_landed;   /* with the changeset's index, 0 */
    bool hold;                /* hold the applier from hold_from
                                       (applier_lease_hold) */
    raft_index hold_from;     /* the grant's index + 1 */
    bool wake_holders;        /* an ask or a commit was answered,
                                       or the node stops */
    bool wake_loop;           /* the loop must run (requests held
                                       back may go; a call to move) */
    struct raft_buf *propose; /* append this changeset now,
                                       unstamped (a reference the caller
                                       drops), then lease_core_proposed */
    uint64_t propose_seq;     /* with this sequence */
};

/* The leader's answer to one follower's last commit, which a resend
 * gets again. */
struct lease_core_done {
    raft_id from;     /* the follower, 0: free slot */
    uint64_t id;      /* its lease */
    int rc;           /* the answer's code */
    raft_index index; /* and index */
};

/* A server in line for the lease, on the leader (LEASE_CORE_TURN_MS). */
struct lease_core_wait {
    raft_id server;    /* 0: a free slot */
    uint64_t since_ms; /* its first ask answered busy since its last grant */
    uint64_t last_ms;  /* its latest ask answered busy */
};

/* One node's lease state. Callers read its fields (state, id,
 * grant_index, granted_by, holder_server, hold_id, ...) but change them
 * only through the functions below.
 * Invariant: at most one lease is in force or asked for, and at most one
 * applier hold is out; a hold and a lease in force have the same id. */
struct lease_core {
    raft_id self;             /* this server */
    unsigned timeout_ms;      /* lease_timeout_ms */
    unsigned exec_timeout_ms; /* a holder's longest wait */
    uint64_t max_bytes;       /* max_request_bytes */
    bool shutdown;            /* no new leases, no wakes */
    uint64_t n_grants;        /* grants of this node's life */
    int state;                /* LEASE_* */
    uint64_t holder;          /* the holder's token (ASKED, GRANTED) */
    raft_id holder_server;    /* GRANTED: the holder's server: self,
                                 or a follower this leader granted */
    raft_id granted_by;       /* GRANTED: the server that granted it:
                                 self, or the leader (a follower's
                                 holder's lease) */
    uint64_t id;              /* the lease id (GRANTED) */
    raft_index grant_index;   /* the leader's last index at the grant */
    uint64_t done_id;         /* the last lease whose changeset
                                 committed, 0 */
    raft_index done_index;    /* that changeset's index (its release
                                 waits until this node applied it) */
    raft_term term;           /* the term of the grant */
    uint64_t granted_ms;      /* the clock at the grant */
    int ask_rc;               /* the loop's answer to an ask */
    char ask_why[256];        /* why not */
    bool ask_leaderless;      /* the last ask was refused for want of a
                                 leader (none known, or the one asked
                                 did not answer, or the node's loop did
                                 not), not for another writer
                                 (lease_core_ask_leaderless) */
    uint64_t ended_id;        /* the lease that ended last */
    int ended_rc;             /* its end, as a commit's code */
    char ended_why[200];      /* and words */
    int commit;               /* COMMIT_* */
    uint64_t commit_id;       /* the lease the commit is under */
    raft_id commit_from;      /* the holder's server: self, or a
                                 follower (answered by a frame) */
    uint64_t commit_tag;      /* a follower's commit: its tag */
    bool commit_remote;       /* this node's holder's commit went to
                                 the leader commit_to (PROPOSED: sent
                                 there, its answer awaited) */
    raft_id commit_to;        /* that leader: the lease's granter */
    uint64_t call_tag;        /* a follower's ask or commit in flight:
                                 its tag (counts from 1) */
    raft_id call_to;          /* where it was last sent, 0: not yet */
    uint64_t call_sent_ms;    /* when */
    uint64_t release_id;      /* a lease whose RELEASE the loop sends
                                 to release_to, 0 */
    raft_id release_to;       /* that leader */
    struct lease_core_done rdone[RAFT_MAX_SERVERS]; /* the leader's
                                 last answer to each follower's commit */
    uint64_t rdone_forgot;     /* the highest lease id whose answer a
                                 full rdone let go, 0 */
    uint64_t first_id;         /* the first lease granted in this node's
                                 life, 0: none yet (ids below are of an
                                 earlier life, which it does not
                                 remember) */
    uint64_t commit_seq;       /* counts commits (a loop's proposal
                                 finds its own) */
    struct raft_buf *payload;  /* the changeset (QUEUED, TAKEN; a
                                 follower's PROPOSED remote) */
    raft_index index;          /* where it was appended (PROPOSED) */
    raft_term pterm;           /* in this term */
    int commit_rc;             /* DONE: the answer */
    char commit_why[256];      /* its words */
    uint64_t hold_id;          /* the lease holding the applier, 0 */
    uint64_t hold_deadline_ms; /* the hold ends by itself then */
    raft_index landed;         /* the changeset the hold's lease
                                  proposed, 0 */

    /* The leader's line: the servers lately answered busy, this one
     * included (LEASE_CORE_TURN_MS); a slot is let go at its grant. */
    struct lease_core_wait line[RAFT_MAX_SERVERS];
};

/* lease_core_init sets up @c for server @self: leases last
 * @lease_timeout_ms, a holder waits at most @exec_timeout_ms, a changeset
 * over @max_bytes is refused. Nothing allocated yet; never fails. */
void lease_core_init(struct lease_core *c, raft_id self,
                     unsigned lease_timeout_ms, unsigned exec_timeout_ms,
                     uint64_t max_bytes);

/* lease_core_close drops what @c holds (a changeset). */
void lease_core_close(struct lease_core *c);

/* lease_core_out_init empties @out. */
void lease_core_out_init(struct lease_core_out *out);

/* lease_core_say writes @fmt's words into @why (@why_len bytes,
 * NUL-terminated); a NULL @why or a 0 @why_len is left alone. */
void lease_core_say(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* lease_core_active says whether anything is out (the loop's fast path:
 * when false, lease_core_loop has nothing to do). */
bool lease_core_active(const struct lease_core *c);

/* ---- The holder ---------------------------------------------------- */

/* lease_core_ask asks for the lease for @holder at @now (ms): returns 0
 * with the ask out (ASKED: the loop answers it; @out says wake it), or
 * without asking RAFT_SHUTDOWN, RAFT_BUSY (another holder, a hold out, a
 * commit out, a follower's on the leader, or !@attached: the node is
 * starting), @why saying why. */
int lease_core_ask(struct lease_core *c, uint64_t holder, bool attached,
                   uint64_t now, char *why, size_t why_len,
                   struct lease_core_out *out);

/* lease_core_asking says whether the ask is still unanswered (the
 * holder waits on). */
bool lease_core_asking(const struct lease_core *c);

/* lease_core_ask_leaderless says whether the last ask's RAFT_BUSY was for
 * want of a leader (none known, the node starting, or no answer from
 * the leader asked or from the loop in time) rather than another
 * writer's lease, hold or commit: a wait for the lease then makes no
 * other writer's commit likelier. */
bool lease_core_ask_leaderless(const struct lease_core *c);

/* lease_core_ask_end ends the holder's wait for its ask (answered, or
 * its deadline passed: then withdrawn). Returns 0 with the lease
 * GRANTED, *@out_id and *@out_grant_index written; else RAFT_SHUTDOWN,
 * RAFT_BUSY (not answered in time, another holder, no leader), RAFT_FORMAT,
 * or the leader's refusal, @why saying why. */
int lease_core_ask_end(struct lease_core *c, char *why, size_t why_len,
                       uint64_t *out_id, raft_index *out_grant_index);

/* lease_core_in_force says whether lease @id is still in force; when
 * not, @why says how it ended. */
bool lease_core_in_force(const struct lease_core *c, uint64_t id, char *why,
                         size_t why_len);

/* lease_core_commit queues changeset @buf (a reference @c takes on
 * success only) under lease @id: returns 0 (QUEUED; @out wakes the loop)
 * or refuses, "not applied" (RAFT_SHUTDOWN, RAFT_INVALID: not in force,
 * or the lease's end's code), @why saying why. The caller checked that
 * @buf is a changeset within max_bytes. */
int lease_core_commit(struct lease_core *c, uint64_t id, struct raft_buf *buf,
                      char *why, size_t why_len, struct lease_core_out *out);

/* lease_core_commit_waiting says whether the holder's commit is still
 * unanswered (the holder waits on). */
bool lease_core_commit_waiting(const struct lease_core *c);

/* lease_core_commit_end ends the holder's wait for its commit under
 * lease @id at @now: answered, or given up (@interrupted: the caller was
 * interrupted; else its deadline passed or the node stops). Returns the
 * answer: 0 committed; "not applied" codes (RAFT_CANCELED, RAFT_TIMEOUT,
 * RAFT_SHUTDOWN, RAFT_NOTLEADER, RAFT_INVALID, ...); RAFT_UNKNOWN. The
 * lease ends; the hold stays until lease_core_release or
 * lease_timeout_ms from @now. */
int lease_core_commit_end(struct lease_core *c, uint64_t id, bool interrupted,
                          uint64_t now, char *why, size_t why_len,
                          struct lease_core_out *out);

/* lease_core_release ends lease @id without an entry if in force, and
 * its hold (unless its commit still waits). *@out_wait_for: the index
 * of @id's committed changeset, which the release waits to see applied
 * here, 0: none. Idempotent. */
void lease_core_release(struct lease_core *c, uint64_t id,
                        raft_index *out_wait_for, struct lease_core_out *out);

/* lease_core_holds_back says whether the leader must propose no request
 * now: a lease is in force. */
bool lease_core_holds_back(const struct lease_core *c);

/* lease_core_end ends the lease this node granted and is in force (an
 * operator's raft_lease_end: a holder stuck with its transaction open),
 * as its expiry would: its commit is then "not applied", and held-back
 * requests go. Returns true with @why (@why_len bytes) describing the
 * lease ended; false when none is in force here, or its changeset is
 * being appended right now (its commit decides). */
bool lease_core_end(struct lease_core *c, uint64_t now, char *why,
                    size_t why_len, struct lease_core_out *out);

/* lease_core_shutdown ends everything (lease_shutdown, lease.h). */
void lease_core_shutdown(struct lease_core *c, struct lease_core_out *out);

/* lease_core_line writes the servers in the leader's line at @now
 * (LEASE_CORE_TURN_MS), first in line first, into @servers and how long
 * each has waited, ms, into @waited_ms: @max at most; returns how many.
 * Meaningful on the leader only: a follower notes its own writers' busy
 * answers too. */
unsigned lease_core_line(const struct lease_core *c, uint64_t now,
                         raft_id *servers, uint64_t *waited_ms, unsigned max);

/* lease_core_describe writes who holds the lease at @now into @why. */
void lease_core_describe(const struct lease_core *c, uint64_t now, char *why,
                         size_t why_len);

/* ---- The loop ------------------------------------------------------ */

/* lease_core_loop sends a pending RELEASE, ends a lease on a leader
 * change or at its expiry, moves an ask (granted here, or sent to the
 * leader) and a queued commit (sent to the granter, or taken: @out's
 * propose, then lease_core_proposed). Then lease_core_loop_end, with
 * the core as it is after the proposal. */
void lease_core_loop(struct lease_core *c, const struct lease_core_env *env,
                     struct lease_core_out *out);

/* lease_core_proposed takes the outcome of the proposal of commit @seq:
 * @rc (0: appended at @index in @term). */
void lease_core_proposed(struct lease_core *c, const struct lease_core_env *env,
                         uint64_t seq, int rc, raft_index index, raft_term term,
                         struct lease_core_out *out);

/* lease_core_loop_end answers a commit this leader proposed once
 * committed (or its leadership lost), and ends a hold past its
 * deadline. */
void lease_core_loop_end(struct lease_core *c, const struct lease_core_env *env,
                         struct lease_core_out *out);

/* lease_core_frame takes LEASE or LEASE_RESULT frame @f (its type one of
 * those) from a peer; @changeset_ok says whether a COMMIT's data is a
 * changeset (the caller's check). Returns true when a commit was queued
 * (the caller runs the loop at once). */
bool lease_core_frame(struct lease_core *c, const struct lease_core_env *env,
                      const struct raft_frame *f, bool changeset_ok,
                      struct lease_core_out *out);

#endif /* EXT_LEASE_CORE_H */
