/* The staleness rule (max_staleness_ms=, staleness.h): from what the loop
 * thread sees of its node at one tick, whether the node may be behind the
 * cluster by more than the bound, and the words that say why. Pure: its
 * inputs are the view and its own memory, no clock, no I/O, no threads,
 * so that the simulation runs it over its cores (tests/sim/sim_staleness.h:
 * Makefile SIM_SRC) as node.c runs it over the driver's. The rule itself
 * is staleness.h's opening comment. */

#ifndef EXT_STALENESS_RULE_H
#define EXT_STALENESS_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/raft.h"

/* What the loop thread sees of the node at one tick. */
struct ext_staleness_view {
    bool leading;              /* this server is the leader */
    uint64_t contact_ms;       /* ms since the leader of this term last
                                  told this node its commit index
                                  (raft_leader_commit_contact; a
                                  leader: since it heard a quorum,
                                  raft_quorum_contact); UINT64_MAX when
                                  no leader is known or it told none */
    bool leader_seen;          /* a leader of this term is known
                                  (raft_leader_id, a leader itself):
                                  with contact_ms UINT64_MAX, no round
                                  trip with it completed yet (wire
                                  version 7: a new leader's first
                                  AppendEntries echoes nothing) */
    uint64_t leader_quorum_ms; /* a follower: how long the leader had
                                  heard no quorum of voters when it sent
                                  that commit index
                                  (raft_leader_quorum_contact: the index
                                  is current as of contact_ms plus this
                                  much ago); 0 on a leader */
    raft_index leader_commit;  /* the leader's commit index as last heard
                                  (raft_leader_commit) */
    raft_index applied;        /* this node's applied index */
    bool commit_current;       /* the commit index is at an entry of the
                                  current term (raft_commit_current):
                                  before that, leader_commit may lag
                                  what an earlier leader committed */
    uint64_t wall_ms;          /* the wall clock at this tick, ms since
                                  the epoch (the notice's times) */
    uint64_t mono_ms;          /* CLOCK_MONOTONIC at this tick, ms (the
                                  applied state's age) */
    bool removed;              /* removed from the cluster by the
                                  committed configuration entry
                                  removed_at (status_removed) */
    raft_index removed_at;     /* that entry's index, when removed */
};

/* What the rule remembers from one tick to the next. */
struct ext_staleness_memory {
    bool contacted;             /* a leader was heard since the start */
    raft_index catch_up_to;     /* its commit index at that first contact */
    bool caught_up;             /* applied reached catch_up_to once */
    int kind;                   /* the kind of staleness at the last tick (0:
                               fresh; staleness.c numbers the others) */
    uint64_t since_ms;          /* wall clock ms the notice's "since" names */
    bool fresh_known;           /* fresh_at is set */
    uint64_t fresh_at;          /* mono_ms when the leader's commit index that
                               this node has applied was heard: the time
                               its applied state was current */
    raft_index pend_commit[16]; /* commit indexes heard, not applied yet */
    uint64_t pend_at[16];       /* when each was heard (mono_ms) */
    unsigned n_pend;            /* how many, oldest first */
};

/* The rule's answer. */
struct ext_staleness_verdict {
    bool stale;           /* reads of replicated tables are refused */
    bool leader_known;    /* a leader (or this leader's quorum) is
                                  known: lag_ms is meaningful */
    uint64_t lag_ms;      /* contact_ms, 0 without a leader */
    uint64_t lag_entries; /* leader_commit - applied, 0 when ahead */
    uint64_t fresh_until; /* with a bound, when fresh: the mono_ms past
                             which this verdict no longer holds (the
                             applied state's time plus the bound), so
                             that a reader after a paused or stuck loop
                             finds the node stale without its next tick
                             (staleness_get); else 0 */
    char reason[200];     /* "stale replica: ..." when stale, else "" */
    char notice[200];     /* the same for the notice file, worded
                             without a number that grows while it is
                             read ("no round trip with its leader since <ISO time>");
                             it changes only with the kind of staleness */
};

/* staleness_judge applies the rule to @v with the bound @max_ms (0: off,
 * never stale but when removed, the lag is still measured), updating @mem
 * (zeroed at the start of a node), and fills @out. Pure. */
void staleness_judge(struct ext_staleness_memory *mem, unsigned max_ms,
                     const struct ext_staleness_view *v,
                     struct ext_staleness_verdict *out);

#endif /* EXT_STALENESS_RULE_H */
