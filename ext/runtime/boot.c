/* The cluster configuration at start (boot.h): bootstrap, the stored
 * configuration that a node with a log takes whatever its founding keys
 * say, the refusal of a database whose log was lost, and
 * force_new_cluster=1.
 *
 * Happy path: a fresh node with cluster= writes entry 1 (the bootstrap
 * configuration, term 1); at every later start the latest configuration
 * entry of the log, else the database's, is in force, and the founding
 * keys (cluster=, join=, bootstrap_from=) are ignored, so that a config
 * file written for the first start stays valid across every membership
 * change.
 * Failure modes: a founding key that would have changed something is
 * ignored with a WARN line naming the difference (nothing written); a
 * new log beside a database that holds a cluster's data is refused
 * (boot_check_log), never founded anew; a write that fails leaves the log
 * as it was (one LMDB transaction). */

#include "boot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lmdb_log/lmdb_log.h"
#include "../../raft/configuration.h"
#include "../../raft/uv_node.h"
#include "attach_sock.h"
#include "sqlbridge.h"

/* The snapshot a cluster bootstrapped from a file starts from: after the
 * bootstrap configuration's index 1, so that a follower that wrote only
 * that entry (cluster=, an empty database) lacks it and is sent the
 * snapshot (InstallSnapshot) instead of entries. */
#define EXT__BOOT_FROM_INDEX 2
#define EXT__BOOT_FROM_TERM 1

void boot_format_servers(const struct raft_configuration *c, char *buf,
                         size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    if (c->n == 0) {
        snprintf(buf, len, "none");
        return;
    }
    for (unsigned i = 0; i < c->n && used < len; i++) {
        const struct raft_server *sv = &c->servers[i];
        int k = snprintf(buf + used, len - used, "%s%" PRIu64 "@%s%s",
                         i > 0 ? "," : "", sv->id, sv->address,
                         sv->role == RAFT_LEARNER ? "/learner" : "");
        if (k < 0) {
            break;
        }
        used += (size_t)k;
    }
}

/* same_servers tells whether @a and @b hold the same servers (ids and
 * addresses), in any order and whatever their roles. */
static bool same_servers(const struct raft_configuration *a,
                         const struct raft_configuration *b)
{
    if (a->n != b->n) {
        return false;
    }
    for (unsigned i = 0; i < a->n; i++) {
        int k = raft_configuration_find(b, a->servers[i].id);
        if (k < 0 || strcmp(b->servers[k].address, a->servers[i].address)) {
            return false;
        }
    }
    return true;
}

/* latest_in_log finds the latest configuration entry of @st into @out and
 * *@out_index (0 when there is none). */
static int latest_in_log(const struct ext_store_state *st,
                         struct raft_configuration *out, raft_index *out_index,
                         char *errmsg, size_t errmsg_len)
{
    *out_index = 0;
    for (unsigned i = st->n_entries; i-- > 0;) {
        const struct raft_entry *e = &st->entries[i];
        char why[128];
        if (e->type != RAFT_ENTRY_CONFIG) {
            continue;
        }
        if (raft_configuration_decode(e->data != NULL ? e->data->data : NULL,
                                      e->data != NULL ? e->data->len : 0, out,
                                      why, sizeof why) != 0) {
            snprintf(errmsg, errmsg_len,
                     "log: the configuration entry %" PRIu64
                     " does not decode: %s",
                     e->index, why);
            return RAFT_CORRUPT;
        }
        *out_index = e->index;
        return 0;
    }
    return 0;
}

/* stored_in_database reads the configuration the state machine holds into
 * @out and *@out_index (0 when none was applied). */
static int stored_in_database(struct sql_fsm *fsm,
                              struct raft_configuration *out,
                              raft_index *out_index, char *errmsg,
                              size_t errmsg_len)
{
    struct sql_config sc;
    char why[128];
    int rc = sql_fsm_config_read(fsm, &sc);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "database: %s", sql_fsm_errmsg(fsm));
        return sqlbridge_rc(rc);
    }
    *out_index = sc.index;
    if (sc.index > 0 &&
        raft_configuration_decode(sc.data, sc.len, out, why, sizeof why) != 0) {
        snprintf(errmsg, errmsg_len,
                 "database: the configuration of entry %" PRIu64
                 " in raftsql_config does not decode: %s",
                 sc.index, why);
        rc = RAFT_CORRUPT;
    }
    sql_config_clear(&sc);
    return rc;
}

