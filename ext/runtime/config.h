/* The node configuration: the `key=value` string given to raft_start(),
 * parsed and checked into a struct with defaults. Every key is documented in
 * docs/reference.md's configuration table. */

#ifndef EXT_CONFIG_H
#define EXT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/address.h"
#include "../../raft/raft.h"
#include "../../raft/uv_node.h"

/* The largest cluster a configuration may name. */
#define EXT_MAX_NODES RAFT_MAX_VOTERS

/* Longest address text, "host:port" (raft/address.h). */
#define EXT_ADDRESS_MAX RAFT_ADDRESS_TEXT_MAX

/* One server of the cluster. */
struct ext_member {
    raft_id id;                        /* server id, > 0 */
    char address[EXT_ADDRESS_MAX + 1]; /* "host:port" as raft/address.h
                                          formats it: its address in the
                                          configuration */
    char dial[EXT_ADDRESS_MAX + 1];    /* dial= : where this node dials it
                                          instead, "" for no override */
};

/* A parsed configuration. */
struct ext_config {
    raft_id id;                               /* id= : this server */
    char listen_host[EXT_ADDRESS_MAX + 1];    /* listen= : the IP literal
                                                 to bind (IPv6 without
                                                 brackets; localhost is
                                                 127.0.0.1) */
    uint16_t listen_port;                     /* listen= port part */
    char advertise[EXT_ADDRESS_MAX + 1];      /* what peers dial, in the
                                                 configuration and the
                                                 handshake: advertise=,
                                                 else listen=, else this
                                                 id's cluster= address; ""
                                                 while unknown */
    bool insecure;                            /* insecure=on */
    bool checksum;                            /* checksum=on (default) */
    bool repair_manual;                       /* repair=manual: a diverged
                                                 replica waits for
                                                 raft_repair() */
    struct ext_member members[EXT_MAX_NODES]; /* cluster= */
    unsigned n_members;                       /* entries used in members */
    char dir[4096];                           /* dir= : log directory */
    unsigned election_timeout_ms;             /* election_timeout_ms= */
    unsigned heartbeat_ms;                    /* heartbeat_ms= */
    unsigned exec_timeout_ms;                 /* exec_timeout_ms= */
    unsigned lease_timeout_ms;                /* lease_timeout_ms= : a write
                                                 lease older than this ends
                                                 (lease.h) */
    uint64_t log_max_bytes;                   /* log_max_mb= , in bytes */
    uint64_t max_request_bytes;               /* max_request_bytes= */
    uint64_t snapshot_threshold;            /* snapshot_threshold= (entries) */
    uint64_t trailing_entries;              /* trailing_entries= (entries) */
    uint64_t snapshot_chunk_bytes;          /* snapshot_chunk_bytes= */
    uint64_t snapshot_rate_bytes;           /* snapshot_rate_mb= , in bytes
                                               per second, 0: unpaced */
    unsigned follower_apply_ms;             /* follower_apply_ms= : a
                                            follower's apply pace, 0 for
                                            none */
    unsigned max_staleness_ms;              /* max_staleness_ms= : reads of
                                            replicated tables are refused
                                            while no leader was heard for
                                            longer (staleness.h), 0 for
                                            off */
    uint64_t max_request_steps;             /* max_request_steps= : the work
                                            budget the leader stamps into
                                            each request, SQLite VM steps,
                                            0 for none */
    uint64_t request_id_window;             /* request_id_window= : client
                                            request ids remembered, by
                                            count (stamped by the leader) */
    uint64_t request_id_window_ms;          /* request_id_window_ms= : and
                                            by entry time, ms */
    uint64_t max_result_bytes;              /* max_result_bytes= : cap of a
                                            request's rows as JSON (the
                                            leader's, stamped) */
    int log_level;                          /* log_level= (raft_log_level) */
    struct ext_member dials[EXT_MAX_NODES]; /* dial= : id, host, port of
                                               each override */
    unsigned n_dials;                       /* entries used in dials */
    char join_host[EXT_ADDRESS_MAX + 1];    /* join= host, "" for none */
    uint16_t join_port;                     /* join= port, 0 for none */
    bool force_new_cluster;                 /* force_new_cluster=1 */
    char bootstrap_from[4096]; /* bootstrap_from= : a SQLite file whose
                                  content is a new cluster's initial
                                  state (boot.h), "" for none */
    char tls_cert[4096];       /* tls_cert= : PEM certificate chain, "" none */
    char tls_key[4096];        /* tls_key= : its private key (PEM) */
    char tls_ca[4096];         /* tls_ca= : CA certificates (PEM) */
    char secret_file[4096];    /* secret_file= : pre-shared secret, "" none */
    bool tls;                  /* peers talk TLS and authenticate: the three
                               tls_ keys, or secret_file, were given */
    bool socket;               /* socket= : other processes of the machine
                               reach the node (attach_server.h); on */
    char socket_group[64];     /* socket_group= : the group let in, "" none */
    long socket_gid;           /* its gid, -1 for none */
    unsigned socket_max_clients; /* socket_max_clients= : connections of
                                  other processes served at once; a
                                  caller over it waits (attach_client.h) */
};

