/* The cluster configuration at start: a new cluster's bootstrap from
 * cluster= (or bootstrap_from=), a joining node (join=), the stored
 * configuration that a node with a log takes whatever its founding keys
 * say (they are ignored then, as etcd ignores --initial-cluster), the
 * refusal of a database whose log was lost, and force_new_cluster=1, the
 * recovery of a surviving node from a lost quorum (docs/operations.md,
 * "Membership"). */

#ifndef EXT_BOOT_H
#define EXT_BOOT_H

#include <stdbool.h>

#include "../../raft/raft.h"
#include "../../sql/sql.h"
#include "config.h"
#include "node_log.h"
#include "store.h"

/* Where the configuration in force at start came from. */
enum ext_boot_source {
    EXT_BOOT_LOG = 1,      /* the latest configuration entry of the log */
    EXT_BOOT_DATABASE = 2, /* the state machine's (raftsql_config): the
                              log holds no configuration entry */
    EXT_BOOT_CLUSTER = 3,  /* cluster= : a log and database made before
                              configurations were stored */
    EXT_BOOT_JOIN = 4,     /* none yet: a node that joins (join=) */
};

/* The founding keys a start ignored with a WARN line (bits of
 * ext_boot.ignored): each would have changed something. */
enum ext_boot_ignored {
    EXT_BOOT_IGNORED_CLUSTER = 1,        /* cluster= named other servers */
    EXT_BOOT_IGNORED_JOIN = 2,           /* join= on a removed server */
    EXT_BOOT_IGNORED_BOOTSTRAP_FROM = 4, /* bootstrap_from= on a node with
                                            a log */
};

/* What boot_prepare decided. */
struct ext_boot {
    struct raft_configuration prefix; /* the compacted prefix's: give it
                                         as raft_config.configuration */
    struct raft_configuration conf;   /* in force at start */
    raft_index conf_index;            /* the index of its entry, 0 when
                                         it has none (CLUSTER, JOIN) */
    int source;                       /* enum ext_boot_source */
    bool bootstrapped;                /* this start wrote the bootstrap
                                         entry of a new cluster */
    bool forced;                      /* this start wrote the forced
                                         configuration (force_new_cluster) */
    unsigned ignored;                 /* enum ext_boot_ignored bits */
};

/* boot_check_owner is boot_check_log's refusal of a log that belongs to
 * another server, for a check before a start (raftsql_config_check,
 * raftsql-node --check): it reads the log in cfg->dir read-only, beside
 * a node of another process that may run on it, and writes nothing (not
 * in a process whose node has that log open: LMDB takes one open of an
 * environment per process). Returns 0 (no log, a
 * log of no server yet, or one of cfg->id); RAFT_INVALID with @errmsg
 * (@errmsg_len bytes) naming both ids; RAFT_CORRUPT or RAFT_IOERR when
 * the log cannot be read. Thread: any. */
int boot_check_owner(const struct ext_config *cfg, const char *db_path,
                     char *errmsg, size_t errmsg_len);

/* boot_check_log refuses a start whose log (the store @s) is new (never
 * written: store_is_new) while the state machine @fsm of the database
 * @db_path holds a cluster's data (an applied index, a cluster id or a
 * stored configuration): the node's log was lost. Such a node must not
 * found a cluster from cluster= (two wiped founders would be a quorum of
 * their own) nor vote (it forgot its votes and its log); the message
 * says how to replace the member (raft_remove, then join=). A fresh node
 * (no log, no such data) and a node with a log pass. Run it before
 * cluster_id_boot and store_load, which would write to the new log and
 * refuse with less. @cfg gives the id and log directory named in the
 * message (@errmsg, @errmsg_len bytes). It also refuses a log that
 * belongs to another server (its "server_id" record, written at the
 * first start that passes here, differs from cfg->id: two configuration
 * files swapped, a node's directory copied to make another).
 * Errors: RAFT_INVALID (the refusals), store_is_new's, the database's
 * when it cannot be read (RAFT_IOERR, RAFT_CORRUPT), and the log's when
 * its server id cannot be read or written (RAFT_CORRUPT, RAFT_NOSPACE,
 * RAFT_IOERR). Thread: any, before the driver starts. */
int boot_check_log(struct ext_store *s, struct sql_fsm *fsm,
                   const struct ext_config *cfg, const char *db_path,
                   char *errmsg, size_t errmsg_len);

/* boot_prepare decides the configuration in force for the log @st (as
 * store_load read it from @s) and the state machine @fsm, before the core
 * is built, and writes to the log what that needs:
 *   - a fresh node (no hard state, no entry, nothing applied) started with
 *     cluster= writes the bootstrap entry and hard state
 *     (raft_configuration_bootstrap); with join= it starts with an empty
 *     configuration;
 *   - otherwise the configuration in force is the latest configuration
 *     entry of the log, else the database's, and the founding keys are
 *     ignored: a cluster= whose servers (ids and addresses) differ from
 *     it, and bootstrap_from=, with a WARN line naming the difference;
 *     join= on a server that configuration names at INFO, on one it does
 *     not name (removed) at WARN, and cleared from @cfg so that no JOIN
 *     is sent (bits of out->ignored); a log and database that hold no
 *     configuration (made before configurations were stored) take
 *     cluster= as the compacted prefix's, and a node that joined and
 *     received none yet keeps join=;
 *   - force_new_cluster=1 appends a configuration entry of this server
 *     alone, as a voter, at a term above the current one (logged at
 *     ERROR), unless that is the configuration in force already.
 * After a write @st is read anew (store_load). Sets @cfg's listen address
 * from the configuration when neither listen= nor cluster= gave it. Lines
 * go to @log. Writes *@out only on success; @errmsg (@errmsg_len bytes)
 * says why on failure.
 * Errors: RAFT_INVALID (no cluster= nor join= where one is needed,
 * force_new_cluster=1 on a fresh node, no listen address; a
 * bootstrap_from= file that is missing, no regular file, no database, a
 * replica copy that differs from its running checksum, or refused beside
 * a cluster= of several servers or into a database that is no fresh
 * one), RAFT_CORRUPT (a stored configuration that does not decode), and
 * store_write's and store_load's. Thread: any, before the driver starts. */
int boot_prepare(struct ext_store *s, struct sql_fsm *fsm,
                 struct ext_config *cfg, struct ext_node_log *log,
                 struct ext_store_state *st, struct ext_boot *out, char *errmsg,
                 size_t errmsg_len);

/* boot_format_servers writes @c's servers as "id@address" items separated
 * by commas (learners marked "/learner") into @buf (@len bytes, always
 * NUL-terminated; "none" for no server). Pure. */
void boot_format_servers(const struct raft_configuration *c, char *buf,
                         size_t len);

#endif /* EXT_BOOT_H */