/* last_stored returns the index of the last entry of @st (its snapshot
 * boundary when it holds none). */
static raft_index last_stored(const struct ext_store_state *st)
{
    return st->n_entries > 0 ? st->entries[st->n_entries - 1].index
                             : st->snap_index;
}

/* write_entry writes configuration @c as entry @index of @term with hard
 * state @hs, then reads the log into @st anew. */
static int write_entry(struct ext_store *s, struct sql_fsm *fsm,
                       const struct raft_entry *e,
                       const struct raft_hard_state *hs,
                       struct ext_store_state *st, char *errmsg,
                       size_t errmsg_len)
{
    int rc = store_write(s, hs, e, 1, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    store_state_free(st);
    return store_load(s, sql_fsm_applied(fsm), sql_fsm_applied_term(fsm), st,
                      errmsg, errmsg_len);
}

/* force_alone appends the configuration of this server alone, a voter,
 * at a term above the current one (force_new_cluster=1), unless it is the
 * configuration in force @b->conf already. */
static int force_alone(struct ext_store *s, struct sql_fsm *fsm,
                       const struct ext_config *cfg, struct ext_node_log *log,
                       struct ext_store_state *st, struct ext_boot *b,
                       char *errmsg, size_t errmsg_len)
{
    struct raft_configuration alone;
    struct raft_hard_state hs;
    struct raft_entry e;
    char address[RAFT_ADDRESS_MAX + 1], before[1024];
    int k = raft_configuration_find(&b->conf, cfg->id);
    int rc;

    if (k >= 0) {
        snprintf(address, sizeof address, "%s", b->conf.servers[k].address);
    } else if (cfg->advertise[0] != '\0') {
        snprintf(address, sizeof address, "%s", cfg->advertise);
    } else {
        snprintf(errmsg, errmsg_len,
                 "force_new_cluster: server %" PRIu64
                 " is not in the stored configuration: give listen=",
                 cfg->id);
        return RAFT_INVALID;
    }
    raft_configuration_init(&alone);
    raft_configuration_add(&alone, cfg->id, RAFT_VOTER, address);
    if (raft_configuration_equal(&alone, &b->conf)) {
        node_log_line(log, RAFT_LOG_WARN,
                      "force_new_cluster=1: the configuration in force "
                      "(index %" PRIu64
                      ") is this server alone already: "
                      "nothing forced; drop force_new_cluster=1",
                      b->conf_index);
        return 0;
    }
    boot_format_servers(&b->conf, before, sizeof before);
    memset(&e, 0, sizeof e);
    rc = raft_configuration_encode_buf(&alone, &e.data);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "force_new_cluster: %s",
                 raft_strerror(rc));
        return rc;
    }
    e.type = RAFT_ENTRY_CONFIG;
    e.index = last_stored(st) + 1;
    e.term = st->hs.term + 1;
    hs.term = e.term;
    hs.vote = 0;
    rc = write_entry(s, fsm, &e, &hs, st, errmsg, errmsg_len);
    raft_buf_unref(e.data);
    if (rc != 0) {
        return rc;
    }
    node_log_error(log,
                   "force_new_cluster=1: FORCED a new configuration of this "
                   "server alone (%" PRIu64 "@%s, entry %" PRIu64
                   ", term %" PRIu64 ") over %s (index %" PRIu64
                   "): entries the lost majority committed that this node "
                   "lacks are lost, and its own uncommitted entries will "
                   "commit; the other servers must be wiped before they "
                   "join again",
                   cfg->id, address, e.index, e.term, before, b->conf_index);
    b->conf = alone;
    b->conf_index = e.index;
    b->source = EXT_BOOT_LOG;
    b->forced = true;
    return 0;
}

