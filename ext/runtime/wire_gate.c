/* Whether requests of format version 3 may go into the log (wire_gate.h):
 * every member must speak wire version 3 or later; and the words of a
 * follower's refusal when its leader speaks an older one. */

#include "wire_gate.h"

#include <stdbool.h>
#include <stdio.h>

/* The functions that write format 3, for the messages. */
#define EXT__WIRE_GATE_FNS                                                     \
    "(raft_query, raft_exec_id, raft_query_id, raft_load_sql)"

/* older_peer finds the first server of the configuration in force of @d
 * but @self whose wire version, as last agreed, is below @min; with
 * @unknown, one never reached since this node started (version 0) counts
 * too. Returns its id (and its version in *@out_wire), or 0 for none. */
static raft_id older_peer(const struct raft_uv_node *d, raft_id self,
                          unsigned min, bool unknown, unsigned *out_wire)
{
    const struct raft_configuration *conf =
        raft_current_configuration(raft_uv_node_core(d));

    for (unsigned i = 0; i < conf->n; i++) {
        raft_id id = conf->servers[i].id;
        unsigned wire;

        if (id == self) {
            continue;
        }
        wire = raft_uv_node_peer_wire_last(d, id);
        if ((wire != 0 || unknown) && wire < min) {
            *out_wire = wire;
            return id;
        }
    }
    return 0;
}

int wire_gate_members(const struct raft_uv_node *d, raft_id self, char *why,
                      size_t why_len)
{
    unsigned wire = 0;
    raft_id id = older_peer(d, self, EXT_WIRE_GATE_VERSION, false, &wire);

    if (id == 0) {
        return EXT_WIRE_GATE_OPEN;
    }
    snprintf(why, why_len,
             "server %llu speaks wire version %u, which cannot "
             "apply request format 3 " EXT__WIRE_GATE_FNS
             ": upgrade every member first (raft_exec works "
             "meanwhile)",
             (unsigned long long)id, wire);
    return EXT_WIRE_GATE_OLD;
}

int wire_gate_changeset(const struct raft_uv_node *d, raft_id self, char *why,
                        size_t why_len)
{
    unsigned wire = 0;
    raft_id id = older_peer(d, self, EXT_WIRE_GATE_CHANGESET, false, &wire);

    if (id == 0) {
        return EXT_WIRE_GATE_OPEN;
    }
    snprintf(why, why_len,
             "server %llu speaks wire version %u, which cannot "
             "apply plain SQL writes (wire version %u and later): "
             "upgrade every member first (raft_exec works "
             "meanwhile)",
             (unsigned long long)id, wire, EXT_WIRE_GATE_CHANGESET);
    return EXT_WIRE_GATE_OLD;
}

unsigned wire_gate_log_wire(const struct raft_uv_node *d, raft_id self)
{
    const struct raft_configuration *conf =
        raft_current_configuration(raft_uv_node_core(d));
    unsigned lowest = 0;

    for (unsigned i = 0; i < conf->n; i++) {
        unsigned wire =
            conf->servers[i].id == self
                ? 0
                : raft_uv_node_peer_wire_last(d, conf->servers[i].id);
        if (wire != 0 && (lowest == 0 || wire < lowest)) {
            lowest = wire;
        }
    }
    return lowest;
}

void wire_gate_leader_why(raft_id leader, unsigned wire, char *why,
                          size_t why_len)
{
    snprintf(why, why_len,
             "the leader (server %llu) speaks wire version %u, which cannot "
             "apply request format 3 " EXT__WIRE_GATE_FNS
             ": upgrade every member first (raft_exec works meanwhile)",
             (unsigned long long)leader, wire);
}

void wire_gate_refused_why(raft_id leader, char *why, size_t why_len)
{
    snprintf(why, why_len,
             "the leader (server %llu) refused it: a member speaks a wire "
             "version below 3, which cannot apply request format "
             "3 " EXT__WIRE_GATE_FNS
             ": upgrade every member first (raft_exec works meanwhile; the "
             "leader's log names the member)",
             (unsigned long long)leader);
}