/* ext_config_parse parses @text, a whitespace-separated list of key=value
 * pairs, into @out, filling defaults for keys not given; @db_path (the
 * database file) gives the default dir, "<db_path>-raft". Addresses are
 * "host:port" (raft/address.h: IPv4, [IPv6], hostnames). `listen` is an IP
 * to bind (0.0.0.0 and [::] for every interface; localhost binds
 * 127.0.0.1) and defaults to this id's address in `cluster`; the
 * advertised address (what peers dial) is `advertise`, else a `listen`
 * that is no wildcard, else this id's `cluster` address, which must equal
 * it when given. Without cluster= nor listen=, listen_port is 0 and the
 * node takes its address from the stored configuration at start
 * (ext_config_listen_set); so does a wildcard listen= with neither
 * advertise= nor cluster= (advertise is "" until then) but beside join=. `cluster` may be left out (a restart uses the
 * stored configuration) and is refused beside `join` (cluster= founds a
 * new cluster, join= enters one: a node does one or the other). An
 * address off loopback (listen, advertise, cluster, dial, join) needs
 * peers that authenticate each other (ext_config_peers_authenticated) or
 * insecure=on. Writes @out only on success.
 * Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes) naming the bad or
 * unknown key and why: a blank inside the cluster= or dial= list (its
 * tail would read as a token of its own), missing id, id not in cluster, duplicate id,
 * malformed host:port (what is wrong in it), a hostname as listen host, a
 * wildcard anywhere but listen, a wildcard listen beside join= with
 * neither advertise= nor a cluster= entry for this id, advertise= without listen=, an
 * advertised address that differs from this id's cluster= address, an
 * address off loopback without authenticated peers nor insecure=on,
 * numbers out of range, heartbeat_ms not below election_timeout_ms, a
 * dial= entry naming this server, a server that is not in cluster (when
 * given), or one server twice, join= beside cluster= or
 * force_new_cluster=1, or without listen=, one or two of tls_cert,
 * tls_key and tls_ca without the other (the missing one named),
 * secret_file beside them, an empty or too long path, socket= not on or
 * off, a socket_group= naming no group of this machine. The files are read
 * at start (raft_uv_tls_new), not here. Any thread. */
int ext_config_parse(const char *text, const char *db_path,
                     struct ext_config *out, char *errmsg, size_t errmsg_len);

/* ext_config_check_paths checks, without creating anything, the paths a
 * start of configuration @c (ext_config_parse's) for database file
 * @db_path would need: the database's directory exists and this process
 * may create files in it (SQLite's -wal and -shm, raftsql's -raftsql
 * pointer), the database, when it exists, is a file it may read and
 * write, and the log directory (dir=) either is such a directory or can
 * be created in one that is. Returns 0, or RAFT_INVALID with @errmsg
 * (@errmsg_len bytes) beginning with the key ("database: ..." or
 * "dir: ...") and naming the path and what is wrong with it. Any
 * thread. */
int ext_config_check_paths(const struct ext_config *c, const char *db_path,
                           char *errmsg, size_t errmsg_len);

/* ext_config_cluster builds the configuration cluster= names into @out:
 * every member a voter at its address "host:port". Returns false (and
 * leaves @out empty) when cluster= was not given. Pure. */
bool ext_config_cluster(const struct ext_config *c,
                        struct raft_configuration *out);

/* ext_config_dial gives where this node dials server @id, whose address in
 * the configuration is @address ("host:port"): its dial= override when it
 * has one, else @address; the host is an IP literal (no brackets) or a
 * hostname the transport resolves. Writes @out_host (@host_len bytes) and
 * *@out_port only on success. Errors: RAFT_INVALID (no override and
 * @address does not parse). Pure. */
int ext_config_dial(const struct ext_config *c, raft_id id, const char *address,
                    char *out_host, size_t host_len, uint16_t *out_port);

/* ext_config_listen_set sets @c's listen and advertised address, when
 * neither listen= nor cluster= gave them, to @address (this server's
 * address in the stored configuration); when listen= was a wildcard given
 * without advertise= nor cluster=, the advertised address only (a hostname
 * then does: listen= says what to bind). Errors: RAFT_INVALID with
 * @errmsg (@errmsg_len bytes): @address is not host:port, is a wildcard,
 * is a hostname without listen= (what to bind is then unknown), has
 * another port than the wildcard listen= (give advertise=), or is off
 * loopback without authenticated peers nor insecure=on. Any thread. */
int ext_config_listen_set(struct ext_config *c, const char *address,
                          char *errmsg, size_t errmsg_len);

/* ext_config_listen_format writes @c's listen address as "host:port" (an
 * IPv6 host in brackets) into @out (@len bytes). Pure. */
void ext_config_listen_format(const struct ext_config *c, char *out,
                              size_t len);

/* ext_config_peers_authenticated says whether @c makes peers authenticate
 * each other (TLS: the three tls_ keys, or secret_file), so that
 * addresses off loopback are allowed without insecure=on, which then
 * changes nothing. Pure (config_auth.c). */
bool ext_config_peers_authenticated(const struct ext_config *c);

/* ext_config_metrics_check checks @address ("host:port"), where a program
 * serves raft_metrics() over HTTP for the node @c configures (parsed by
 * ext_config_parse), against the rule for that endpoint: off loopback, it
 * needs the node's certificate (tls_cert and tls_key: the endpoint serves
 * TLS with it) or insecure=on; a pre-shared secret (secret_file) alone
 * does not open it, since a scraper cannot present it. Writes whether the
 * endpoint serves TLS (the certificate files are set) into *@out_tls on
 * success. Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes)
 * beginning "metrics_listen: ": not host:port, a hostname (an IP address
 * says what to bind), or off loopback (a wildcard is) without the
 * certificate nor insecure=on. Pure (config_auth.c); any thread. */
int ext_config_metrics_check(const struct ext_config *c, const char *address,
                             bool *out_tls, char *errmsg, size_t errmsg_len);

/* ext_config_join says whether @cfg asks this node to join a running
 * cluster (join=host:port): it then sends JOIN requests (ext/runtime/change.c)
 * until it is a voter. Pure. */
static inline bool ext_config_join(const struct ext_config *cfg)
{
    return cfg->join_port != 0;
}

#endif /* EXT_CONFIG_H */
