/* The node's cluster id (cluster_id.h): read at start, adopted from a
 * leader, learned from the state machine, and proposed by the first
 * leader of a cluster.
 *
 * Happy path: a new cluster's first leader proposes an id as soon as its
 * term's first entry committed; every node applies it and takes it on
 * its next tick (given to the driver for its handshakes, kept in the log
 * directory by the next storage job); at every later start the log
 * directory and the database agree on it.
 * Failure modes: a proposal that fails (leadership lost, storage failed)
 * is logged and tried again in a later term; two leaders in a row may
 * both propose, and the first entry applied wins on every node; a state
 * machine whose id differs from the one adopted is logged at ERROR and
 * wins (it is the replicated one). */

#include "cluster_id.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../../raft/buf.h"
#include "sqlbridge.h"

_Static_assert(SQL_CLUSTER_ID_LEN == RAFT_UV_CLUSTER_ID_LEN,
               "one cluster id length");

struct ext_cluster_id {
    struct ext_store *store;                 /* the log directory */
    struct ext_node_log *log;                /* log lines */
    pthread_mutex_t mu;                      /* guards the four below */
    bool known;                              /* @id is set */
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];      /* this node's id */
    bool applied_new;                        /* @applied waits for the
                                                loop */
    uint8_t applied[RAFT_UV_CLUSTER_ID_LEN]; /* the state machine's */
    raft_term lead_term;  /* the term this node was last seen leading
                             (loop thread) */
    raft_index lead_from; /* the last index when it was first seen
                             leading in it: its term's first entry is at
                             or before (loop thread) */
    raft_term proposed;   /* the term it proposed an id in (loop) */
};

int cluster_id_new(struct ext_store *s, struct ext_node_log *log,
                   struct ext_cluster_id **out)
{
    struct ext_cluster_id *c = calloc(1, sizeof *c);

    if (c == NULL) {
        return RAFT_NOMEM;
    }
    c->store = s;
    c->log = log;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void cluster_id_free(struct ext_cluster_id *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* set_id makes @id this node's id. */
static void set_id(struct ext_cluster_id *c,
                   const uint8_t id[RAFT_UV_CLUSTER_ID_LEN])
{
    pthread_mutex_lock(&c->mu);
    memcpy(c->id, id, sizeof c->id);
    c->known = true;
    pthread_mutex_unlock(&c->mu);
}

int cluster_id_boot(struct ext_cluster_id *c, struct sql_fsm *fsm, char *errmsg,
                    size_t errmsg_len)
{
    uint8_t in_log[RAFT_UV_CLUSTER_ID_LEN], in_db[RAFT_UV_CLUSTER_ID_LEN];
    char a[RAFT_UV_CLUSTER_ID_HEX], b[RAFT_UV_CLUSTER_ID_HEX];
    int rc = store_cluster_id(c->store, in_log, errmsg, errmsg_len);

    if (rc != 0) {
        return rc;
    }
    rc = sql_fsm_cluster_id(fsm, in_db);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "database: %s", sql_fsm_errmsg(fsm));
        return sqlbridge_rc(rc);
    }
    raft_uv_cluster_id_hex(in_log, a);
    raft_uv_cluster_id_hex(in_db, b);
    if (raft_uv_cluster_id_is_zero(in_db)) {
        if (!raft_uv_cluster_id_is_zero(in_log)) {
            set_id(c, in_log); /* adopted; the entry comes later */
        }
        return 0;
    }
    if (raft_uv_cluster_id_is_zero(in_log)) {
        rc = store_cluster_id_write(c->store, in_db, errmsg, errmsg_len);
        if (rc != 0) {
            return rc;
        }
        node_log_line(c->log, RAFT_LOG_INFO,
                      "cluster id %s: from the database, now kept in the "
                      "log directory too",
                      b);
    } else if (memcmp(in_log, in_db, sizeof in_db) != 0) {
        snprintf(errmsg, errmsg_len,
                 "cluster: the log directory belongs to cluster %s, the "
                 "database to cluster %s: they are not one node's (put "
                 "back the pair, or remove both to join a cluster anew)",
                 a, b);
        return RAFT_CORRUPT;
    }
    set_id(c, in_db);
    return 0;
}

bool cluster_id_get(struct ext_cluster_id *c,
                    uint8_t out[RAFT_UV_CLUSTER_ID_LEN])
{
    bool known;

    pthread_mutex_lock(&c->mu);
    known = c->known;
    memcpy(out, c->id, RAFT_UV_CLUSTER_ID_LEN);
    pthread_mutex_unlock(&c->mu);
    if (!known) {
        memset(out, 0, RAFT_UV_CLUSTER_ID_LEN);
    }
    return known;
}

