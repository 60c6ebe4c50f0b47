/* The member view (member_view.h), built on the loop thread from the
 * core's configuration and progress and the driver's connections. */

#include "member_view.h"

#include <stdio.h>
#include <string.h>

/* fallback_address writes cluster='s address of @id into @out. */
static void fallback_address(const struct ext_member *fallback, unsigned n,
                             raft_id id, char *out, size_t len)
{
    for (unsigned i = 0; i < n; i++) {
        if (fallback[i].id == id) {
            snprintf(out, len, "%s", fallback[i].address);
            return;
        }
    }
}

unsigned member_view_build(struct raft_uv_node *d, raft_id self,
                           const struct ext_member *fallback,
                           unsigned n_fallback, struct ext_member_row *rows)
{
    const struct raft *core = raft_uv_node_core(d);
    const struct raft_configuration *conf = raft_current_configuration(core);
    raft_id leader = raft_leader_id(core);
    bool leading = raft_role(core) == RAFT_LEADER;
    raft_index last = raft_last_index(core);

    for (unsigned i = 0; i < conf->n; i++) {
        const struct raft_server *s = &conf->servers[i];
        struct ext_member_row *w = &rows[i];
        struct raft_progress_info pi;

        memset(w, 0, sizeof *w);
        w->id = s->id;
        snprintf(w->address, sizeof w->address, "%s", s->address);
        if (w->address[0] == '\0') {
            fallback_address(fallback, n_fallback, s->id, w->address,
                             sizeof w->address);
        }
        w->role = s->role;
        w->auto_promote = s->auto_promote;
        w->leader = s->id == leader;
        if (s->id == self) {
            w->match = raft_persisted_index(core);
            w->has_match = leading;
            w->lag = last > w->match ? last - w->match : 0;
            /* A follower counts contact with its leader only. */
            w->has_contact = leading;
            w->connected = 1;
            continue;
        }
        w->connected = raft_uv_node_connected(d, s->id) ? 1 : 0;
        if (leading && raft_progress(core, s->id, &pi) == 0) {
            w->has_match = true;
            w->match = pi.match_index;
            w->lag = last > pi.match_index ? last - pi.match_index : 0;
            w->has_contact = pi.last_contact != UINT64_MAX;
            w->last_contact_ms = pi.last_contact;
        } else if (w->leader) {
            uint64_t ago = raft_leader_contact(core);
            w->has_contact = ago != UINT64_MAX;
            w->last_contact_ms = ago;
        }
    }
    return conf->n;
}
