/* Whether requests of format version 3 may go into the log (wire_gate.h):
 * every member must speak wire version 3 or later. */

#include "wire_gate.h"

#include <stdio.h>

/* The functions that write format 3, for the messages. */
#define EXT__WIRE_GATE_FNS                                                     \
    "(raft_query, raft_exec_id, raft_query_id, raft_load_sql)"

int wire_gate_members(const struct raft_uv_node *d, raft_id self, char *why,
                      size_t why_len)
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
        if (wire != 0 && wire < EXT_WIRE_GATE_VERSION) {
            snprintf(why, why_len,
                     "server %llu speaks wire version %u, which cannot "
                     "apply request format 3 " EXT__WIRE_GATE_FNS
                     ": upgrade every member first (raft_exec works "
                     "meanwhile)",
                     (unsigned long long)id, wire);
            return EXT_WIRE_GATE_OLD;
        }
    }
    return EXT_WIRE_GATE_OPEN;
}

int wire_gate_leader(const struct raft_uv_node *d, raft_id leader, char *why,
                     size_t why_len)
{
    unsigned wire = raft_uv_node_peer_wire(d, leader);

    if (wire == 0 || wire >= EXT_WIRE_GATE_VERSION) {
        return EXT_WIRE_GATE_OPEN;
    }
    snprintf(why, why_len,
             "the leader (server %llu) speaks wire version %u, which cannot "
             "apply request format 3 " EXT__WIRE_GATE_FNS
             ": upgrade every member first (raft_exec works meanwhile)",
             (unsigned long long)leader, wire);
    return EXT_WIRE_GATE_OLD;
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
