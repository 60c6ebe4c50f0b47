/* Judging the evidence that this replica diverged from the cluster's
 * history, on the loop thread at each tick. Two kinds of evidence come
 * from elsewhere, and a verdict goes to the applier, the one owner of
 * the divergence (applier.h: whether, why, since when, how many repairs;
 * the driver and repair.c ask it):
 * - the core dropped an AppendEntries that contradicts its committed
 *   history (raft_conflicts, raft.h): the leader's cluster and this
 *   replica were founded apart, or this node's state was replaced;
 * - the replica checksum differs from those of a majority of the voters
 *   (divergence_outvoted, divergence.h): the same entries gave other
 *   content here.
 * A verdict names what was seen in the reason that raft_status() and
 * the ERROR line show.
 *
 * Failure modes it guards against: a repaired replica marked again for
 * evidence about the content a repair's snapshot replaced. A conflict
 * counts only while the core still holds what was contradicted; a
 * checksum verdict is dropped when a snapshot was installed after its
 * records were read (applier_mark_diverged_since). */

#ifndef EXT_DIVERGENCE_JUDGE_H
#define EXT_DIVERGENCE_JUDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "applier.h"
#include "divergence.h"

/* The judge's memory: which of the core's conflicts it has judged.
 * Zero-initialized it has judged none (a core counts from its creation).
 * Invariant: @conflicts <= raft_conflicts of the core it judges. */
struct ext_divergence_judge {
    uint64_t conflicts; /* raft_conflicts already judged (loop) */
};

/* A checksum verdict and the install count it was read under. */
struct ext_divergence_verdict {
    uint64_t installs; /* applier_installs, read before the records */
    raft_index at;     /* the lowest index known to differ from a voter */
    raft_id peer;      /* that voter */
};

/* divergence_judge_on_tick judges what the tick brings: the conflicts
 * that @core counted since the last call (the latest of them, once)
 * and whether the checksum of @v is outvoted in @core's configuration;
 * each verdict marks @a diverged (logged at ERROR by the applier, once:
 * a replica already diverged keeps its first reason). Loop thread of
 * the driver that owns @core. */
void divergence_judge_on_tick(struct ext_divergence_judge *j,
                              const struct raft *core, struct ext_divergence *v,
                              struct ext_applier *a);

/* divergence_judge_outvoted reads the evidence of the replica checksum:
 * first how many snapshots @a installed, then whether @v differs from a
 * majority of the voters of @c (divergence_outvoted). Returns true, the
 * verdict in *@out, when it does; false otherwise. The first half of
 * the checksum's judgement in divergence_judge_on_tick. Any thread. */
bool divergence_judge_outvoted(struct ext_divergence *v,
                               const struct raft_configuration *c,
                               struct ext_applier *a,
                               struct ext_divergence_verdict *out);

/* divergence_judge_rule marks @a diverged for checksum verdict @verdict,
 * unless @a installed a snapshot since the verdict was read: its records
 * are then of the content the snapshot replaced. The second half of the
 * checksum's judgement in divergence_judge_on_tick. Any thread. */
void divergence_judge_rule(struct ext_applier *a,
                           const struct ext_divergence_verdict *verdict);

#endif /* EXT_DIVERGENCE_JUDGE_H */