/* ignore_cluster says, in one WARN line, that cluster= (@cluster), which
 * names other servers than the configuration in force @b, is ignored: a
 * node with a log takes its configuration from there, as etcd takes
 * --initial-cluster at a member's first start only. Refusing instead
 * would keep every founder whose file still says cluster= down after the
 * first membership change. */
static void ignore_cluster(struct ext_node_log *log,
                           const struct raft_configuration *cluster,
                           struct ext_boot *b)
{
    char given[1024], stored[1024];
    boot_format_servers(cluster, given, sizeof given);
    boot_format_servers(&b->conf, stored, sizeof stored);
    node_log_line(log, RAFT_LOG_WARN,
                  "cluster= ignored: it says %s; the configuration in "
                  "force (index %" PRIu64
                  ", from the %s) says %s: this node has a log, and "
                  "cluster= only founds a new cluster (membership changes "
                  "go through raft_add()/raft_remove(); the file may keep "
                  "cluster=)",
                  given, b->conf_index,
                  b->source == EXT_BOOT_LOG ? "log" : "database", stored);
    b->ignored |= EXT_BOOT_IGNORED_CLUSTER;
}

/* ignore_join says that join= is ignored on a node that holds a
 * configuration @b: it entered a cluster already. A member is told at
 * INFO; a server the configuration does not name (removed) at WARN, as
 * it stays out: a removed node that joined again by itself at each
 * restart would undo raft_remove(). Clears join= from @cfg, so that no
 * JOIN is sent. */
static void ignore_join(struct ext_config *cfg, struct ext_node_log *log,
                        struct ext_boot *b)
{
    int k = raft_configuration_find(&b->conf, cfg->id);
    bool v6 = strchr(cfg->join_host, ':') != NULL;
    char join[EXT_ADDRESS_MAX + 16];

    snprintf(join, sizeof join, "%s%s%s:%u", v6 ? "[" : "", cfg->join_host,
             v6 ? "]" : "", (unsigned)cfg->join_port);
    if (k >= 0) {
        node_log_line(
            log, RAFT_LOG_INFO,
            "join=%s ignored: server %" PRIu64
            " is a %s of the configuration in force (index "
            "%" PRIu64 ")",
            join, cfg->id,
            b->conf.servers[k].role == RAFT_LEARNER ? "learner" : "voter",
            b->conf_index);
    } else {
        node_log_line(log, RAFT_LOG_WARN,
                      "join=%s ignored: server %" PRIu64
                      " is not in the configuration in force (index "
                      "%" PRIu64
                      ": removed), and join= enters a cluster at a node's "
                      "first start only; to enter again, remove its "
                      "database and log directory %s, then start it "
                      "(docs/deploy.md, \"Add, replace or remove a "
                      "machine\")",
                      join, cfg->id, b->conf_index, cfg->dir);
        b->ignored |= EXT_BOOT_IGNORED_JOIN;
    }
    cfg->join_host[0] = '\0';
    cfg->join_port = 0;
}

/* bootstrap_from makes the content of cfg->bootstrap_from the database's,
 * as a snapshot at EXT__BOOT_FROM_INDEX holding the bootstrap
 * configuration @e (entry 1, term 1), and the log start after it, with
 * hard state @hs. */
