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
    uint64_t snapshot_threshold;            /* snapshot_threshold= (entries) */
    uint64_t trailing_entries;              /* trailing_entries= (entries) */
    uint64_t snapshot_chunk_bytes;          /* snapshot_chunk_bytes= */
    unsigned follower_apply_ms;             /* follower_apply_ms= : a
                                            follower's apply pace, 0 for
                                            none */
    uint64_t max_request_steps;             /* max_request_steps= : the work
                                            budget the leader stamps into
                                            each request, SQLite VM steps,
                                            0 for none */
    int log_level;                          /* log_level= (raft_log_level) */
    struct ext_member dials[EXT_MAX_NODES]; /* dial= : id, host, port of
                                               each override */
    unsigned n_dials;                       /* entries used in dials */
    char join_host[64];                     /* join= host, "" for none */
    uint16_t join_port;                     /* join= port, 0 for none */
    bool force_new_cluster;                 /* force_new_cluster=1 */
    char tls_cert[4096];    /* tls_cert= : PEM certificate chain, "" none */
    char tls_key[4096];     /* tls_key= : its private key (PEM) */
    char tls_ca[4096];      /* tls_ca= : CA certificates (PEM) */
    char secret_file[4096]; /* secret_file= : pre-shared secret, "" none */
    bool tls;               /* peers talk TLS and authenticate: the three
                               tls_ keys, or secret_file, were given */
};

/* ext_config_parse parses @text, a whitespace-separated list of key=value
 * pairs, into @out, filling defaults for keys not given; @db_path (the
 * database file) gives the default dir, "<db_path>-raft". `listen` defaults
 * to this id's address in `cluster`; without cluster= nor listen=,
 * listen_port is 0 and the node takes its address from the stored
 * configuration at start (ext_config_listen_set). `cluster` may be left
 * out (a restart uses the stored configuration) and is refused beside
 * `join` (cluster= founds a new cluster, join= enters one: a node does
 * one or the other). Writes @out only on success.
 * Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes) naming the bad or
 * unknown key and why: missing id, id not in cluster, duplicate id,
 * malformed host:port, a listen host off loopback (refused until nodes
 * authenticate each other), numbers out of range, heartbeat_ms not below
 * election_timeout_ms, a dial= entry naming this server, a server that is
 * not in cluster (when given), or one server twice, join= beside cluster=
 * or force_new_cluster=1, or without listen=, one or two of tls_cert,
 * tls_key and tls_ca without the other (the missing one named),
 * secret_file beside them, an empty or too long path. The files are read
 * at start (raft_uv_tls_new), not here. Any thread. */
int ext_config_parse(const char *text, const char *db_path,
                     struct ext_config *out, char *errmsg, size_t errmsg_len);

/* ext_config_cluster builds the configuration cluster= names into @out:
 * every member a voter at its address "host:port". Returns false (and
 * leaves @out empty) when cluster= was not given. Pure. */
bool ext_config_cluster(const struct ext_config *c,
                        struct raft_configuration *out);

/* ext_config_dial gives where this node dials server @id, whose address in
 * the configuration is @address ("host:port"): its dial= override when it
 * has one, else @address. Writes @out_host (@host_len bytes) and *@out_port
 * only on success. Errors: RAFT_INVALID (no override and @address is not
 * a numeric IPv4 host:port). Pure. */
int ext_config_dial(const struct ext_config *c, raft_id id, const char *address,
                    char *out_host, size_t host_len, uint16_t *out_port);

/* ext_config_listen_set sets @c's listen address, when neither listen= nor
 * cluster= gave it, to @address (this server's address in the stored
 * configuration). Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes):
 * @address is not host:port, or is off loopback. Any thread. */
int ext_config_listen_set(struct ext_config *c, const char *address,
                          char *errmsg, size_t errmsg_len);

/* ext_config_join says whether @cfg asks this node to join a running
 * cluster (join=host:port): it then sends JOIN requests (ext/change.c)
 * until it is a voter. Pure. */
static inline bool ext_config_join(const struct ext_config *cfg)
{
    return cfg->join_port != 0;
}

#endif /* EXT_CONFIG_H */