void cluster_id_hex(struct ext_cluster_id *c, char out[RAFT_UV_CLUSTER_ID_HEX])
{
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];

    if (cluster_id_get(c, id)) {
        raft_uv_cluster_id_hex(id, out);
    } else {
        out[0] = '\0';
    }
}

void cluster_id_adopted(struct ext_cluster_id *c, struct raft_uv_node *d,
                        const uint8_t id[RAFT_UV_CLUSTER_ID_LEN], raft_id from)
{
    (void)d;
    (void)from; /* the driver logged the adoption */
    store_cluster_id_set(c->store, id);
    set_id(c, id);
}

void cluster_id_applied(struct ext_cluster_id *c,
                        const uint8_t id[SQL_CLUSTER_ID_LEN])
{
    if (raft_uv_cluster_id_is_zero(id)) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    memcpy(c->applied, id, sizeof c->applied);
    c->applied_new = true;
    pthread_mutex_unlock(&c->mu);
}

/* take_applied makes an id the state machine applied this node's. */
static void take_applied(struct ext_cluster_id *c, struct raft_uv_node *d)
{
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN], had[RAFT_UV_CLUSTER_ID_LEN];
    char a[RAFT_UV_CLUSTER_ID_HEX], b[RAFT_UV_CLUSTER_ID_HEX];
    bool fresh, known;

    pthread_mutex_lock(&c->mu);
    fresh = c->applied_new;
    c->applied_new = false;
    memcpy(id, c->applied, sizeof id);
    known = c->known;
    memcpy(had, c->id, sizeof had);
    pthread_mutex_unlock(&c->mu);
    if (!fresh || (known && memcmp(id, had, sizeof id) == 0)) {
        return;
    }
    raft_uv_cluster_id_hex(id, a);
    if (known) {
        raft_uv_cluster_id_hex(had, b);
        node_log_error(c->log,
                       "cluster id %s applied from the log differs from "
                       "%s, adopted from a leader's handshake: the log's "
                       "wins",
                       a, b);
    } else {
        node_log_line(c->log, RAFT_LOG_INFO, "cluster id %s (applied)", a);
    }
    raft_uv_node_cluster_id_set(d, id);
    store_cluster_id_set(c->store, id);
    set_id(c, id);
}

/* propose proposes a new cluster id in term @term of driver @d. */
static void propose(struct ext_cluster_id *c, struct raft_uv_node *d,
                    raft_term term)
{
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];
    struct raft_buf *b;
    raft_index index = 0;
    raft_term at = 0;
    char hex[RAFT_UV_CLUSTER_ID_HEX];
    int rc;

    c->proposed = term;
    if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id ||
        raft_uv_cluster_id_is_zero(id)) {
        node_log_line(c->log, RAFT_LOG_WARN,
                      "cluster id: getrandom failed: none proposed in term "
                      "%" PRIu64,
                      term);
        return;
    }
    b = raft_buf_new(SQL_CLUSTER_ENTRY_LEN);
    if (b == NULL) {
        return;
    }
    sql_cluster_entry_encode(id, b->data);
    rc = raft_uv_node_propose(d, &b, 1, &index, &at);
    raft_buf_unref(b);
    raft_uv_cluster_id_hex(id, hex);
    if (rc != 0) {
        node_log_line(c->log, RAFT_LOG_WARN, "cluster id %s: not proposed: %s",
                      hex, raft_strerror(rc));
        return;
    }
    node_log_line(c->log, RAFT_LOG_INFO,
                  "cluster id %s proposed at entry %" PRIu64
                  " (this cluster has none yet)",
                  hex, index);
}

void cluster_id_on_tick(struct ext_cluster_id *c, struct raft_uv_node *d,
                        uint64_t applied)
{
    const struct raft *r = raft_uv_node_core(d);
    raft_term term = raft_current_term(r);
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];

    take_applied(c, d);
    if (raft_role(r) != RAFT_LEADER || raft_uv_node_failed(d)) {
        return;
    }
    if (c->lead_term != term) {
        c->lead_term = term;
        c->lead_from = raft_last_index(r);
    }
    /* Once its term's first entry committed, every entry an earlier
     * leader committed is at or below the commit index (Leader
     * Completeness); once applied, an id among them is known. */
    if (c->proposed == term || cluster_id_get(c, id) ||
        raft_commit_index(r) < c->lead_from || applied < raft_commit_index(r)) {
        return;
    }
    propose(c, d, term);
}