static int bootstrap_from(struct ext_store *s, struct sql_fsm *fsm,
                          const struct ext_config *cfg,
                          struct ext_node_log *log, const struct raft_entry *e,
                          const struct raft_hard_state *hs,
                          struct ext_store_state *st, struct ext_boot *b,
                          char *errmsg, size_t errmsg_len)
{
    struct ext_attach_pointer p;
    char tmp[4200], why[1024];
    unsigned n_tables = 0;
    int rc;

    if (attach_sock_find(cfg->bootstrap_from, &p) == 0) {
        snprintf(errmsg, errmsg_len,
                 "bootstrap_from: %s is the database of a running node "
                 "(process %ld): give a copy of it (raft_backup() or VACUUM "
                 "INTO)",
                 cfg->bootstrap_from, p.pid);
        return RAFT_INVALID;
    }
    snprintf(tmp, sizeof tmp, "%.4000s/bootstrap-from.tmp",
             store_snapshot_dir(s));
    rc = sqlbridge_rc(sql_fsm_bootstrap_from(
        fsm, cfg->bootstrap_from, tmp, EXT__BOOT_FROM_INDEX,
        EXT__BOOT_FROM_TERM, e->data->data, e->data->len, &n_tables, why,
        sizeof why));
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "bootstrap_from: %s", why);
        /* A file that is missing, no database or refused is a wrong
         * configuration value (RAFTSQL_INVALID at raft_start). */
        return rc == RAFT_NOTFOUND || rc == RAFT_CORRUPT ? RAFT_INVALID : rc;
    }
    rc = store_write_snapshot(s, hs, EXT__BOOT_FROM_INDEX, EXT__BOOT_FROM_TERM,
                              why, sizeof why);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len,
                 "bootstrap_from: the database holds %s's content but the "
                 "log could not start after it: %s (remove the database "
                 "and %s, then start again)",
                 cfg->bootstrap_from, why, cfg->dir);
        return rc;
    }
    store_state_free(st);
    rc = store_load(s, sql_fsm_applied(fsm), sql_fsm_applied_term(fsm), st,
                    errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    rc = raft_configuration_decode(e->data->data, e->data->len, &b->conf, why,
                                   sizeof why);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "bootstrap_from: %s", why);
        return RAFT_CORRUPT;
    }
    b->prefix = b->conf;
    b->conf_index = 1;
    b->source = EXT_BOOT_DATABASE;
    b->bootstrapped = true;
    node_log_line(log, RAFT_LOG_INFO,
                  "bootstrap_from: a new cluster starts from %s (%u tables), "
                  "as a snapshot at index %d: the other servers receive it "
                  "as one; its cluster id will be new",
                  cfg->bootstrap_from, n_tables, EXT__BOOT_FROM_INDEX);
    return 0;
}

/* refuse_founders refuses bootstrap_from= beside a cluster= of several
 * servers (@cluster): the other founders, started with the same cluster=
 * and empty databases, are a majority that can elect a leader without
 * this node, and found the cluster without the file's content. */
static int refuse_founders(const struct ext_config *cfg,
                           const struct raft_configuration *cluster,
                           char *errmsg, size_t errmsg_len)
{
    int k = raft_configuration_find(cluster, cfg->id);
    const char *self = k >= 0 ? cluster->servers[k].address : "host:port";

    snprintf(errmsg, errmsg_len,
             "bootstrap_from: cluster= names %u servers: the others, "
             "started with the same cluster= and empty databases, could "
             "elect a leader without this node and found the cluster "
             "without %s's content; found it alone (id=%" PRIu64
             " cluster=%" PRIu64
             "@%s bootstrap_from=...), then start each other node with "
             "join=%s and its own listen= (docs/data.md)",
             cluster->n, cfg->bootstrap_from, cfg->id, cfg->id, self, self);
    return RAFT_INVALID;
}

/* unsafe_founders_allowed tells whether a test asks for the start that
 * refuse_founders refuses (RAFTSQL_TEST_UNSAFE_FOUNDERS, test builds
 * only), to see what the other founders' cluster does to this node. */
static bool unsafe_founders_allowed(void)
{
#ifdef RAFTSQL_TEST_FAULTS
    return getenv("RAFTSQL_TEST_UNSAFE_FOUNDERS") != NULL;
#else
    return false;
#endif
}

/* bootstrap writes the bootstrap entry and hard state of a new cluster,
 * or leaves a joining node with no configuration. */
