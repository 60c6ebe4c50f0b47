/* The node's cluster id: 16 random bytes that name a cluster,
 * so that a server of another cluster is refused at the handshake
 * (raft/uv.h). It owns the id this node knows, where it came from, and
 * the proposal that makes a cluster's id.
 *
 * Where an id comes from:
 *   - the first leader of a cluster makes it: once it leads with its
 *     term's first entry committed and everything committed applied,
 *     and still knows no id, it proposes one (getrandom(2)) in an entry
 *     of its own (sql.h, "The cluster id"); the first such entry of the
 *     log wins when applied. Not in the bootstrap entry: every founding
 *     server writes that entry itself, byte-identical on each (Log
 *     Matching), so it can carry nothing random. Until the id commits
 *     (a few milliseconds after the first election) the founders have
 *     none, like a joining server;
 *   - every server applies that entry (or installs a snapshot holding
 *     it), and then knows the id;
 *   - a server with no id (one that joins, with an empty log) adopts the
 *     id of the first leader that replicates to it, from the handshake of
 *     that leader's connection (raft/uv_node.h), and keeps it in its log
 *     directory before anything that leader sent (store.h). The
 *     handshake, not the entry: the entry may come long after the first
 *     entries, which would then be written under no id. Safe: a server
 *     only ever sends an id that its cluster committed, and a server
 *     with an empty log takes whatever log the first leader sends it, so
 *     that leader's cluster is the one it joins;
 *   - at start, the log directory's (the LMDB meta records) and the
 *     database's: one written where it is missing; two that differ are
 *     refused (the log and database of two clusters).
 * force_new_cluster=1 keeps the id: the log and database are kept. */

#ifndef EXT_CLUSTER_ID_H
#define EXT_CLUSTER_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/uv_node.h"
#include "../../sql/sql.h"
#include "node_log.h"
#include "store.h"

struct ext_cluster_id; /* opaque */

/* cluster_id_new makes the cluster id of a node whose log directory is @s
 * and whose lines go to @log (both must outlive it), with no id yet.
 * Errors: RAFT_NOMEM. Thread: any. */
int cluster_id_new(struct ext_store *s, struct ext_node_log *log,
                   struct ext_cluster_id **out);

/* cluster_id_free frees @c (NULL is ignored). Thread: any, once the driver
 * and the apply thread stopped. */
void cluster_id_free(struct ext_cluster_id *c);

/* cluster_id_boot reads the id of the log directory and that of the state
 * machine @fsm at start, writes the database's to the log directory when
 * it has none, and makes the result this node's id. Errors: RAFT_CORRUPT
 * (the two differ, or one is unreadable), RAFT_IOERR, RAFT_NOSPACE;
 * @errmsg (@errmsg_len bytes) says why. Thread: any, before the driver
 * starts. */
int cluster_id_boot(struct ext_cluster_id *c, struct sql_fsm *fsm, char *errmsg,
                    size_t errmsg_len);

/* cluster_id_get copies this node's cluster id into @out (all zero for none)
 * and says whether it has one. Thread: any. */
bool cluster_id_get(struct ext_cluster_id *c,
                    uint8_t out[RAFT_UV_CLUSTER_ID_LEN]);

/* cluster_id_hex writes this node's cluster id in hex into @out, "" for
 * none. Thread: any. */
void cluster_id_hex(struct ext_cluster_id *c, char out[RAFT_UV_CLUSTER_ID_HEX]);

/* cluster_id_adopted takes @id, which driver @d adopted from leader @from
 * (its cluster_id callback): this node's id from now on, kept in the log
 * directory before the next storage write. Loop thread of @d. */
void cluster_id_adopted(struct ext_cluster_id *c, struct raft_uv_node *d,
                        const uint8_t id[RAFT_UV_CLUSTER_ID_LEN], raft_id from);

/* cluster_id_applied notes @id, the cluster id the state machine holds
 * (the applier's cluster_id hook); the loop takes it on its next tick.
 * Thread: the apply thread, or the one that installed a snapshot. */
void cluster_id_applied(struct ext_cluster_id *c,
                        const uint8_t id[SQL_CLUSTER_ID_LEN]);

/* cluster_id_on_tick takes an id the state machine applied (this node's id
 * from then on: given to driver @d and kept in the log directory), and,
 * on a leader without one whose term's first entry is committed and
 * whose state machine has applied @applied >= the commit index, proposes
 * a new one, once per term. Loop thread of @d. */
void cluster_id_on_tick(struct ext_cluster_id *c, struct raft_uv_node *d,
                        uint64_t applied);

#endif /* EXT_CLUSTER_ID_H */
