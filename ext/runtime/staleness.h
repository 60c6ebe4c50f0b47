/* The staleness bound on local reads (max_staleness_ms=): whether this
 * node may be behind the cluster by more than the bound, the rule that
 * decides it (staleness_rule.h: pure, unit-tested, run by the simulation), and its state published for the write
 * guard's authorizer on any thread and for raft_status().
 *
 * A node is stale while it knows no leader, while it last completed a
 * round trip with the leader of its term (a follower: the send time of
 * its answer that the leader's latest AppendEntries echoes, wire
 * version 7, raft_leader_commit_contact; a leader: the send time of the
 * requests a quorum of voters answered, raft_quorum_contact, so an
 * isolated old leader goes stale too) longer ago than max_staleness_ms
 * or not yet ("no round trip with its leader completed yet"), while no
 * entry of its term is committed here (raft_commit_current: a new
 * leader's commit index, and so what it tells its followers, may lag
 * entries an earlier leader committed until its NOOP commits; a commit
 * index heard before then is not taken as current), or while it
 * catches up after its start: until it has applied the commit index the
 * leader told it at the first contact since the start; or while its
 * applied state is older than the bound: it last had applied the
 * leader's commit index, as heard at some contact, longer than
 * max_staleness_ms before now (a node paused with SIGSTOP, which hears
 * its leader again before it applied what it missed; a follower whose
 * log disk is full, which hears its leader and applies nothing). A node
 * removed from the cluster (status_removed) is stale whatever the bound,
 * 0 included: it receives no more entries, so its reads would stay frozen
 * with no end and no error. */

#ifndef EXT_STALENESS_H
#define EXT_STALENESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "node_log.h"
#include "staleness_rule.h"

/* The first line of a bound marker (staleness_new). */
#define EXT_BOUND_MAGIC "raftsql-bound 1"

/* EXT_BOUND_BEAT_MS is how often (ms) a running node with the bound @m
 * (max_staleness_ms) sets its bound marker's mtime to now: its heartbeat
 * for other processes, which a stopped (SIGSTOP) or dead but unreaped
 * (zombie) process, whose pid still exists, no longer gives. */
#define EXT_BOUND_BEAT_MS(m) ((m) / 4 > 20 ? (m) / 4 : 20)

/* EXT_BOUND_SILENCE_MS is how far (ms) the mtime of the marker of a node
 * with the bound @m may be from the reader's wall clock, either way,
 * before readers take the node as not serving (attach_sock_unserved):
 * the bound, but at least 5 beats. */
#define EXT_BOUND_SILENCE_MS(m) ((m) > 100 ? (m) : 100)

struct ext_staleness; /* opaque: the published state of one node */

/* staleness_new creates the state of a node whose bound is @max_ms (0:
 * off) and whose notice for the guards of other processes is the file
 * @notice_path (copied; "" for none): it exists, holding the verdict's
 * notice text, while the node is stale (attach_sock_stale reads it; one
 * left by an earlier run is removed here). @bound_path (copied; "" for
 * none) is the bound marker (attach_sock_bound_path): with a bound it is
 * written here, naming @max_ms and this process, its mtime refreshed by
 * the ticks every EXT_BOUND_BEAT_MS (staleness_on_tick), and stays after
 * the node
 * (staleness_free rewrites it naming no process), so that readers refuse
 * the file while no node serves it (attach_sock_unserved); without one
 * it is removed. A marker that cannot be written is a WARN line on @log.
 * With a bound, the node is stale from the start (no leader known yet).
 * Each change is logged at INFO through @log (borrowed: it outlives
 * @out). Errors: RAFT_NOMEM. Any thread. */
int staleness_new(unsigned max_ms, const char *notice_path,
                  const char *bound_path, struct ext_node_log *log,
                  struct ext_staleness **out);

/* staleness_free removes the notice, rewrites the bound marker (if any)
 * as naming no process, and frees @s (NULL is ignored). The owner, after
 * the loop stopped. */
void staleness_free(struct ext_staleness *s);

/* staleness_on_tick judges @v and publishes the verdict; the notice file
 * follows a change of the verdict's notice text, a log line a change of
 * stale; with a bound, the marker's mtime is set to now when
 * EXT_BOUND_BEAT_MS passed since the last time (a failure is a WARN line,
 * once until it works again). Returns true when the node turned stale
 * with this call (node.c then publishes EXT_EVENT_STALE, on which the
 * guard expires prepared statements). Loop thread: at every tick, and
 * after a step of the core that changed whether this node is removed
 * (node.c on_stepped); the owner once before the loop starts. */
bool staleness_on_tick(struct ext_staleness *s,
                       const struct ext_staleness_view *v);

/* staleness_get copies the verdict last published into @out, made stale
 * when its fresh_until passed (the loop has not judged since: a paused
 * process, a stuck loop). Any thread. */
void staleness_get(struct ext_staleness *s, struct ext_staleness_verdict *out);

/* staleness_any says whether any node of the process may be stale now:
 * one is, or one has a bound (whose verdict may have expired since its
 * last tick: staleness_get tells). Two atomic loads: the guard asks it
 * for every column read. Any thread. */
bool staleness_any(void);

#endif /* EXT_STALENESS_H */