static int bootstrap(struct ext_store *s, struct sql_fsm *fsm,
                     const struct ext_config *cfg, struct ext_node_log *log,
                     const struct raft_configuration *cluster, bool has_cluster,
                     struct ext_store_state *st, struct ext_boot *b,
                     char *errmsg, size_t errmsg_len)
{
    struct raft_hard_state hs;
    struct raft_entry e;
    int rc;

    if (cfg->force_new_cluster) {
        snprintf(errmsg, errmsg_len,
                 "force_new_cluster: this node has no log nor database to "
                 "recover from; it restarts a surviving member alone");
        return RAFT_INVALID;
    }
    if (cfg->join_port != 0 || (!has_cluster && cfg->listen_port != 0)) {
        /* Enters a running cluster: by its own JOIN (join=), or once a
         * member runs raft_add (listen= alone). */
        b->source = EXT_BOOT_JOIN;
        return 0;
    }
    if (!has_cluster) {
        snprintf(errmsg, errmsg_len,
                 "cluster: missing: a new node founds a cluster with "
                 "cluster= (e.g. cluster=1@127.0.0.1:7001,2@127.0.0.1:7002,"
                 "3@127.0.0.1:7003), enters one with join=host:port, or "
                 "waits with listen=host:port until a member runs "
                 "raft_add");
        return RAFT_INVALID;
    }
    rc = raft_configuration_bootstrap(cluster, &e, &hs);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "cluster: bootstrap: %s",
                 raft_strerror(rc));
        return rc;
    }
    if (cfg->bootstrap_from[0] != '\0' && cluster->n != 1 &&
        !unsafe_founders_allowed()) {
        raft_buf_unref(e.data);
        return refuse_founders(cfg, cluster, errmsg, errmsg_len);
    }
    if (cfg->bootstrap_from[0] != '\0') {
        rc = bootstrap_from(s, fsm, cfg, log, &e, &hs, st, b, errmsg,
                            errmsg_len);
        raft_buf_unref(e.data);
        return rc;
    }
    rc = write_entry(s, fsm, &e, &hs, st, errmsg, errmsg_len);
    raft_buf_unref(e.data);
    if (rc == 0) {
        rc = latest_in_log(st, &b->conf, &b->conf_index, errmsg, errmsg_len);
    }
    b->source = EXT_BOOT_LOG;
    b->bootstrapped = true;
    return rc;
}

/* restart decides the configuration in force for a node that has a log
 * or a database (@db, index @db_index, the database's configuration):
 * the founding keys (cluster=, join=, bootstrap_from=) are ignored, with
 * a line naming what differs; cluster= counts only for a log and
 * database that hold no configuration (made before configurations were
 * stored), and join= only for a node that has received none yet. */
static int restart(struct sql_fsm *fsm, struct ext_config *cfg,
                   struct ext_node_log *log,
                   const struct raft_configuration *cluster, bool has_cluster,
                   const struct raft_configuration *db, raft_index db_index,
                   const struct ext_store_state *st, struct ext_boot *b,
                   char *errmsg, size_t errmsg_len)
{
    if (cfg->bootstrap_from[0] != '\0') {
        node_log_line(log, RAFT_LOG_WARN,
                      "bootstrap_from=%s ignored: this node has a log in %s "
                      "(last index %" PRIu64
                      ") and a database applied up to index %" PRIu64
                      ": bootstrap_from= fills a new cluster's first node "
                      "at its first start only (the file may keep it)",
                      cfg->bootstrap_from, cfg->dir, last_stored(st),
                      sql_fsm_applied(fsm));
        b->ignored |= EXT_BOOT_IGNORED_BOOTSTRAP_FROM;
    }
    if (b->conf_index > 0 || db_index > 0) {
        if (b->conf_index > 0) {
            b->source = EXT_BOOT_LOG;
        } else {
            b->conf = *db;
            b->conf_index = db_index;
            b->source = EXT_BOOT_DATABASE;
        }
        if (has_cluster && !cfg->force_new_cluster &&
            !same_servers(cluster, &b->conf)) {
            ignore_cluster(log, cluster, b);
        }
        return 0;
    }
    if (has_cluster) {
        /* A log and database made before configurations were stored:
         * cluster= is the configuration of the compacted prefix. */
        b->prefix = *cluster;
        b->conf = *cluster;
        b->source = EXT_BOOT_CLUSTER;
        return 0;
    }
    if (cfg->join_port != 0) {
        b->source = EXT_BOOT_JOIN; /* joined, no configuration received yet */
        return 0;
    }
    snprintf(errmsg, errmsg_len,
             "cluster: missing: the log in %s and the database hold no "
             "configuration (made before configurations were stored, "
             "or a node that joined and received none yet): give "
             "cluster= as at its first start, or join=",
             cfg->dir);
    return RAFT_INVALID;
}

