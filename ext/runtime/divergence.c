/* Divergence detection (divergence.h): the ring of recent (index,
 * checksum) pairs, the per-peer search for the first index that differs,
 * and the CHECKSUM frames that carry both. One mutex guards it all: the
 * apply thread writes the ring, the loop thread compares, status readers
 * copy. */

#include "divergence.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/message.h"
#include "../../sql/sql.h"

/* Ticks an unanswered probe waits before it goes again, and how many
 * times it goes before the search ends where it is. */
#define EXT__DIVERGENCE_PROBE_TRIES 5

/* What this node knows of one peer's values. */
struct peer {
    raft_id id;             /* 0: slot free */
    raft_index same;        /* highest index known equal, 0 */
    raft_index differ;      /* lowest index known to differ, 0 */
    uint64_t theirs;        /* its value at @differ */
    uint64_t ours;          /* ours there */
    raft_index pending;     /* an index it reported that we lack, 0 */
    uint64_t pending_value; /* its value there */
    raft_index probing;     /* the index of the probe in flight, 0 */
    unsigned tries;         /* times it was sent */
    bool settled;           /* the search ended (logged) */
};

struct ext_divergence {
    pthread_mutex_t mu;                  /* guards everything below */
    raft_id self;                        /* this server */
    struct ext_node_log *log;            /* the node's log lines */
    bool on;                             /* the checksum is maintained */
    char why[256];                       /* why not */
    raft_index first;                    /* oldest index in the ring */
    raft_index last;                     /* latest, 0: empty */
    uint64_t *ring;                      /* value of index i at
                                            i % EXT__DIVERGENCE_RING */
    struct peer peers[RAFT_MAX_SERVERS]; /* by id */
    uint64_t last_sent_ms;               /* loop clock of the last report */
};

int divergence_new(raft_id self, struct ext_node_log *log,
                   struct ext_divergence **out)
{
    struct ext_divergence *v = calloc(1, sizeof *v);

    if (v == NULL) {
        return RAFT_NOMEM;
    }
    v->ring = malloc(EXT__DIVERGENCE_RING * sizeof *v->ring);
    if (v->ring == NULL) {
        free(v);
        return RAFT_NOMEM;
    }
    pthread_mutex_init(&v->mu, NULL);
    v->self = self;
    v->log = log;
    snprintf(v->why, sizeof v->why, "not started");
    *out = v;
    return 0;
}

void divergence_free(struct ext_divergence *v)
{
    if (v == NULL) {
        return;
    }
    pthread_mutex_destroy(&v->mu);
    free(v->ring);
    free(v);
}

void divergence_set(struct ext_divergence *v, bool on, const char *why,
                    raft_index index, uint64_t value)
{
    pthread_mutex_lock(&v->mu);
    v->on = on;
    snprintf(v->why, sizeof v->why, "%s", on ? "" : why);
    v->first = v->last = index;
    v->ring[index % EXT__DIVERGENCE_RING] = value;
    /* What the peers' values were compared with is gone. */
    memset(v->peers, 0, sizeof v->peers);
    pthread_mutex_unlock(&v->mu);
}

void divergence_installed(struct ext_divergence *v, struct sql_fsm *fsm)
{
    uint64_t value = 0;
    int on = sql_fsm_checksum(fsm, &value);

    divergence_set(v, on, sql_fsm_checksum_why(fsm), sql_fsm_applied(fsm),
                   value);
}

void divergence_start(struct ext_divergence *v, struct sql_fsm *fsm, bool want)
{
    uint64_t value = 0;

    if (sql_fsm_checksum_enable(fsm, want) != 0) {
        node_log_line(v->log, RAFT_LOG_WARN, "checksum: %s",
                      sql_fsm_errmsg(fsm));
    }
    if (!sql_fsm_checksum(fsm, &value) && want) {
        node_log_line(v->log, RAFT_LOG_WARN, "checksum %s",
                      sql_fsm_checksum_why(fsm));
    }
    divergence_installed(v, fsm);
}

void divergence_applied(struct ext_divergence *v, raft_index index,
                        uint64_t value)
{
    pthread_mutex_lock(&v->mu);
    if (index != v->last + 1) {
        v->first = index; /* a snapshot: what came before is not ours */
    } else if (index - v->first >= EXT__DIVERGENCE_RING) {
        v->first = index - EXT__DIVERGENCE_RING + 1;
    }
    v->last = index;
    v->ring[index % EXT__DIVERGENCE_RING] = value;
    pthread_mutex_unlock(&v->mu);
}

