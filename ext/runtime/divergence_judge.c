/* Judging the evidence that this replica diverged (divergence_judge.h).
 *
 * Each tick: the core's conflict count is compared with the one judged last; a
 * new conflict that still concerns what this node holds marks the applier
 * diverged (one seen while the state machine holds a snapshot the core has not
 * taken yet waits for the core). Then the checksum's evidence is read (the
 * applier's install count first, the peers' records after) and, when a
 * majority of the voters differ, ruled on: marked unless an install came
 * between. */

#include "divergence_judge.h"

#include <inttypes.h>
#include <stdio.h>

/* judge_conflicts marks the replica diverged when the core dropped an
 * AppendEntries that contradicts its committed history (raft_conflicts):
 * the leader's cluster and this replica have different histories (two
 * groups founded the cluster, or this node's state was replaced), so
 * entries would apply here on other content than the leader's. */
static void judge_conflicts(struct ext_divergence_judge *j,
                            const struct raft *core, struct ext_applier *a)
{
    struct raft_conflict c;
    uint64_t k = raft_conflicts(core, &c);
    /* Read before the checks below: an install that ends between them
     * and the mark makes the mark stale (applier_mark_diverged_since
     * drops it), as for the checksum's verdict. */
    uint64_t installs = applier_installs(a);
    char why[512];

    if (k == j->conflicts) {
        return;
    }
    /* The state machine installed a snapshot the core has not taken yet
     * (the log's half of the install runs after the state machine's): a
     * conflict dropped meanwhile may concern what it replaced. Judged
     * once the core holds the snapshot, by the rule below. */
    if (applier_installed_index(a) > raft_snapshot_index(core)) {
        return;
    }
    j->conflicts = k;
    /* Only while this node still holds what was contradicted: messages
     * dropped just before a repair's snapshot replaced it are counted
     * once it is gone, and must not mark the repaired replica again. */
    if (c.snapshot ? raft_snapshot_index(core) != c.index ||
                         raft_snapshot_term(core) != c.ours
                   : c.index <= raft_snapshot_index(core)) {
        return;
    }
    snprintf(why, sizeof why,
             "the leader (server %" PRIu64 ", term %" PRIu64
             ") contradicts this replica's committed history: its entry "
             "%" PRIu64 " has term %" PRIu64 ", this node's %s at %" PRIu64
             " has term %" PRIu64
             " (the two were founded apart, e.g. founders that elected a "
             "leader without the node started with bootstrap_from=, or "
             "this node's state was replaced); its entries are refused",
             c.leader, c.leader_term, c.index, c.theirs,
             c.snapshot ? "snapshot" : "committed entry", c.index, c.ours);
    applier_mark_diverged_since(a, installs, why);
}

bool divergence_judge_outvoted(struct ext_divergence *v,
                               const struct raft_configuration *c,
                               struct ext_applier *a,
                               struct ext_divergence_verdict *out)
{
    /* Read before the records: an install between the two makes the
     * verdict stale (divergence_judge_rule drops it). */
    uint64_t installs = applier_installs(a);
    raft_id peer = 0;
    raft_index at;

    if (c == NULL || (at = divergence_outvoted(v, c, &peer)) == 0) {
        return false;
    }
    out->installs = installs;
    out->at = at;
    out->peer = peer;
    return true;
}

/* A leader so outvoted hands the leadership on and is repaired like any
 * diverged replica; a follower differing from its leader alone, while
 * another voter agrees with it, is not outvoted (the leader may be the
 * wrong one: it is outvoted in turn). */
void divergence_judge_rule(struct ext_applier *a,
                           const struct ext_divergence_verdict *verdict)
{
    char why[512];

    snprintf(why, sizeof why,
             "the replica checksum differs from those of a majority of the "
             "voters (server %" PRIu64 " from index %" PRIu64
             "; raft_status() checksum.mismatch, raft_members()): the same "
             "entries gave other content here",
             verdict->peer, verdict->at);
    applier_mark_diverged_since(a, verdict->installs, why);
}

void divergence_judge_on_tick(struct ext_divergence_judge *j,
                              const struct raft *core, struct ext_divergence *v,
                              struct ext_applier *a)
{
    struct ext_divergence_verdict verdict;

    judge_conflicts(j, core, a);
    if (divergence_judge_outvoted(v, raft_current_configuration(core), a,
                                  &verdict)) {
        divergence_judge_rule(a, &verdict);
    }
}