/* set_listen takes the listen address from this server's address in the
 * configuration in force when neither listen= nor cluster= gave it, and
 * the advertised one when listen= was a wildcard without advertise=. */
static int set_listen(struct ext_config *cfg, const struct ext_boot *b,
                      char *errmsg, size_t errmsg_len)
{
    int k;
    if (cfg->advertise[0] != '\0' ||
        (cfg->listen_port != 0 && ext_config_join(cfg))) {
        return 0;
    }
    k = raft_configuration_find(&b->conf, cfg->id);
    if (k < 0 && cfg->listen_port != 0) {
        char text[EXT_ADDRESS_MAX + 1];
        ext_config_listen_format(cfg, text, sizeof text);
        snprintf(errmsg, errmsg_len,
                 "listen: %s is a wildcard: give advertise= (the address "
                 "peers dial to reach this node) or a cluster= entry for "
                 "server %" PRIu64
                 " (it is not in the stored configuration, "
                 "index %" PRIu64 ")",
                 text, cfg->id, b->conf_index);
        return RAFT_INVALID;
    }
    if (k < 0) {
        snprintf(errmsg, errmsg_len,
                 "listen: missing, and server %" PRIu64
                 " is not in the stored configuration (index %" PRIu64
                 "): give listen=",
                 cfg->id, b->conf_index);
        return RAFT_INVALID;
    }
    return ext_config_listen_set(cfg, b->conf.servers[k].address, errmsg,
                                 errmsg_len);
}

/* owner_differs writes into @errmsg why a start with cfg->id of the
 * database @db_path is refused on a log that belongs to server @owner;
 * returns RAFT_INVALID. */
static int owner_differs(const struct ext_config *cfg, uint64_t owner,
                         const char *db_path, char *errmsg, size_t errmsg_len)
{
    snprintf(errmsg, errmsg_len,
             "id: the log in %s belongs to server %" PRIu64
             " (it first started with id=%" PRIu64
             "), and this start gives id=%" PRIu64
             " for database %s: a server's log holds its term and its "
             "votes, and one log under two ids could vote twice in a "
             "term. Start it with id=%" PRIu64
             " (two configuration files swapped?), or give server %" PRIu64
             " a database and log of its own (docs/deploy.md, \"Add, "
             "replace or remove a machine\")",
             cfg->dir, owner, owner, cfg->id, db_path, owner, cfg->id);
    return RAFT_INVALID;
}

int boot_check_owner(const struct ext_config *cfg, const char *db_path,
                     char *errmsg, size_t errmsg_len)
{
    uint64_t owner = 0;
    char why[512];
    int rc = lmdb_log_peek_server_id(cfg->dir, &owner, why, sizeof why);

    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "dir: cannot read the log: %s", why);
        return rc;
    }
    if (owner != 0 && owner != cfg->id) {
        return owner_differs(cfg, owner, db_path, errmsg, errmsg_len);
    }
    return 0;
}

/* claim_log checks that the log of @s belongs to server cfg->id: a log
 * first started under another id is refused (its term and vote are that
 * server's: one log under two ids could vote twice in a term). A log
 * with no server id yet (new, or written before the record) is given
 * cfg->id. */
static int claim_log(struct ext_store *s, const struct ext_config *cfg,
                     const char *db_path, char *errmsg, size_t errmsg_len)
{
    uint64_t owner = 0;
    int rc = store_server_id(s, &owner, errmsg, errmsg_len);

    if (rc != 0) {
        return rc;
    }
    if (owner == 0) {
        return store_server_id_write(s, cfg->id, errmsg, errmsg_len);
    }
    if (owner != cfg->id) {
        return owner_differs(cfg, owner, db_path, errmsg, errmsg_len);
    }
    return 0;
}

