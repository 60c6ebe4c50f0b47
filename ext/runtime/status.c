/* raft_status(): a snapshot of the core refreshed by the loop thread, and
 * its rendering as JSON (with jansson, Debian's libjansson). */

#include "status.h"

#include "../../raft/configuration.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node_log.h"

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
    return json_real(
        count ? round(100.0 * (double)total / (double)count) / 100.0 : 0.0);
}

/* What raft_status() shows of a peer. */
struct peer_status {
    raft_id id;       /* peer id */
    bool connected;   /* outgoing connection established */
    bool build_known; /* build_id holds the peer's */
    char build_id[RAFT_UV_BUILD_ID_MAX + 1]; /* its build id, from its
                                                latest handshake */
    bool sending;        /* a snapshot goes to it (leader only) */
    uint64_t snap_bytes; /* bytes of it the peer acknowledged */
    uint64_t snap_total; /* its size, bytes */
    bool has_progress;   /* the field below is valid (leader only) */
    struct raft_progress_info progress; /* the leader's view of it */
};

/* The core's and driver's state, as last copied by the loop thread. */
struct snapshot {
    int role;                                /* enum raft_role */
    raft_term term;                          /* current term */
    raft_id leader;                          /* known leader, 0 for none */
    raft_index commit;                       /* commit index */
    raft_index first;                        /* first log index */
    raft_index last;                         /* last log index */
    raft_index persisted;                    /* last durable log index */
    uint64_t leader_contact;                 /* ms since the leader was heard,
                                        UINT64_MAX for none */
    struct peer_status peers[EXT_MAX_NODES]; /* the other servers of conf */
    unsigned n_peers;                        /* entries used in peers */
    struct raft_uv_node_stats stats;         /* the driver's counters */
    bool log_full;                           /* the log refused a write */
    bool log_stalled;                        /* ... for an election timeout
                                                (raft_storage_stalled) */
    char log_full_reason[256];               /* why, "" when it takes
                                                writes */
    struct raft_configuration conf;          /* the configuration in
                                                force */
    raft_index conf_index;                   /* its entry, 0 for the
                                                compacted prefix's */
    uint8_t self_role;                       /* this server's role in it,
                                                0 when no member */
    bool removed;                            /* no member after having
                                                been one (or not joining) */
};

struct ext_status {
    raft_id id;                              /* this server */
    char build_id[RAFT_UV_BUILD_ID_MAX + 1]; /* its build id */
    struct ext_member dials[EXT_MAX_NODES];  /* dial= overrides, n_dials */
    unsigned n_dials;
    bool joining;     /* started with join= and no configuration */
    bool forced;      /* this start forced the configuration */
    bool member_seen; /* a member at some refresh (loop thread) */
    char listen[EXT_ADDRESS_MAX + 1]; /* its advertised address */
    pthread_mutex_t mu;               /* guards now and failure */
    struct snapshot now;              /* (mu) */
    char failure[256];                /* why storage failed, "" while it
                                         has not (mu) */
};

/* load_json renders the latest raft_load_sql of @x, null for none. */
static json_t *load_json(const struct ext_status_extra *x)
{
    const struct ext_load_progress *p = &x->load;
    if (!x->has_load) {
        return json_null();
    }
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
                     "path", p->path, "state",
                     p->state == EXT_LOAD_RUNNING ? "running"
                     : p->state == EXT_LOAD_DONE  ? "done"
                                                  : "failed",
                     "chunks_done", (json_int_t)p->chunks_done, "chunks",
                     (json_int_t)p->n_chunks, "statements",
                     (json_int_t)p->n_stmts, "applied", (json_int_t)p->applied,
                     "skipped", (json_int_t)p->skipped, "bytes_done",
                     (json_int_t)p->bytes_done, "bytes",
                     (json_int_t)p->bytes_total, "error",
                     p->error[0] ? json_string(p->error) : json_null());
}

/* lease_json renders the write lease in force of @x, null for none: its
 * holder's token and server, its id, the plain writers of this node
 * queued for it, its age, the raft_exec calls waiting on this node
 * (behind it, since the leader proposes none meanwhile) and the
 * membership changes waiting for its end (on the leader). */
static json_t *lease_json(const struct ext_status_extra *x)
{
    const struct ext_lease_view *v = &x->lease;
    if (!v->in_force) {
        return json_null();
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "holder",
                     (json_int_t)v->holder, "server", (json_int_t)v->server,
                     "id", (json_int_t)v->id, "age_ms", (json_int_t)v->age_ms,
                     "waiting", (json_int_t)(x->queue + x->waiters), "queued",
                     (json_int_t)v->queued, "changes_waiting",
                     (json_int_t)x->changes_waiting);
}

