/* The member view: the servers of the configuration in force as one node
 * sees them (raft_members shows it, members.h). */

#ifndef EXT_MEMBER_VIEW_H
#define EXT_MEMBER_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "config.h"

/* One server as raft_members shows it. Unknown values are flagged. */
struct ext_member_row {
    raft_id id;                         /* server id */
    char address[RAFT_ADDRESS_MAX + 1]; /* its address, "" when none */
    uint8_t role;                       /* RAFT_VOTER or RAFT_LEARNER */
    bool leader;                        /* the leader this node knows */
    bool has_match;                     /* @match and @lag are known (the
                                           leader's view) */
    raft_index match;                   /* highest index known replicated */
    uint64_t lag;                       /* entries behind the leader */
    bool has_contact;                   /* @last_contact_ms is known */
    uint64_t last_contact_ms;           /* ms since it was last heard */
    int connected;                      /* 1, 0, or -1 when unknown */
    raft_index checksum_differs;        /* the first index at which this
                                           node found its replica checksum
                                           differs from that server's, 0
                                           for none */
    bool auto_promote;                  /* a learner promoted to voter
                                           once caught up */
};

/* member_view_build fills @rows (RAFT_MAX_SERVERS of them) with the servers of
 * the configuration in force of driver @d's core, as server @self sees
 * them: a leader knows every follower's progress, a follower only its
 * connections and its leader's last contact. A server with no address in
 * the configuration gets its cluster= one from @fallback (@n_fallback
 * members). Returns the number of rows. Loop thread of @d. */
unsigned member_view_build(struct raft_uv_node *d, raft_id self,
                           const struct ext_member *fallback,
                           unsigned n_fallback, struct ext_member_row *rows);

#endif /* EXT_MEMBER_VIEW_H */