/* ours reads our value at @index into *@out; false when not in the ring.
 * Caller holds mu. */
static bool ours(const struct ext_divergence *v, raft_index index,
                 uint64_t *out)
{
    if (v->last == 0 || index < v->first || index > v->last) {
        return false;
    }
    *out = v->ring[index % EXT__DIVERGENCE_RING];
    return true;
}

/* peer_of finds or takes the slot of peer @id (NULL when full). */
static struct peer *peer_of(struct ext_divergence *v, raft_id id)
{
    struct peer *free_slot = NULL;

    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        if (v->peers[i].id == id) {
            return &v->peers[i];
        }
        if (v->peers[i].id == 0 && free_slot == NULL) {
            free_slot = &v->peers[i];
        }
    }
    if (free_slot != NULL) {
        memset(free_slot, 0, sizeof *free_slot);
        free_slot->id = id;
    }
    return free_slot;
}

/* send_value sends a CHECKSUM frame to @to. */
static void send_value(struct raft_uv_node *d, raft_id self, raft_id to,
                       raft_index index, uint64_t value, bool probe)
{
    struct raft_frame m;

    if (raft_uv_node_peer_wire(d, to) <
        raft_frame_type_wire_min(RAFT_FRAME_CHECKSUM)) {
        return; /* a peer of wire version 1 would drop the connection */
    }
    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_CHECKSUM;
    m.from = self;
    m.to = to;
    m.checksum.index = index;
    m.checksum.checksum = value;
    m.checksum.probe = probe;
    raft_uv_node_send_frame(d, &m); /* lost: the next tick sends again */
}

/* settle ends the search with @p and logs where it ended. Caller holds
 * mu. */
static void settle(struct ext_divergence *v, struct peer *p)
{
    p->settled = true;
    p->probing = 0;
    node_log_error(
        v->log,
        "replica checksum differs from server %" PRIu64
        ": first index known to differ %" PRIu64 " (ours %016" PRIx64
        ", theirs %016" PRIx64 "; %s %" PRIu64 ")",
        p->id, p->differ, p->ours, p->theirs,
        p->differ == p->same + 1 ? "equal at" : "nothing to compare since",
        p->same);
}

/* next_probe goes on with the search with @p: the middle of what lies
 * between the last index known equal (or the oldest we still have) and
 * the first known to differ. Caller holds mu. */
static void next_probe(struct ext_divergence *v, struct raft_uv_node *d,
                       struct peer *p)
{
    raft_index floor = v->first > 0 ? v->first - 1 : 0;
    raft_index lo = p->same > floor ? p->same : floor;
    raft_index mid = 0;
    uint64_t value;

    if (p->differ == 0 || p->settled) {
        return;
    }
    if (p->differ <= lo + 1 ||
        !ours(v, (mid = lo + (p->differ - lo) / 2), &value)) {
        settle(v, p);
        return;
    }
    if (p->probing != mid) {
        p->probing = mid;
        p->tries = 0;
    }
    p->tries++;
    send_value(d, v->self, p->id, mid, value, true);
}

/* compare takes peer @p's value @theirs at @index, which we have. Caller
 * holds mu. */
static void compare(struct ext_divergence *v, struct raft_uv_node *d,
                    struct peer *p, raft_index index, uint64_t theirs)
{
    uint64_t mine = 0;

    if (!ours(v, index, &mine)) {
        return;
    }
    if (index == p->probing) {
        p->probing = 0;
    }
    if (mine == theirs) {
        if (p->differ != 0 && index > p->differ) {
            /* Equal again above where they differed: repaired. */
            node_log_line(v->log, RAFT_LOG_INFO,
                          "replica checksum agrees with server %" PRIu64
                          " again at index %" PRIu64,
                          p->id, index);
            p->differ = 0;
            p->probing = 0;
            p->settled = false;
        }
        if (index > p->same && (p->differ == 0 || index < p->differ)) {
            p->same = index;
            next_probe(v, d, p);
        }
        return;
    }
    if (p->differ == 0 || index < p->differ) {
        bool first = p->differ == 0;
        p->differ = index;
        p->ours = mine;
        p->theirs = theirs;
        p->settled = false;
        if (first) {
            node_log_error(v->log,
                           "replica checksum differs from server %" PRIu64
                           " at index %" PRIu64 " (ours %016" PRIx64
                           ", theirs %016" PRIx64
                           "): searching for the first index that differs",
                           p->id, index, mine, theirs);
        }
        next_probe(v, d, p);
    }
}

