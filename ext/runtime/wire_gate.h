/* Whether requests of format version 3 (a client request id or rows
 * wanted: raft_exec_id, raft_query, raft_query_id, and raft_load_sql's
 * chunks, which carry ids; sql/request.c) may go
 * into the log: only while every member can apply them. A release of
 * before wire version 3 decodes request formats 1 and 2 only; it would
 * stop applying at such an entry (ext/runtime/applier.c: never skipped, retried
 * until the node runs this release). Plain raft_exec stays format 2 and
 * is never held here.
 *
 * What a member speaks is what its handshake announced when last
 * reached (raft_uv_node_peer_wire_last): a member that went down keeps
 * the version it spoke, and one not reached since this node started is
 * admitted (wire_gate_members says why).
 *
 * This is the members rule: what the leader admits into its log. Whether
 * a call goes to a server that cannot take it (a follower forwarding to
 * an older leader) is the leader call's gate (leader_call_take_due);
 * this file words that refusal. */

#ifndef EXT_WIRE_GATE_H
#define EXT_WIRE_GATE_H

#include <stdbool.h>
#include <stddef.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"

/* The first wire version whose releases apply request format 3. */
#define EXT_WIRE_GATE_VERSION 3

/* What a check found. */
enum ext_wire_gate {
    EXT_WIRE_GATE_OPEN = 0, /* every server concerned applies format 3 */
    EXT_WIRE_GATE_OLD = 2,  /* one speaks an older wire version:
                                  refuse the request */
};

/* wire_gate_members checks every server of the configuration in force of
 * driver @d (voters and learners, other than @self): whether one is
 * known to speak a wire version below EXT_WIRE_GATE_VERSION (the version
 * its handshake gave when it was last reached). Returns an enum
 * ext_wire_gate; when OLD, @why (@why_len bytes) says which server and
 * what to do, as the end of a caller's "not applied: " message. A server
 * not reached since this node started is admitted: blocking the writes
 * that retries need while a member is down would cost more than what it
 * prevents, since a release that cannot apply format 3 stops at such an
 * entry, applies nothing of it and resumes once upgraded. Loop thread of
 * @d. */
int wire_gate_members(const struct raft_uv_node *d, raft_id self, char *why,
                      size_t why_len);

/* The first wire version whose releases apply changeset entries
 * (sql/changeset.h: a plain SQL write transaction's effect). A release
 * before it decodes the entry as a request, refuses it as corrupt and
 * stops applying there (ext/runtime/applier.c: never skipped). */
#define EXT_WIRE_GATE_CHANGESET 4

/* wire_gate_changeset checks every server of the configuration in force
 * of driver @d (voters and learners, other than @self) for a write lease
 * (lease.h): whether one is known to speak a wire version below
 * EXT_WIRE_GATE_CHANGESET. A server not reached since this node started
 * is admitted, as in wire_gate_members: refusing would stop every plain
 * write of a cluster with one member down once its leader restarted (a
 * three-node cluster must take writes with one node down), while a
 * release that cannot apply a changeset entry stops at it, applies
 * nothing of it and resumes once upgraded; once reached on an older
 * version, that server refuses the next lease. Returns an enum
 * ext_wire_gate; when OLD, @why (@why_len bytes) names the server. Loop
 * thread of @d. */
int wire_gate_changeset(const struct raft_uv_node *d, raft_id self, char *why,
                        size_t why_len);

/* wire_gate_log_wire returns the wire version this node's log takes
 * while it leads driver @d: the lowest version a server of the
 * configuration in force (other than @self) announced when it was last
 * reached, 0 when none was (every server not reached is admitted, as in
 * wire_gate_members). What exec.c's calls give leader_call_take_due as
 * the wire of the server they go to when this node leads. Loop thread of
 * @d. */
unsigned wire_gate_log_wire(const struct raft_uv_node *d, raft_id self);

/* wire_gate_leader_why writes into @why (@why_len bytes) why a follower
 * refuses a request of format 3 that leader_call_take_due refused to
 * send: leader @leader speaks wire version @wire, below
 * EXT_WIRE_GATE_VERSION, as the end of a "not applied: " message. Any
 * thread. */
void wire_gate_leader_why(raft_id leader, unsigned wire, char *why,
                          size_t why_len);

/* wire_gate_refused_why writes into @why the reason a follower gives when
 * leader @leader refused a request of format 3 with RAFT_FORMAT (a member
 * speaks an older wire version; the leader's log names it). Any thread. */
void wire_gate_refused_why(raft_id leader, char *why, size_t why_len);

#endif /* EXT_WIRE_GATE_H */
