/* The node configuration: the `key=value` string given to raft_start(),
 * parsed and checked into a struct with defaults. Every key is documented in
 * the README's configuration table. */

#ifndef EXT_CONFIG_H
#define EXT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../raft/raft.h"
#include "../raft/uv_node.h"

/* The largest cluster a configuration may name. */
#define EXT_MAX_NODES RAFT_MAX_VOTERS

/* One server of the cluster. */
struct ext_member {
    raft_id id;         /* server id, > 0 */
    char host[64];      /* numeric IPv4 address (its address in the
                           configuration) */
    uint16_t port;      /* TCP port, > 0 */
    char dial_host[64]; /* dial= : where this node dials it instead
                           (numeric IPv4), "" for no override */
    uint16_t dial_port; /* its TCP port, 0 for no override */
};

/* ext_member_dial gives the address this node dials to reach @m: its
 * dial= override when it has one, else its address in the
 * configuration. Pure. */
void ext_member_dial(const struct ext_member *m, const char **out_host,
                     uint16_t *out_port);

/* A parsed configuration. */
struct ext_config {
    raft_id id;                               /* id= : this server */
    char listen_host[64];                     /* listen= host part */
    uint16_t listen_port;                     /* listen= port part */
    struct ext_member members[EXT_MAX_NODES]; /* cluster= */
    unsigned n_members;                       /* entries used in members */
    char dir[4096];                           /* dir= : log directory */
    unsigned election_timeout_ms;             /* election_timeout_ms= */
    unsigned heartbeat_ms;                    /* heartbeat_ms= */
    unsigned exec_timeout_ms;                 /* exec_timeout_ms= */
    uint64_t log_max_bytes;                   /* log_max_mb= , in bytes */
    uint64_t max_request_bytes;               /* max_request_bytes= */
    uint64_t snapshot_threshold;   /* snapshot_threshold= (entries) */
    uint64_t trailing_entries;     /* trailing_entries= (entries) */
    uint64_t snapshot_chunk_bytes; /* snapshot_chunk_bytes= */
    unsigned follower_apply_ms;    /* follower_apply_ms= : a
                                            follower's apply pace, 0 for
                                            none */
    uint64_t max_request_steps;    /* max_request_steps= : the work
                                            budget the leader stamps into
                                            each request, SQLite VM steps,
                                            0 for none */
    int log_level;                 /* log_level= (raft_log_level) */
};

/* ext_config_parse parses @text, a whitespace-separated list of key=value
 * pairs, into @out, filling defaults for keys not given; @db_path (the
 * database file) gives the default dir, "<db_path>-raft". `listen` defaults
 * to this id's address in `cluster`. Writes @out only on success.
 * Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes) naming the bad or
 * unknown key and why: missing id or cluster, id not in cluster, duplicate
 * id, malformed host:port, a listen host off loopback (refused until nodes
 * authenticate each other), numbers out of range, heartbeat_ms not below
 * election_timeout_ms, a dial= entry naming a server that is not in
 * cluster or is this server, or naming one twice. Any thread. */
int ext_config_parse(const char *text, const char *db_path,
                     struct ext_config *out, char *errmsg, size_t errmsg_len);

/* STUB (sqlmember branch), until the node-side branch that parses join=
 * lands: ext_config_join says whether @cfg asks this node to join a
 * running cluster (join=host:port), in which case it sends JOIN requests
 * (ext/change.c) until it is a voter. Replace by the parsed join address
 * when merging. Pure. */
static inline bool ext_config_join(const struct ext_config *cfg)
{
    (void)cfg;
    return false;
}

#endif /* EXT_CONFIG_H */