int boot_check_log(struct ext_store *s, struct sql_fsm *fsm,
                   const struct ext_config *cfg, const char *db_path,
                   char *errmsg, size_t errmsg_len)
{
    uint8_t id[SQL_CLUSTER_ID_LEN];
    char hex[RAFT_UV_CLUSTER_ID_HEX];
    struct raft_configuration db;
    raft_index db_index = 0;
    bool is_new = false;
    int rc = store_is_new(s, &is_new, errmsg, errmsg_len);

    if (rc != 0 || !is_new) {
        return rc != 0 ? rc : claim_log(s, cfg, db_path, errmsg, errmsg_len);
    }
    rc = sql_fsm_cluster_id(fsm, id);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "database: %s", sql_fsm_errmsg(fsm));
        return sqlbridge_rc(rc);
    }
    raft_configuration_init(&db);
    rc = stored_in_database(fsm, &db, &db_index, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    if (sql_fsm_applied(fsm) == 0 && db_index == 0 &&
        raft_uv_cluster_id_is_zero(id)) {
        /* A fresh node. */
        return claim_log(s, cfg, db_path, errmsg, errmsg_len);
    }
    raft_uv_cluster_id_hex(id, hex);
    snprintf(errmsg, errmsg_len,
             "log: the database %s holds a cluster's data (cluster id %s, "
             "applied up to index %" PRIu64
             ") but the log in %s is new (no term, no vote, no entry): "
             "they do not belong together. A node whose log was lost "
             "founds no cluster (cluster= would make a second one) and "
             "votes in none; put the log directory back, or replace this "
             "member: raft_remove(%" PRIu64
             ") on a member, remove this database (with its -wal and -shm "
             "files) and %s, then start it with join=HOST:PORT of a member "
             "(and listen=) instead of cluster= (docs/deploy.md, \"Add, "
             "replace or remove a machine\")",
             db_path, raft_uv_cluster_id_is_zero(id) ? "none yet" : hex,
             sql_fsm_applied(fsm), cfg->dir, cfg->id, cfg->dir);
    return RAFT_INVALID;
}

int boot_prepare(struct ext_store *s, struct sql_fsm *fsm,
                 struct ext_config *cfg, struct ext_node_log *log,
                 struct ext_store_state *st, struct ext_boot *out, char *errmsg,
                 size_t errmsg_len)
{
    struct raft_configuration cluster, db;
    raft_index db_index = 0;
    bool has_cluster = ext_config_cluster(cfg, &cluster);
    struct ext_boot b;
    int rc;

    memset(&b, 0, sizeof b);
    raft_configuration_init(&b.prefix);
    raft_configuration_init(&b.conf);
    raft_configuration_init(&db);
    rc = stored_in_database(fsm, &db, &db_index, errmsg, errmsg_len);
    if (rc == 0) {
        rc = latest_in_log(st, &b.conf, &b.conf_index, errmsg, errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    if (db_index > 0) {
        b.prefix = db;
    }
    if (st->hs.term == 0 && st->n_entries == 0 && st->snap_index == 0 &&
        sql_fsm_applied(fsm) == 0 && db_index == 0) {
        rc = bootstrap(s, fsm, cfg, log, &cluster, has_cluster, st, &b, errmsg,
                       errmsg_len);
    } else {
        rc = restart(fsm, cfg, log, &cluster, has_cluster, &db, db_index, st,
                     &b, errmsg, errmsg_len);
    }
    if (rc == 0 && cfg->force_new_cluster) {
        rc = force_alone(s, fsm, cfg, log, st, &b, errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = set_listen(cfg, &b, errmsg, errmsg_len);
    }
    if (rc == 0 && cfg->join_port != 0 && b.source != EXT_BOOT_JOIN) {
        ignore_join(cfg, log, &b);
    }
    if (rc == 0) {
        *out = b;
    }
    return rc;
}
