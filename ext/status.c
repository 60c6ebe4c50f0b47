/* raft_status(): a snapshot of the core refreshed by the loop thread, and
 * its rendering as JSON (with jansson, Debian's libjansson). */

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node_internal.h"

static const char *role_name(int role)
{
    switch (role) {
        case RAFT_LEADER:
            return "leader";
        case RAFT_CANDIDATE:
            return "candidate";
        default:
            return "follower";
    }
}

static const char *progress_name(int state)
{
    switch (state) {
        case RAFT_PROGRESS_REPLICATE:
            return "replicate";
        case RAFT_PROGRESS_SNAPSHOT:
            return "snapshot";
        default:
            return "probe";
    }
}

/* json_mean returns @total / @count to two decimals as a JSON real, 0 when
 * @count is 0 (a mean over a run of counters). */
static json_t *json_mean(uint64_t total, uint64_t count)
{
    return json_real(count ? round(100.0 * (double)total / (double)count) /
                                 100.0
                           : 0.0);
}

void status_refresh(struct ext_node *n)
{
    struct ext_status s;
    memset(&s, 0, sizeof s);
    s.role = raft_role(n->core);
    s.term = raft_current_term(n->core);
    s.leader = raft_leader_id(n->core);
    s.commit = raft_commit_index(n->core);
    s.first = raft_first_index(n->core);
    s.last = raft_last_index(n->core);
    s.persisted = raft_persisted_index(n->core);
    for (unsigned i = 0; i < n->cfg.n_members; i++) {
        struct ext_peer_status *p;
        raft_id id = n->cfg.members[i].id;
        if (id == n->cfg.id) {
            continue;
        }
        p = &s.peers[s.n_peers++];
        p->id = id;
        p->connected = n->driver != NULL &&
                       raft_uv_node_connected(n->driver, id);
        p->has_progress = raft_progress(n->core, id, &p->progress) == 0;
    }
    if (n->driver != NULL) {
        raft_uv_node_stats(n->driver, &s.stats);
        s.log_full = raft_uv_node_log_full(n->driver);
    }
    pthread_mutex_lock(&n->mu);
    n->status = s;
    pthread_mutex_unlock(&n->mu);
}

char *ext_node_status(struct ext_node *n)
{
    struct ext_status s;
    char last_error[sizeof n->last_error];
    unsigned queue, waiters;
    bool apply_failed;
    json_t *o, *peers;
    char *text;

    pthread_mutex_lock(&n->mu);
    s = n->status;
    memcpy(last_error, n->last_error, sizeof last_error);
    queue = n->queue_len;
    waiters = n->n_waiters;
    apply_failed = n->apply_failed;
    pthread_mutex_unlock(&n->mu);

    o = json_object();
    peers = json_array();
    if (o == NULL || peers == NULL) {
        json_decref(o);
        json_decref(peers);
        return NULL;
    }
    json_object_set_new(o, "id", json_integer((json_int_t)n->cfg.id));
    json_object_set_new(o, "role", json_string(role_name(s.role)));
    json_object_set_new(o, "term", json_integer((json_int_t)s.term));
    json_object_set_new(o, "leader",
                        s.leader ? json_integer((json_int_t)s.leader)
                                 : json_null());
    json_object_set_new(o, "commit", json_integer((json_int_t)s.commit));
    json_object_set_new(
        o, "applied", json_integer((json_int_t)atomic_load(&n->applied)));
    json_object_set_new(o, "first_index", json_integer((json_int_t)s.first));
    json_object_set_new(o, "last_index", json_integer((json_int_t)s.last));
    json_object_set_new(o, "persisted",
                        json_integer((json_int_t)s.persisted));
    json_object_set_new(o, "queue", json_integer(queue));
    json_object_set_new(o, "waiters", json_integer(waiters));
    json_object_set_new(o, "applying", json_boolean(!apply_failed));
    json_object_set_new(o, "log_full", json_boolean(s.log_full));
    json_object_set_new(o, "log_writes",
                        json_integer((json_int_t)s.stats.n_writes));
    json_object_set_new(o, "entries_per_fsync",
                        json_mean(s.stats.n_entries_written,
                                  s.stats.n_writes));
    json_object_set_new(o, "compactions",
                        json_integer((json_int_t)s.stats.n_compactions));
    json_object_set_new(o, "snapshots_sent",
                        json_integer((json_int_t)s.stats.n_snapshots_sent));
    json_object_set_new(
        o, "snapshots_installed",
        json_integer((json_int_t)s.stats.n_snapshots_installed));
    if (s.stats.snapshot_peer != 0) {
        json_object_set_new(
            o, "snapshot_transfer",
            json_pack("{s:I, s:I, s:I}", "peer",
                      (json_int_t)s.stats.snapshot_peer, "bytes",
                      (json_int_t)s.stats.snapshot_done, "total",
                      (json_int_t)s.stats.snapshot_total));
    } else {
        json_object_set_new(o, "snapshot_transfer", json_null());
    }
    json_object_set_new(o, "durable",
                        json_integer((json_int_t)atomic_load(&n->durable)));
    json_object_set_new(o, "appends_sent",
                        json_integer((json_int_t)s.stats.n_appends_sent));
    json_object_set_new(o, "entries_per_append",
                        json_mean(s.stats.n_entries_sent,
                                  s.stats.n_appends_sent));
    for (unsigned i = 0; i < s.n_peers; i++) {
        const struct ext_peer_status *p = &s.peers[i];
        json_t *j = json_object();
        char addr[96] = "";
        for (unsigned k = 0; k < n->cfg.n_members; k++) {
            if (n->cfg.members[k].id == p->id) {
                snprintf(addr, sizeof addr, "%s:%u", n->cfg.members[k].host,
                         n->cfg.members[k].port);
            }
        }
        json_object_set_new(j, "id", json_integer((json_int_t)p->id));
        json_object_set_new(j, "address", json_string(addr));
        json_object_set_new(j, "connected", json_boolean(p->connected));
        if (p->has_progress) {
            json_object_set_new(
                j, "match",
                json_integer((json_int_t)p->progress.match_index));
            json_object_set_new(
                j, "next", json_integer((json_int_t)p->progress.next_index));
            json_object_set_new(j, "state", json_string(progress_name(
                                                p->progress.state)));
            json_object_set_new(j, "inflight",
                                json_integer(p->progress.inflight));
        }
        json_array_append_new(peers, j);
    }
    json_object_set_new(o, "peers", peers);
    json_object_set_new(o, "last_error", last_error[0]
                                             ? json_string(last_error)
                                             : json_null());
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}
