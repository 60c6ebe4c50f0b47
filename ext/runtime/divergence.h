/* Divergence detection across replicas: the replica checksum (sql.h "The
 * replica checksum") at each recently applied index, exchanged with the
 * peers in CHECKSUM frames (raft/frame.h) and compared at equal indexes;
 * a mismatch is reported at once (status, raft_members, an ERROR line)
 * and narrowed down to the first index where the two replicas differ; a
 * replica that differs from a majority of the voters is then marked
 * diverged (divergence_outvoted, judged by divergence_judge.c).
 *
 * Happy path: the apply thread records (index, checksum) of every entry
 * it applies (divergence_applied); every EXT__DIVERGENCE_PERIOD_MS the
 * loop thread sends each peer that speaks wire version 2 its latest
 * applied index and value; a peer compares with its own value at that
 * index (or keeps it until it has applied that far).
 * Failure modes: a mismatch starts a search, by bisection over the
 * indexes between the last known equal one and the first known different
 * one, with probe frames that the peer answers with its value at that
 * index (or, for one below its ring, at the oldest index it has, where
 * the search goes on); an index that fell out of either ring ends it,
 * the report then naming the first index known to differ. A peer of
 * wire version 1, or with the checksum off, is never sent a frame, and
 * sends none. */

#ifndef EXT_DIVERGENCE_H
#define EXT_DIVERGENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "../../raft/uv_node.h"
#include "node_log.h"

/* (index, checksum) pairs kept: about a second of applies at full load. */
#define EXT__DIVERGENCE_RING 65536

/* How often each peer is told this node's latest value, ms. */
#define EXT__DIVERGENCE_PERIOD_MS 1000

struct ext_divergence; /* opaque */
struct sql_fsm;        /* sql/sql.h */

/* What raft_status() shows of it. */
struct ext_divergence_status {
    bool on;              /* the checksum is maintained */
    char why[256];        /* why not, when !on */
    raft_index index;     /* latest applied index recorded */
    uint64_t value;       /* the checksum there */
    bool mismatch;        /* a peer's value differed at an index */
    raft_id server;       /* that peer (the first found) */
    raft_index first;     /* the first index known to differ */
    uint64_t ours;        /* our value there */
    uint64_t theirs;      /* its value there */
    raft_index last_same; /* the last index known equal below it, 0 */
};

/* divergence_new allocates the state of server @self, logging to @log
 * (which must outlive it). Errors: RAFT_NOMEM. Any thread. */
int divergence_new(raft_id self, struct ext_node_log *log,
                   struct ext_divergence **out);

/* divergence_free frees @v (NULL ignored), once no thread uses it. */
void divergence_free(struct ext_divergence *v);

/* divergence_set sets whether the checksum is maintained (@why says why
 * not) and starts the record afresh at @index with @value, forgetting
 * what was compared with the peers. Any thread. */
void divergence_set(struct ext_divergence *v, bool on, const char *why,
                    raft_index index, uint64_t value);

/* divergence_start turns the replica checksum of @fsm on or off as
 * @want (checksum=) says, then divergence_set with what came of it; a
 * failure to compute it leaves it off (a WARN line, and status says
 * why), never stops the node. The thread that owns @fsm, before the
 * apply thread starts. */
void divergence_start(struct ext_divergence *v, struct sql_fsm *fsm, bool want);

/* divergence_installed starts the record afresh at the applied index of
 * @fsm with its checksum (divergence_set), after a snapshot replaced its
 * database: raft_status() shows the snapshot's index and value at once.
 * The thread that owns @fsm (or installs into it while nothing applies). */
void divergence_installed(struct ext_divergence *v, struct sql_fsm *fsm);

/* divergence_applied records the value after entry @index. Entries come
 * in order; a gap (a snapshot installed) starts the record afresh. The
 * apply thread. */
void divergence_applied(struct ext_divergence *v, raft_index index,
                        uint64_t value);

/* divergence_on_tick sends, every EXT__DIVERGENCE_PERIOD_MS, this node's
 * latest value to each connected peer of wire version 2 or more through
 * @d, compares what peers sent for indexes this node has reached since,
 * and repeats an unanswered probe. Loop thread of @d. */
void divergence_on_tick(struct ext_divergence *v, struct raft_uv_node *d);

/* divergence_on_frame compares the CHECKSUM frame @m of a peer with this
 * node's value at its index, answers a probe, and goes on with a search.
 * Loop thread of @d. */
void divergence_on_frame(struct ext_divergence *v, struct raft_uv_node *d,
                         const struct raft_frame *m);

/* divergence_status fills @out. Any thread. */
void divergence_status(struct ext_divergence *v,
                       struct ext_divergence_status *out);

/* divergence_peer returns the first index known to differ from peer @id,
 * 0 for none. Any thread. */
raft_index divergence_peer(struct ext_divergence *v, raft_id id);

/* divergence_outvoted tells whether this replica is the odd one out: its
 * checksum is known to differ from those of a majority of the voters of
 * @c (voters / 2 + 1 of them, not counting this server), so that no
 * majority can share its content. Returns the lowest index known to
 * differ from one of them, with that voter's id in *@peer, or 0 when
 * fewer differ (a leader whose content is wrong is outvoted by its
 * followers, a follower agreeing with another voter is not; two voters
 * never outvote each other: which is wrong is for the operator to tell).
 * Any thread. */
raft_index divergence_outvoted(struct ext_divergence *v,
                               const struct raft_configuration *c,
                               raft_id *peer);

#endif /* EXT_DIVERGENCE_H */