/* lease_line_json renders the leader's line for the write lease of @x
 * (lease_core_line): each server in it, first in line first, with how
 * long it has waited; empty unless this node leads (@leading). */
static json_t *lease_line_json(const struct ext_status_extra *x, bool leading)
{
    json_t *a = json_array();

    for (unsigned i = 0; leading && a != NULL && i < x->lease.n_line; i++) {
        json_array_append_new(
            a, json_pack("{s:I, s:I}", "server", (json_int_t)x->lease.line[i],
                         "waiting_ms", (json_int_t)x->lease.line_ms[i]));
    }
    return a;
}

int status_new(const struct ext_config *cfg, const char *build_id,
               struct ext_status **out)
{
    struct ext_status *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    s->id = cfg->id;
    snprintf(s->build_id, sizeof s->build_id, "%s", build_id);
    memcpy(s->dials, cfg->dials, sizeof s->dials);
    s->n_dials = cfg->n_dials;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void status_set_boot(struct ext_status *s, bool joining, bool forced,
                     const char *listen)
{
    s->joining = joining;
    s->forced = forced;
    snprintf(s->listen, sizeof s->listen, "%s", listen);
}

bool status_describe_listen(raft_id id, const char *listen,
                            const struct raft_configuration *conf, char *buf,
                            size_t len)
{
    int k = raft_configuration_find(conf, id);
    const char *stored = k >= 0 ? conf->servers[k].address : "";

    if (stored[0] == '\0' || listen[0] == '\0' || strcmp(stored, listen) == 0) {
        return false;
    }
    snprintf(buf, len,
             "the advertised address %s (advertise=, else listen=) differs "
             "from this server's address %s in the configuration in force: "
             "the other servers dial %s (right "
             "behind NAT or in a container; if the node moved, "
             "raft_update(%llu, '%s') on a member, unless one did "
             "already and its entry has not reached this node)",
             listen, stored, stored, (unsigned long long)id, listen);
    return true;
}

void status_free(struct ext_status *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* not_member says whether this server, of role @self_role in the
 * configuration in force (0: none), is no member after having been one,
 * or without having started to join. Loop thread. */
static bool not_member(const struct ext_status *st, int self_role)
{
    return self_role == 0 && (st->member_seen || !st->joining);
}

bool status_refresh(struct ext_status *st, const struct raft *core,
                    struct raft_uv_node *d, struct ext_status_change *out)
{
    struct snapshot s, old;
    bool changed;
    memset(&s, 0, sizeof s);
    s.role = raft_role(core);
    s.term = raft_current_term(core);
    s.leader = raft_leader_id(core);
    s.commit = raft_commit_index(core);
    s.first = raft_first_index(core);
    s.last = raft_last_index(core);
    s.persisted = raft_persisted_index(core);
    s.leader_contact = raft_leader_contact(core);
    s.conf = *raft_current_configuration(core);
    s.conf_index = raft_configuration_index(core);
    s.self_role = raft_self_role(core);
    st->member_seen = st->member_seen || s.self_role != 0;
    s.removed = not_member(st, s.self_role);
    for (unsigned i = 0; i < s.conf.n; i++) {
        struct peer_status *p;
        raft_id id = s.conf.servers[i].id;
        if (id == st->id) {
            continue;
        }
        p = &s.peers[s.n_peers++];
        p->id = id;
        p->connected = d != NULL && raft_uv_node_connected(d, id);
        {
            const char *b =
                d != NULL ? raft_uv_node_peer_build_id(d, id) : NULL;
            p->build_known = b != NULL;
            snprintf(p->build_id, sizeof p->build_id, "%s", b ? b : "");
        }
        p->has_progress = raft_progress(core, id, &p->progress) == 0;
        p->sending = d != NULL && raft_uv_node_peer_snapshot(
                                      d, id, &p->snap_bytes, &p->snap_total);
    }
    if (d != NULL) {
        raft_uv_node_stats(d, &s.stats);
        s.log_full = raft_uv_node_log_full(d);
        s.log_stalled = raft_storage_stalled(core);
        snprintf(s.log_full_reason, sizeof s.log_full_reason, "%s",
                 raft_uv_node_log_full_reason(d));
    }
    pthread_mutex_lock(&st->mu);
    old = st->now;
    st->now = s;
    pthread_mutex_unlock(&st->mu);
    changed = old.role != s.role || old.term != s.term ||
              old.leader != s.leader || old.removed != s.removed;
    if (changed && out != NULL) {
        out->removed = s.removed && !old.removed;
        out->conf_index = s.conf_index;
        out->old_role = old.role;
        out->role = s.role;
        out->old_term = old.term;
        out->term = s.term;
        out->old_leader = old.leader;
        out->leader = s.leader;
    }
    return changed;
}

void status_note_commit(struct ext_status *st, const struct raft *core)
{
    raft_index commit = raft_commit_index(core);
    raft_index first = raft_first_index(core);
    raft_index last = raft_last_index(core);
    raft_index persisted = raft_persisted_index(core);
    pthread_mutex_lock(&st->mu);
    st->now.commit = commit;
    st->now.first = first;
    st->now.last = last;
    st->now.persisted = persisted;
    pthread_mutex_unlock(&st->mu);
}

void status_describe_change(const struct ext_status_change *c, char *buf,
                            size_t len)
{
    const char *was = c->old_role == RAFT_LEADER ? "stepped down: " : "";
    if (c->role == RAFT_LEADER) {
        snprintf(buf, len, "became leader of term %llu",
                 (unsigned long long)c->term);
    } else if (c->role == RAFT_CANDIDATE) {
        snprintf(buf, len, "%sstarted an election for term %llu", was,
                 (unsigned long long)c->term);
    } else if (c->leader != 0) {
        snprintf(buf, len, "%sfollows leader %llu in term %llu", was,
                 (unsigned long long)c->leader, (unsigned long long)c->term);
    } else {
        snprintf(buf, len, "%sterm %llu, no leader known", was,
                 (unsigned long long)c->term);
    }
}

void status_describe_removal(bool removed, raft_index conf_index, char *buf,
                             size_t len)
{
    if (removed) {
        snprintf(buf, len,
                 "removed from the cluster at index %llu: it no longer "
                 "campaigns",
                 (unsigned long long)conf_index);
    } else {
        snprintf(buf, len,
                 "joining: not in the configuration yet (index %llu); it "
                 "never campaigns until added",
                 (unsigned long long)conf_index);
    }
}

/* current copies the last snapshot under the lock. */
static struct snapshot current(struct ext_status *st)
{
    struct snapshot s;
    pthread_mutex_lock(&st->mu);
    s = st->now;
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* removal_committed says whether snapshot @s shows this server removed
 * by a committed configuration. */
static bool removal_committed(const struct snapshot *s)
{
    return s->removed && (s->conf_index == 0 || s->commit >= s->conf_index);
}

bool status_removed(const struct ext_status *st, const struct raft *core,
                    raft_index *out_index)
{
    struct snapshot s;
    s.removed = not_member(st, raft_self_role(core));
    s.conf_index = raft_configuration_index(core);
    s.commit = raft_commit_index(core);
    if (!removal_committed(&s)) {
        return false;
    }
    *out_index = s.conf_index;
    return true;
}

void status_view(struct ext_status *st, struct ext_status_view *out)
{
    struct snapshot s = current(st);
    memset(out, 0, sizeof *out);
    out->id = st->id;
    out->role = s.role;
    out->term = s.term;
    out->leader = s.leader;
    out->commit = s.commit;
    out->first = s.first;
    out->last = s.last;
    out->persisted = s.persisted;
    for (unsigned i = 0; i < s.n_peers; i++) {
        out->peers[i].id = s.peers[i].id;
        out->peers[i].connected = s.peers[i].connected;
        out->peers[i].has_progress = s.peers[i].has_progress;
        out->peers[i].match = s.peers[i].progress.match_index;
    }
    out->n_peers = s.n_peers;
    out->stats = s.stats;
    out->log_full = s.log_full;
    out->failed = status_failure(st, NULL, 0);
    out->removed = removal_committed(&s);
}

int status_role(struct ext_status *st)
{
    return current(st).role;
}

raft_id status_leader(struct ext_status *st)
{
    return current(st).leader;
}

bool status_log_full(struct ext_status *st, char *reason, size_t len)
{
    struct snapshot s = current(st);
    if (reason != NULL && len > 0) {
        snprintf(reason, len, "%s", s.log_full_reason);
    }
    return s.log_full && s.log_stalled;
}

void status_note_failure(struct ext_status *st, struct raft_uv_node *d)
{
    if (!raft_uv_node_failed(d)) {
        return;
    }
    pthread_mutex_lock(&st->mu);
    if (st->failure[0] == '\0') {
        snprintf(st->failure, sizeof st->failure, "%s",
                 raft_uv_node_failure(d)[0] != '\0' ? raft_uv_node_failure(d)
                                                    : "log write failed");
    }
    pthread_mutex_unlock(&st->mu);
}

bool status_failure(struct ext_status *st, char *why, size_t len)
{
    bool failed;
    pthread_mutex_lock(&st->mu);
    failed = st->failure[0] != '\0';
    if (why != NULL && len > 0) {
        snprintf(why, len, "%s", st->failure);
    }
    pthread_mutex_unlock(&st->mu);
    return failed;
}

/* configuration_json adds to @o the configuration in force (index,
 * members with id, address, role and auto_promote, whether this start
 * forced it) and
 * this server's place in it: "member" (voter, learner, or "not a member")
 * and "member_why" (why not a member, else null). */
/* json_hex64 returns @v as 16 lowercase hex digits (a JSON integer holds
 * no u64). */
static json_t *json_hex64(uint64_t v)
{
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return json_string(buf);
}

/* checksum_json adds "checksum": the replica checksum and what the
 * comparison with the peers found (divergence.h). */
static void checksum_json(json_t *o, const struct ext_divergence_status *d)
{
    json_t *c = json_object(), *m = json_null();

    json_object_set_new(c, "on", json_boolean(d->on));
    json_object_set_new(c, "why", json_string(d->why));
    json_object_set_new(c, "index", json_integer((json_int_t)d->index));
    json_object_set_new(c, "value", d->on ? json_hex64(d->value) : json_null());
    if (d->mismatch) {
        m = json_object();
        json_object_set_new(m, "server", json_integer((json_int_t)d->server));
        json_object_set_new(m, "index", json_integer((json_int_t)d->first));
        json_object_set_new(m, "ours", json_hex64(d->ours));
        json_object_set_new(m, "theirs", json_hex64(d->theirs));
        json_object_set_new(m, "equal_at",
                            json_integer((json_int_t)d->last_same));
    }
    json_object_set_new(c, "mismatch", m);
    json_object_set_new(o, "checksum", c);
}

static void configuration_json(json_t *o, const struct ext_status *st,
                               const struct snapshot *s)
{
    json_t *c = json_object(), *members = json_array();
    char why[160] = "";
    for (unsigned i = 0; i < s->conf.n; i++) {
        const struct raft_server *sv = &s->conf.servers[i];
        json_array_append_new(
            members, json_pack("{s:I, s:s, s:s, s:b}", "id", (json_int_t)sv->id,
                               "address", sv->address, "role",
                               sv->role == RAFT_LEARNER ? "learner" : "voter",
                               "auto_promote", sv->auto_promote));
    }
    json_object_set_new(c, "index", json_integer((json_int_t)s->conf_index));
    json_object_set_new(c, "members", members);
    json_object_set_new(c, "forced", json_boolean(st->forced));
    json_object_set_new(o, "configuration", c);
    json_object_set_new(o, "member",
                        json_string(s->self_role == RAFT_VOTER     ? "voter"
                                    : s->self_role == RAFT_LEARNER ? "learner"
                                                                   : "not a "
                                                                     "member"));
    if (s->self_role == 0) {
        status_describe_removal(s->removed, s->conf_index, why, sizeof why);
    }
    json_object_set_new(o, "member_why",
                        why[0] ? json_string(why) : json_null());
    json_object_set_new(o, "removed", json_boolean(removal_committed(s)));
}

/* json_diverged is raft_status()'s "diverged": null, or since (ISO 8601
 * UTC, ms), reason, at_index and repair (where the repair stands). */
static json_t *json_diverged(const struct ext_status_extra *x)
{
    char since[EXT_ISO_TIME_LEN];
    json_t *d;
    if (!x->diverged) {
        return json_null();
    }
    node_log_iso_time(x->divergence.since_ms, since);
    d = json_object();
    json_object_set_new(d, "since", json_string(since));
    json_object_set_new(d, "reason", json_string(x->divergence.reason));
    json_object_set_new(d, "at_index",
                        json_integer((json_int_t)x->divergence.at_index));
    json_object_set_new(d, "repair", json_string(x->repair));
    return d;
}

/* json_start_verify is raft_status()'s "start_verify": null, or where the
 * start's background verification of the file stands (start_scan.h). */
static json_t *json_start_verify(const struct ext_status_extra *x)
{
    const struct ext_start_scan_view *v = &x->start_scan;
    json_t *o;
    if (!x->has_start_scan) {
        return json_null();
    }
    o = json_object();
    json_object_set_new(o, "state",
                        json_string(start_scan_state_name(v->state)));
    json_object_set_new(o, "why", json_string(v->why));
    json_object_set_new(
        o, "index",
        v->index > 0 ? json_integer((json_int_t)v->index) : json_null());
    json_object_set_new(o, "elapsed_ms",
                        json_integer((json_int_t)v->elapsed_ms));
    json_object_set_new(o, "error",
                        v->error[0] ? json_string(v->error) : json_null());
    return o;
}

char *status_json(struct ext_status *st, const struct ext_status_extra *x)
{
    struct snapshot s = current(st);
    json_t *o, *peers, *warnings;
    char *text;

    o = json_object();
    peers = json_array();
    warnings = json_array();
    if (o == NULL || peers == NULL || warnings == NULL) {
        json_decref(o);
        json_decref(peers);
        json_decref(warnings);
        return NULL;
    }
    json_object_set_new(o, "id", json_integer((json_int_t)st->id));
    json_object_set_new(
        o, "cluster_id",
        x->cluster_id[0] != '\0' ? json_string(x->cluster_id) : json_null());
    json_object_set_new(o, "build_id", json_string(st->build_id));
    json_object_set_new(o, "tls", json_string(x->tls));
    json_object_set_new(o, "tls_cert_expires",
                        x->tls_cert_expires[0] != '\0'
                            ? json_string(x->tls_cert_expires)
                            : json_null());
    json_object_set_new(o, "role", json_string(role_name(s.role)));
    json_object_set_new(o, "term", json_integer((json_int_t)s.term));
    json_object_set_new(
        o, "leader",
        s.leader ? json_integer((json_int_t)s.leader) : json_null());
    json_object_set_new(o, "commit", json_integer((json_int_t)s.commit));
    json_object_set_new(o, "applied", json_integer((json_int_t)x->applied));
    checksum_json(o, &x->checksum);
    json_object_set_new(o, "first_index", json_integer((json_int_t)s.first));
    json_object_set_new(o, "last_index", json_integer((json_int_t)s.last));
    json_object_set_new(o, "persisted", json_integer((json_int_t)s.persisted));
    /* A node behind what it knows is committed is catching up: its reads
     * are that many entries old. */
    json_object_set_new(
        o, "lag",
        json_integer(
            (json_int_t)(s.commit > x->applied ? s.commit - x->applied : 0)));
    json_object_set_new(o, "catching_up", json_boolean(s.commit > x->applied));
    json_object_set_new(o, "leader_contact_ms",
                        s.leader_contact == UINT64_MAX
                            ? json_null()
                            : json_integer((json_int_t)s.leader_contact));
    /* The lag behind the leader as last heard (staleness.h). */
    json_object_set_new(o, "lag_entries",
                        json_integer((json_int_t)x->staleness.lag_entries));
    json_object_set_new(o, "lag_ms",
                        x->staleness.leader_known
                            ? json_integer((json_int_t)x->staleness.lag_ms)
                            : json_null());
    json_object_set_new(o, "stale", json_boolean(x->staleness.stale));
    json_object_set_new(
        o, "stale_reason",
        x->staleness.stale ? json_string(x->staleness.reason) : json_null());
    json_object_set_new(o, "queue", json_integer(x->queue));
    json_object_set_new(o, "waiters", json_integer(x->waiters));
    json_object_set_new(o, "applying", json_boolean(x->applying));
    json_object_set_new(
        o, "apply_error",
        x->apply_error[0] ? json_string(x->apply_error) : json_null());
    json_object_set_new(o, "diverged", json_diverged(x));
    json_object_set_new(o, "repairs", json_integer((json_int_t)x->repairs));
    json_object_set_new(o, "start_verify", json_start_verify(x));
    {
        char failure[256];
        json_object_set_new(o, "log_failed",
                            status_failure(st, failure, sizeof failure)
                                ? json_string(failure)
                                : json_null());
    }
    json_object_set_new(o, "log_full", json_boolean(s.log_full));
    json_object_set_new(
        o, "log_full_reason",
        s.log_full_reason[0] ? json_string(s.log_full_reason) : json_null());
    json_object_set_new(o, "log_writes",
                        json_integer((json_int_t)s.stats.n_writes));
    json_object_set_new(o, "entries_per_fsync",
                        json_mean(s.stats.n_entries_written, s.stats.n_writes));
    json_object_set_new(o, "compactions",
                        json_integer((json_int_t)s.stats.n_compactions));
    json_object_set_new(o, "snapshots_sent",
                        json_integer((json_int_t)s.stats.n_snapshots_sent));
    json_object_set_new(
        o, "snapshots_installed",
        json_integer((json_int_t)s.stats.n_snapshots_installed));
    json_object_set_new(o, "install_error",
                        s.stats.install_error[0]
                            ? json_string(s.stats.install_error)
                            : json_null());
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
    json_object_set_new(o, "load", load_json(x));
    json_object_set_new(o, "lease", lease_json(x));
    json_object_set_new(o, "lease_line",
                        lease_line_json(x, s.role == RAFT_LEADER));
    json_object_set_new(o, "durable", json_integer((json_int_t)x->durable));
    json_object_set_new(o, "loop_max_tick_ms",
                        json_integer((json_int_t)s.stats.loop_max_tick_ms));
    json_object_set_new(o, "appends_sent",
                        json_integer((json_int_t)s.stats.n_appends_sent));
    json_object_set_new(
        o, "entries_per_append",
        json_mean(s.stats.n_entries_sent, s.stats.n_appends_sent));
    for (unsigned i = 0; i < s.n_peers; i++) {
        const struct peer_status *p = &s.peers[i];
        json_t *j = json_object();
        char dial[sizeof st->dials[0].address] = "";
        int k = raft_configuration_find(&s.conf, p->id);
        for (unsigned d = 0; d < st->n_dials; d++) {
            const struct ext_member *m = &st->dials[d];
            if (m->id == p->id) {
                snprintf(dial, sizeof dial, "%s", m->address);
            }
        }
        json_object_set_new(j, "id", json_integer((json_int_t)p->id));
        json_object_set_new(
            j, "address", json_string(k >= 0 ? s.conf.servers[k].address : ""));
        json_object_set_new(
            j, "role",
            json_string(k >= 0 && s.conf.servers[k].role == RAFT_LEARNER
                            ? "learner"
                            : "voter"));
        /* Where this node dials it when dial= overrides the address. */
        json_object_set_new(j, "dial",
                            dial[0] ? json_string(dial) : json_null());
        json_object_set_new(j, "connected", json_boolean(p->connected));
        /* As its latest handshake said, null before one arrived. */
        json_object_set_new(
            j, "build_id",
            p->build_known ? json_string(p->build_id) : json_null());
        if (p->build_known && strcmp(p->build_id, st->build_id) != 0) {
            char w[2 * RAFT_UV_BUILD_ID_MAX + 256];
            snprintf(w, sizeof w,
                     "peer %llu runs another SQLite build (source id '%s'; "
                     "this node '%s'): steps of max_request_steps may be "
                     "counted differently until every node runs one build",
                     (unsigned long long)p->id, p->build_id, st->build_id);
            json_array_append_new(warnings, json_string(w));
        }
        if (p->has_progress) {
            json_object_set_new(
                j, "match", json_integer((json_int_t)p->progress.match_index));
            json_object_set_new(
                j, "next", json_integer((json_int_t)p->progress.next_index));
            json_object_set_new(j, "state",
                                json_string(progress_name(p->progress.state)));
            json_object_set_new(j, "inflight",
                                json_integer(p->progress.inflight));
            /* The snapshot being sent to it: bytes acknowledged of
             * total, null when none. */
            json_object_set_new(
                j, "snapshot",
                p->sending ? json_pack("{s:I, s:I}", "bytes",
                                       (json_int_t)p->snap_bytes, "total",
                                       (json_int_t)p->snap_total)
                           : json_null());
        }
        json_array_append_new(peers, j);
    }
    json_object_set_new(o, "peers", peers);
    {
        char w[1024];
        if (status_describe_listen(st->id, st->listen, &s.conf, w, sizeof w)) {
            json_array_append_new(warnings, json_string(w));
        }
    }
    configuration_json(o, st, &s);
    /* Conditions worth an operator's look that stop nothing. */
    json_object_set_new(o, "warnings", warnings);
    json_object_set_new(
        o, "last_error",
        x->last_error[0] ? json_string(x->last_error) : json_null());
    json_object_set_new(o, "last_error_age_ms",
                        x->last_error[0]
                            ? json_integer((json_int_t)x->last_error_age_ms)
                            : json_null());
    /* Means are rounded to two decimals; six significant digits print
     * them as such (0.92, not 0.92000000000000004). */
    text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return text;
}