void divergence_on_frame(struct ext_divergence *v, struct raft_uv_node *d,
                         const struct raft_frame *m)
{
    const struct raft_checksum *c = &m->checksum;
    struct peer *p;
    uint64_t mine;

    pthread_mutex_lock(&v->mu);
    p = v->on ? peer_of(v, m->from) : NULL;
    if (p == NULL) {
        pthread_mutex_unlock(&v->mu);
        return;
    }
    if (c->probe && ours(v, c->index, &mine)) {
        send_value(d, v->self, p->id, c->index, mine, false);
    } else if (c->probe && v->last != 0 && c->index < v->first) {
        /* Below our ring (we restarted or installed a snapshot since):
         * our oldest value instead, so that the search goes on above it
         * rather than waiting out its tries on an index we lack. */
        send_value(d, v->self, p->id, v->first,
                   v->ring[v->first % EXT__DIVERGENCE_RING], false);
    }
    if (c->index > v->last) {
        p->pending = c->index; /* compared once we have applied it */
        p->pending_value = c->checksum;
    } else {
        compare(v, d, p, c->index, c->checksum);
    }
    pthread_mutex_unlock(&v->mu);
}

void divergence_on_tick(struct ext_divergence *v, struct raft_uv_node *d)
{
    uint64_t now = raft_uv_node_now(d);
    raft_id ids[RAFT_MAX_SERVERS];
    unsigned n;

    pthread_mutex_lock(&v->mu);
    if (!v->on || v->last == 0 ||
        now - v->last_sent_ms < EXT__DIVERGENCE_PERIOD_MS) {
        pthread_mutex_unlock(&v->mu);
        return;
    }
    v->last_sent_ms = now;
    n = raft_uv_node_connected_peers(d, ids, RAFT_MAX_SERVERS);
    for (unsigned i = 0; i < n; i++) {
        send_value(d, v->self, ids[i], v->last,
                   v->ring[v->last % EXT__DIVERGENCE_RING], false);
    }
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        struct peer *p = &v->peers[i];
        if (p->id == 0) {
            continue;
        }
        if (p->pending != 0 && p->pending <= v->last) {
            raft_index k = p->pending;
            p->pending = 0;
            compare(v, d, p, k, p->pending_value);
        }
        if (p->probing != 0) {
            if (p->tries >= EXT__DIVERGENCE_PROBE_TRIES) {
                settle(v, p); /* the peer no longer has that index */
            } else {
                next_probe(v, d, p);
            }
        }
    }
    pthread_mutex_unlock(&v->mu);
}

void divergence_status(struct ext_divergence *v,
                       struct ext_divergence_status *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&v->mu);
    out->on = v->on;
    snprintf(out->why, sizeof out->why, "%s", v->why);
    out->index = v->last;
    out->value = v->last != 0 ? v->ring[v->last % EXT__DIVERGENCE_RING] : 0;
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        const struct peer *p = &v->peers[i];
        /* The peer that differs at the lowest index. */
        if (p->id != 0 && p->differ != 0 &&
            (!out->mismatch || p->differ < out->first)) {
            out->mismatch = true;
            out->server = p->id;
            out->first = p->differ;
            out->ours = p->ours;
            out->theirs = p->theirs;
            out->last_same = p->same;
        }
    }
    pthread_mutex_unlock(&v->mu);
}

raft_index divergence_peer(struct ext_divergence *v, raft_id id)
{
    raft_index r = 0;

    pthread_mutex_lock(&v->mu);
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        if (v->peers[i].id == id && id != 0) {
            r = v->peers[i].differ;
        }
    }
    pthread_mutex_unlock(&v->mu);
    return r;
}

raft_index divergence_outvoted(struct ext_divergence *v,
                               const struct raft_configuration *c,
                               raft_id *leader)
{
    unsigned voters = 0, differ = 0;
    raft_index at = 0;

    pthread_mutex_lock(&v->mu);
    for (unsigned k = 0; k < c->n; k++) {
        const struct raft_server *s = &c->servers[k];
        if (s->role != RAFT_VOTER) {
            continue;
        }
        voters++;
        for (unsigned i = 0; s->id != v->self && i < RAFT_MAX_SERVERS; i++) {
            if (v->peers[i].id == s->id && v->peers[i].differ != 0) {
                differ++;
                if (at == 0 || v->peers[i].differ < at) {
                    at = v->peers[i].differ;
                    *leader = s->id;
                }
            }
        }
    }
    pthread_mutex_unlock(&v->mu);
    return voters > 1 && differ >= voters / 2 + 1 ? at : 0;
}
