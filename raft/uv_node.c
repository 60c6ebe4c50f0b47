/* The node driver: runs the pure Raft core on a libuv loop thread of its
 * own and carries out its updates (raft.h driver contract).
 *
 * Happy path of an update:
 *   1. hard state and entries are merged into the storage job queue
 *      (raft/persist.h, run by uv_storage.c: group commit);
 *   2. messages go out at once, unless the update changed the hard state:
 *      then they are copied into the job and sent once it is durable;
 *   3. committed entries go to the application's apply callback;
 *   4. followers named in snapshot_to get a snapshot (uv_snapshot.c).
 * Every tick (stepped after the sockets were polled, on_tick) steps
 * RAFT_EVENT_TICK, after RAFT_EVENT_CONTACT for each
 * peer the transport saw alive in the middle of a frame since the last
 * tick, and a peer whose connection broke since the last tick is
 * reported with RAFT_EVENT_UNREACHABLE (at the first tick of a term this
 * server leads, every peer not connected is), and on a leader one whose
 * connection came back with RAFT_EVENT_CONTACT; after the application's tick
 * callback, RAFT_EVENT_DECLINE follows what the application answers to
 * the diverged callback (follow_diverged). Of the
 * frames received (frame.h), the core's messages are stepped, FORWARD and
 * FORWARD_RESULT go to the application's forward callback and snapshot
 * chunks to uv_snapshot.c.
 * Failure modes: a failed storage write (log full, I/O error) is logged at
 * ERROR and the driver stops stepping the core: it neither acknowledges nor
 * votes again until restarted, so nothing undurable is ever acknowledged.
 * A message the core rejects is logged and dropped. */

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "configuration.h"
#include "message.h"
#include "uv_node_internal.h"

void raft_uv_node_log(struct raft_uv_node *d, int level, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (d->cb.log == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    d->cb.log(d->cb.data, level, line);
}

/* ---- Stepping the core -------------------------------------------------- */

/* dial_of fills @out with where to dial server @sv: the application's
 * dial callback, else its address as host:port (address.h). */
static bool dial_of(struct raft_uv_node *d, const struct raft_server *sv,
                    struct raft_uv_peer *out)
{
    struct raft_address a;

    memset(out, 0, sizeof *out);
    out->id = sv->id;
    raft_uv_peer_set_identity(out, sv->address);
    if (d->cb.dial != NULL) {
        return d->cb.dial(d->cb.data, sv->id, sv->address, out);
    }
    if (raft_address_parse(sv->address, &a, NULL, 0) != 0) {
        return false;
    }
    snprintf(out->host, sizeof out->host, "%s", a.host);
    out->port = a.port;
    return true;
}

void raft_uv_peer_set_identity(struct raft_uv_peer *p, const char *address)
{
    struct raft_address a;

    p->identity[0] = '\0';
    if (raft_address_parse(address, &a, NULL, 0) == 0) {
        snprintf(p->identity, sizeof p->identity, "%s", a.host);
    }
}

/* drop_peer forgets the @i-th peer: its snapshot transfer is dropped
 * (the core is not stepped: this runs inside raft_uv_node_step, whose
 * update must stay valid) and the transport closes its connection. */
static void drop_peer(struct raft_uv_node *d, unsigned i)
{
    raft_id id = d->peers[i];
    unsigned last = d->n_peers - 1;

    raft_uv_snapshot_forget(d, id);
    d->tr->remove_peer(d->transport, id);
    d->peers[i] = d->peers[last];
    d->connected[i] = d->connected[last];
    d->sends[i] = d->sends[last];
    d->n_peers--;
}

/* tracked tells whether the core of @d replicates to server @id: a
 * member of the configuration in force, or a leaving server (raft_leaving:
 * it learns so that it was removed). */
static bool tracked(struct raft_uv_node *d, raft_id id)
{
    return raft_configuration_find(raft_current_configuration(d->raft), id) >=
               0 ||
           raft_configuration_find(raft_leaving(d->raft), id) >= 0;
}

/* add_peer makes server @id a peer of the driver (its connection state
 * and snapshot transfer tracked), as far as there is room. */
static void add_peer(struct raft_uv_node *d, raft_id id)
{
    unsigned i;

    for (i = 0; i < d->n_peers; i++) {
        if (d->peers[i] == id) {
            return;
        }
    }
    if (d->n_peers < RAFT_MAX_VOTERS) {
        i = d->n_peers++;
        d->peers[i] = id;
        d->connected[i] = false;
        memset(&d->sends[i], 0, sizeof d->sends[i]);
        d->sends[i].to = id;
        d->sends[i].fd = -1;
    }
}

/* follow_server dials server @sv of the configuration in force (or a
 * leaving one) when it is not this node, and makes it a peer. A leaving
 * server without an address is one the core recalled (raft_leaving: a
 * removed server that campaigns): it dialled this node, whose transport
 * dialled it back at the address its handshake gave (uv.h), so it is
 * made a peer without dialling. */
static void follow_server(struct raft_uv_node *d, const struct raft_server *sv,
                          bool leaving)
{
    struct raft_uv_peer p;
    int rc;

    if (sv->id == d->id) {
        return;
    }
    if (leaving && sv->address[0] == '\0') {
        add_peer(d, sv->id);
        return;
    }
    if (!dial_of(d, sv, &p)) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "server %" PRIu64
                         ": address '%s' is not host:port: not dialled",
                         sv->id, sv->address);
        return;
    }
    rc = d->tr->add_peer(d->transport, &p);
    if (rc != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "server %" PRIu64 " at %s:%u: %s",
                         sv->id, p.host, (unsigned)p.port, raft_strerror(rc));
        return;
    }
    add_peer(d, sv->id);
}

/* follow_configuration makes the peers those of the configuration in
 * force and the leaving servers the core still replicates to: the others
 * are forgotten, new ones dialled, changed addresses re-dialled. The
 * leader this server follows is kept while it leads, even once a
 * configuration without it is in force (a leader that removes itself
 * leads until that entry commits, and learns of the commit from its
 * followers' answers, thesis §4.2.2); d->drop_pending makes each tick
 * call it again until it is dropped. */
static void follow_configuration(struct raft_uv_node *d)
{
    const struct raft_configuration *c = raft_current_configuration(d->raft);
    const struct raft_configuration *leaving = raft_leaving(d->raft);
    unsigned i;

    if (d->transport == NULL || d->tr->add_peer == NULL ||
        d->tr->remove_peer == NULL) {
        return;
    }
    d->drop_pending = false;
    for (i = d->n_peers; i-- > 0;) {
        if (tracked(d, d->peers[i])) {
            continue;
        }
        if (d->peers[i] == raft_leader_id(d->raft)) {
            d->drop_pending = true;
        } else {
            raft_uv_node_log(d, RAFT_LOG_INFO,
                             "server %" PRIu64
                             " left the configuration: no longer dialled",
                             d->peers[i]);
            drop_peer(d, i);
        }
    }
    for (i = 0; i < c->n; i++) {
        follow_server(d, &c->servers[i], false);
    }
    for (i = 0; i < leaving->n; i++) {
        follow_server(d, &leaving->servers[i], true);
    }
}

int raft_uv_node_step(struct raft_uv_node *d, const struct raft_event *event,
                      struct raft_update *out)
{
    struct raft_update local;
    struct raft_update *u = out != NULL ? out : &local;
    int rc;

    if (d->disk_failed) {
        /* Without working storage the node must not vote or acknowledge. */
        return RAFT_IOERR;
    }
    if (d->stopping) {
        return RAFT_SHUTDOWN;
    }
    rc = raft_step(d->raft, event, u);
    if (rc != 0) {
        return rc;
    }
    if (event->type == RAFT_EVENT_RECEIVE &&
        event->receive.type == RAFT_MSG_REQUEST_VOTE && !d->said_not_voting &&
        raft_current_configuration(d->raft)->n == 0) {
        /* The core refused (raft.h, struct raft_config); once is enough. */
        d->said_not_voting = true;
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "no configuration yet: not voting (server %" PRIu64
                         " asked for a vote in term %" PRIu64 ")",
                         event->receive.from, event->receive.request_vote.term);
    }
    if (u->configuration_changed) {
        follow_configuration(d);
    }
    if (u->n_entries > 0 && d->cb.appended != NULL) {
        d->cb.appended(d->cb.data, u->entries, u->n_entries);
    }
    if (u->hard_state_changed || u->n_entries > 0) {
        rc = raft_uv_storage_merge(d, u);
        if (rc != 0) {
            raft_uv_storage_fail(d, "out of memory");
            return rc;
        }
    }
    if (!u->hard_state_changed) {
        for (unsigned i = 0; i < u->n_messages; i++) {
            raft_uv_node_send(d, &u->messages[i]);
        }
    }
    if (u->n_committed > 0 && d->cb.apply != NULL) {
        d->cb.apply(d->cb.data, u->committed, u->n_committed);
    }
    if (u->n_reads > 0 && d->cb.read != NULL) {
        d->cb.read(d->cb.data, u->reads, u->n_reads);
    }
    raft_uv_storage_start(d);
    if (u->n_snapshot_to > 0) {
        raft_uv_snapshot_want(d, u->snapshot_to, u->n_snapshot_to);
    }
    if (d->cb.stepped != NULL) {
        d->cb.stepped(d->cb.data);
    }
    return 0;
}

int raft_uv_node_propose(struct raft_uv_node *d, struct raft_buf *const *bufs,
                         unsigned n, raft_index *out_index, raft_term *out_term)
{
    struct raft_event ev = {.type = RAFT_EVENT_PROPOSE};
    struct raft_update u;
    int rc;
    ev.propose.bufs = bufs;
    ev.propose.n = n;
    rc = raft_uv_node_step(d, &ev, &u);
    if (rc == 0) {
        *out_index = u.proposed_index;
        *out_term = u.proposed_term;
    }
    return rc;
}

int raft_uv_node_read_index(struct raft_uv_node *d, uint64_t tag)
{
    struct raft_event ev = {.type = RAFT_EVENT_READ_INDEX};
    ev.read_index.tag = tag;
    return raft_uv_node_step(d, &ev, NULL);
}

int raft_uv_node_send_frame(struct raft_uv_node *d, const struct raft_frame *f)
{
    int rc;
    if (d->transport == NULL) {
        return RAFT_SHUTDOWN;
    }
    rc = d->tr->send(d->transport, f);
    if (rc != 0 && rc != RAFT_NOCONN) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "send to %" PRIu64 ": %s", f->to,
                         raft_strerror(rc));
    }
    return rc;
}

int raft_uv_node_send(struct raft_uv_node *d, const struct raft_message *m)
{
    struct raft_frame f;
    int rc;
    raft_frame_wrap(m, &f);
    rc = raft_uv_node_send_frame(d, &f);
    if (rc == 0 && m->type == RAFT_MSG_APPEND_ENTRIES &&
        m->append_entries.n_entries > 0) {
        d->stats.n_appends_sent++;
        d->stats.n_entries_sent += m->append_entries.n_entries;
    }
    return rc;
}

const struct raft *raft_uv_node_core(const struct raft_uv_node *d)
{
    return d->raft;
}

uint64_t raft_uv_node_now(struct raft_uv_node *d)
{
    uv_update_time(&d->loop);
    return uv_now(&d->loop);
}

void raft_uv_node_stats(const struct raft_uv_node *d,
                        struct raft_uv_node_stats *out)
{
    *out = d->stats;
}

bool raft_uv_node_failed(const struct raft_uv_node *d)
{
    return d->disk_failed;
}

const char *raft_uv_node_failure(const struct raft_uv_node *d)
{
    return d->disk_failure;
}

bool raft_uv_node_connected(const struct raft_uv_node *d, raft_id id)
{
    return d->transport != NULL && d->tr->connected(d->transport, id);
}

unsigned raft_uv_node_connected_peers(const struct raft_uv_node *d,
                                      raft_id *ids, unsigned max)
{
    if (d->transport == NULL || d->tr->connected_peers == NULL) {
        return 0;
    }
    return d->tr->connected_peers(d->transport, ids, max);
}

int raft_uv_node_probe(struct raft_uv_node *d, const char *host, uint16_t port)
{
    struct raft_uv_peer p;

    if (d->transport == NULL || d->tr->add_peer == NULL) {
        return RAFT_INVALID;
    }
    memset(&p, 0, sizeof p);
    p.id = RAFT_UV_PROBE_ID;
    snprintf(p.host, sizeof p.host, "%s", host);
    p.port = port;
    return d->tr->add_peer(d->transport, &p);
}

unsigned raft_uv_node_peer_wire(const struct raft_uv_node *d, raft_id id)
{
    if (!raft_uv_node_connected(d, id)) {
        return 0;
    }
    if (d->tr->peer_wire == NULL) {
        return RAFT_WIRE_VERSION;
    }
    return d->tr->peer_wire(d->transport, id);
}

unsigned raft_uv_node_peer_wire_last(const struct raft_uv_node *d, raft_id id)
{
    if (d->transport == NULL || d->tr->peer_wire_last == NULL) {
        return raft_uv_node_peer_wire(d, id);
    }
    return d->tr->peer_wire_last(d->transport, id);
}

const char *raft_uv_node_peer_build_id(const struct raft_uv_node *d, raft_id id)
{
    if (d->transport == NULL || d->tr->peer_build_id == NULL) {
        return NULL;
    }
    return d->tr->peer_build_id(d->transport, id);
}

void raft_uv_node_cluster_id_set(struct raft_uv_node *d,
                                 const uint8_t id[RAFT_UV_CLUSTER_ID_LEN])
{
    memcpy(d->cluster_id, id, RAFT_UV_CLUSTER_ID_LEN);
    if (d->transport != NULL && d->tr->set_cluster_id != NULL) {
        d->tr->set_cluster_id(d->transport, id);
    }
}

/* adopt_cluster_id takes the cluster id of the sender of @m, when this
 * server has none and @m replicates to it (uv_node.h). */
static void adopt_cluster_id(struct raft_uv_node *d, const struct raft_frame *m)
{
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];
    char hex[RAFT_UV_CLUSTER_ID_HEX];

    if ((m->type != RAFT_MSG_APPEND_ENTRIES &&
         m->type != RAFT_FRAME_SNAPSHOT_CHUNK) ||
        !raft_uv_cluster_id_is_zero(d->cluster_id) ||
        d->tr->peer_cluster_id == NULL ||
        !d->tr->peer_cluster_id(d->transport, m->from, id) ||
        raft_uv_cluster_id_is_zero(id)) {
        return;
    }
    raft_uv_node_cluster_id_set(d, id);
    raft_uv_cluster_id_hex(id, hex);
    raft_uv_node_log(d, RAFT_LOG_INFO,
                     "cluster id %s, adopted from server %" PRIu64
                     ", the first leader to replicate to this server",
                     hex, m->from);
    if (d->cb.cluster_id != NULL) {
        d->cb.cluster_id(d->cb.data, id, m->from);
    }
}

/* ---- Loop callbacks ----------------------------------------------------- */

static void on_recv(void *data, const struct raft_frame *m)
{
    struct raft_uv_node *d = data;
    struct raft_event ev;
    int rc;
    if (d->stopping) {
        return;
    }
    adopt_cluster_id(d, m);
    if (m->type == RAFT_FRAME_SNAPSHOT_CHUNK ||
        m->type == RAFT_FRAME_SNAPSHOT_CHUNK_RESULT ||
        m->type == RAFT_FRAME_REPAIR_REQUEST) {
        raft_uv_snapshot_message(d, m);
        return;
    }
    if (!raft_frame_is_message(m)) {
        /* The application's frames: FORWARD, FORWARD_RESULT, CHECKSUM,
         * READ_INDEX, LEASE and their results. */
        if (d->cb.forward != NULL) {
            d->cb.forward(d->cb.data, m);
        }
        return;
    }
    ev.type = RAFT_EVENT_RECEIVE;
    if (!raft_frame_unwrap(m, &ev.receive)) {
        return; /* the decoder knows no other type */
    }
    rc = raft_uv_node_step(d, &ev, NULL);
    if (rc != 0 && rc != RAFT_IOERR && rc != RAFT_SHUTDOWN) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "message type %u from %" PRIu64 ": %s", m->type,
                         m->from, raft_strerror(rc));
    }
}

/* A gap between two ticks this long is logged (INFO): the loop thread
 * was held, and heartbeats and elections wait while it is, ms. */
#define RAFT__UV_SLOW_TICK_MS 200

/* note_tick_gap records the time since the previous tick, the loop's
 * longest tick so far (stats.loop_max_tick_ms), and logs a long one. */
static void note_tick_gap(struct raft_uv_node *d, uint64_t now)
{
    uint64_t gap = d->last_tick_at != 0 && now > d->last_tick_at
                       ? now - d->last_tick_at
                       : 0;

    d->last_tick_at = now;
    if (gap > d->stats.loop_max_tick_ms) {
        d->stats.loop_max_tick_ms = gap;
    }
    if (gap >= RAFT__UV_SLOW_TICK_MS) {
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "the loop thread ticked %" PRIu64
                         " ms after the previous tick (every %u ms): it was "
                         "held or starved of CPU; longest so far %" PRIu64
                         " ms",
                         gap, d->tick_ms, d->stats.loop_max_tick_ms);
    }
}

/* step_contacts steps RAFT_EVENT_CONTACT for each peer the transport
 * saw alive since the previous tick in the middle of a frame (once per
 * tick per peer): the heartbeats behind a large entry cannot arrive
 * sooner, and neither the followers' election timers nor the leader's
 * check-quorum should take its transfer for silence. */
static void step_contacts(struct raft_uv_node *d)
{
    raft_id ids[RAFT_MAX_SERVERS];
    unsigned n;

    if (d->transport == NULL || d->tr->contacts == NULL) {
        return;
    }
    n = d->tr->contacts(d->transport, ids, RAFT_MAX_SERVERS);
    for (unsigned i = 0; i < n && !d->stopping; i++) {
        struct raft_event ev;
        memset(&ev, 0, sizeof ev);
        ev.type = RAFT_EVENT_CONTACT;
        ev.contact.id = ids[i];
        raft_uv_node_step(d, &ev, NULL);
    }
}

static void on_tick_idle(uv_idle_t *h);

bool raft_uv_node_diverged(struct raft_uv_node *d)
{
    return d->cb.diverged != NULL && d->cb.diverged(d->cb.data);
}

void raft_uv_node_decline_leadership(struct raft_uv_node *d)
{
    atomic_store(&d->no_lead, true);
    raft_uv_node_wake(d);
}

/* follow_diverged makes the core decline TimeoutNow while the state
 * machine is diverged or the server is about to stop
 * (raft_uv_node_decline_leadership), and take it again once neither
 * holds (RAFT_EVENT_DECLINE, stepped only when the answer differs from
 * the core's state). After the tick callback: a divergence it judged is
 * followed in the same tick. */
static void follow_diverged(struct raft_uv_node *d)
{
    bool decline = atomic_load(&d->no_lead) || raft_uv_node_diverged(d);
    struct raft_event ev;

    if (decline == raft_declining(d->raft)) {
        return;
    }
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_DECLINE;
    ev.decline.on = decline;
    raft_uv_node_step(d, &ev, NULL);
}

/* run_tick steps the tick that came due: the contacts, TICK, then what
 * the driver does each tick. */
static void run_tick(struct raft_uv_node *d)
{
    struct raft_event ev = {.type = RAFT_EVENT_TICK};
    ev.tick.now = raft_uv_node_now(d);
    /* Before the TICK: it is the tick that would time them out. */
    step_contacts(d);
    raft_uv_node_step(d, &ev, NULL);
    /* A new leader's progress knows no broken connection: it is told of
     * the peers already down once, so that a transfer never picks one. */
    bool new_lead = raft_role(d->raft) == RAFT_LEADER &&
                    d->told_term != raft_current_term(d->raft);
    if (new_lead) {
        d->told_term = raft_current_term(d->raft);
    }
    for (unsigned i = 0; i < d->n_peers && !d->stopping; i++) {
        bool now_up = raft_uv_node_connected(d, d->peers[i]);
        if (!d->connected[i] && now_up && raft_role(d->raft) == RAFT_LEADER) {
            /* Back (a restarted follower): no longer cut off. Not on a
             * follower, whose election timer it would restart. */
            struct raft_event up;
            memset(&up, 0, sizeof up);
            up.type = RAFT_EVENT_CONTACT;
            up.contact.id = d->peers[i];
            raft_uv_node_step(d, &up, NULL);
        }
        if ((d->connected[i] || new_lead) && !now_up) {
            struct raft_event un;
            memset(&un, 0, sizeof un);
            un.type = RAFT_EVENT_UNREACHABLE;
            un.unreachable.id = d->peers[i];
            raft_uv_node_step(d, &un, NULL);
            if (d->connected[i]) {
                raft_uv_snapshot_unreachable(d, d->peers[i]);
            }
        }
        d->connected[i] = now_up;
    }
    if (!d->stopping) {
        if (d->drop_pending) {
            follow_configuration(d); /* its leader may have changed */
        }
        raft_uv_snapshot_tick(d);
        raft_uv_storage_tick(d);
    }
    if (d->cb.tick != NULL && !d->stopping) {
        d->cb.tick(d->cb.data);
    }
    if (!d->stopping) {
        follow_diverged(d);
    }
}

/* The tick timer only marks the tick due; it runs after the next poll
 * of the sockets (on_tick_check). libuv runs timers before I/O in each
 * loop iteration: after the loop was held (starved of CPU, or a long
 * callback), the peers' frames and bytes of that time wait unread, and a
 * tick stepped first would take the time for their silence (an election,
 * a leader stepping down). The idle handle makes that poll return at
 * once. */
static void on_tick(uv_timer_t *t)
{
    struct raft_uv_node *d = t->data;

    note_tick_gap(d, raft_uv_node_now(d));
    if (!d->tick_due && !d->stopping) {
        d->tick_due = true;
        uv_idle_start(&d->tick_idle, on_tick_idle);
    }
}

static void on_tick_idle(uv_idle_t *h)
{
    (void)h; /* only there for the poll not to block */
}

static void on_tick_check(uv_check_t *h)
{
    struct raft_uv_node *d = h->data;

    if (!d->tick_due) {
        return;
    }
    d->tick_due = false;
    uv_idle_stop(&d->tick_idle);
    if (!d->stopping) {
        run_tick(d);
    }
}

static void on_wake(uv_async_t *a)
{
    struct raft_uv_node *d = a->data;
    if (!d->stopping && atomic_load(&d->no_lead) && !raft_declining(d->raft)) {
        follow_diverged(d); /* before a TimeoutNow the next poll reads */
    }
    if (d->cb.wake != NULL && !d->stopping) {
        d->cb.wake(d->cb.data);
    }
}

static void transport_log(void *data, int level, const char *msg)
{
    raft_uv_node_log(data, level, "transport: %s", msg);
}

static void on_transport_closed(void *data)
{
    struct raft_uv_node *d = data;
    d->transport = NULL;
}

static void on_stop(uv_async_t *a)
{
    struct raft_uv_node *d = a->data;
    d->stopping = true;
    raft_uv_remove_abandon(d);
    uv_timer_stop(&d->tick);
    uv_close((uv_handle_t *)&d->tick, NULL);
    uv_close((uv_handle_t *)&d->tick_idle, NULL);
    uv_close((uv_handle_t *)&d->tick_check, NULL);
    uv_close((uv_handle_t *)&d->wake, NULL);
    uv_close((uv_handle_t *)&d->stop_async, NULL);
    if (d->transport != NULL) {
        d->tr->close(d->transport, on_transport_closed, d);
    }
}

static void loop_main(void *arg)
{
    struct raft_uv_node *d = arg;
    sigset_t pipe_only;
    /* Named for top -H and perf (best effort). */
    pthread_setname_np(pthread_self(), "raftsql-loop");
    /* Every socket write happens on this thread. A write to a connection
     * the peer has closed and reset raises SIGPIPE in the writing thread,
     * and its default action ends the host process. Blocked here (only
     * here: the host's own disposition is left alone), the write fails
     * with EPIPE and the connection is re-dialled; the signal stays
     * pending on this thread and is discarded when it exits. */
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);
    uv_run(&d->loop, UV_RUN_DEFAULT);
}

/* ---- The TCP transport (uv.h) ------------------------------------------ */

static int tcp_start(void *data, uv_loop_t *loop,
                     const struct raft_uv_node_config *cfg,
                     raft_uv_recv_cb recv_cb, raft_log_cb log_cb,
                     void *recv_data, void **out, char *errmsg,
                     size_t errmsg_len)
{
    struct raft_uv_transport *t;
    int rc = raft_uv_transport_start(
        loop, cfg->id, cfg->listen_host, cfg->listen_port, cfg->advertise,
        cfg->peers, cfg->n_peers, cfg->max_frame_bytes, cfg->build_id, cfg->tls,
        recv_cb, log_cb, recv_data, &t, errmsg, errmsg_len);
    if (rc == 0) {
        *out = t;
    }
    return rc;
}

static int tcp_send(void *t, const struct raft_frame *f)
{
    return raft_uv_transport_send(t, f);
}

static bool tcp_connected(const void *t, raft_id id)
{
    return raft_uv_transport_connected(t, id);
}

static const char *tcp_peer_build_id(const void *t, raft_id id)
{
    return raft_uv_transport_peer_build_id(t, id);
}

static void tcp_set_cluster_id(void *t,
                               const uint8_t id[RAFT_UV_CLUSTER_ID_LEN])
{
    raft_uv_transport_set_cluster_id(t, id);
}

static bool tcp_peer_cluster_id(const void *t, raft_id id,
                                uint8_t out[RAFT_UV_CLUSTER_ID_LEN])
{
    return raft_uv_transport_peer_cluster_id(t, id, out);
}

static void tcp_close(void *t, void (*cb)(void *data), void *data)
{
    raft_uv_transport_close(t, cb, data);
}

static int tcp_add_peer(void *t, const struct raft_uv_peer *p)
{
    return raft_uv_transport_add_peer(t, p);
}

static int tcp_remove_peer(void *t, raft_id id)
{
    return raft_uv_transport_remove_peer(t, id);
}

static unsigned tcp_connected_peers(const void *t, raft_id *ids, unsigned max)
{
    return raft_uv_transport_connected_peers(t, ids, max);
}

static unsigned tcp_peer_wire(const void *t, raft_id id)
{
    return raft_uv_transport_peer_wire(t, id);
}

static unsigned tcp_peer_wire_last(const void *t, raft_id id)
{
    return raft_uv_transport_peer_wire_last(t, id);
}

static unsigned tcp_contacts(void *t, raft_id *ids, unsigned max)
{
    return raft_uv_transport_contacts(t, ids, max);
}

static const struct raft_uv_node_transport tcp_transport = {
    .start = tcp_start,
    .send = tcp_send,
    .connected = tcp_connected,
    .peer_build_id = tcp_peer_build_id,
    .set_cluster_id = tcp_set_cluster_id,
    .peer_cluster_id = tcp_peer_cluster_id,
    .close = tcp_close,
    .add_peer = tcp_add_peer,
    .remove_peer = tcp_remove_peer,
    .connected_peers = tcp_connected_peers,
    .peer_wire = tcp_peer_wire,
    .peer_wire_last = tcp_peer_wire_last,
    .contacts = tcp_contacts,
};

/* ---- Start and stop ----------------------------------------------------- */

int raft_uv_node_start(struct raft *r, const struct raft_uv_node_config *cfg,
                       const struct raft_persist_storage *storage,
                       const struct raft_uv_node_callbacks *cb,
                       struct raft_uv_node **out, char *errmsg,
                       size_t errmsg_len)
{
    return raft_uv_node_start_with(r, cfg, storage, cb, NULL, out, errmsg,
                                   errmsg_len);
}

int raft_uv_node_start_with(struct raft *r,
                            const struct raft_uv_node_config *cfg,
                            const struct raft_persist_storage *storage,
                            const struct raft_uv_node_callbacks *cb,
                            const struct raft_uv_node_seams *seams,
                            struct raft_uv_node **out, char *errmsg,
                            size_t errmsg_len)
{
    struct raft_uv_node *d;
    int rc;

    if (cfg->tick_ms == 0 || storage->log.append == NULL ||
        cfg->n_peers >= RAFT_MAX_VOTERS ||
        (storage->fsm.snapshot_create != NULL &&
         (cfg->snapshot_dir == NULL || cfg->snapshot_chunk_bytes == 0)) ||
        (storage->fsm.snapshot_install != NULL &&
         (storage->log.compact == NULL || storage->log.entry_term == NULL ||
          storage->log.reset == NULL))) {
        snprintf(errmsg, errmsg_len,
                 "node: tick_ms, storage (the log's compact, entry_term and "
                 "reset with snapshot installs), snapshot_dir and chunk size "
                 "required, at most %d peers",
                 RAFT_MAX_VOTERS - 1);
        return RAFT_INVALID;
    }
    d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    d->id = cfg->id;
    d->storage = *storage;
    raft_histogram_init(&d->stats.write_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    raft_histogram_init(&d->stats.write_entries, raft_histogram_sizes,
                        raft_histogram_n_sizes);
    raft_persist_init(&d->persist);
    d->cb = *cb;
    d->tick_ms = cfg->tick_ms;
    d->storage_stall_ms =
        cfg->storage_stall_ms != 0 ? cfg->storage_stall_ms : 1000;
    d->n_peers = cfg->n_peers;
    for (unsigned i = 0; i < cfg->n_peers; i++) {
        d->peers[i] = cfg->peers[i].id;
        d->sends[i].to = cfg->peers[i].id;
        d->sends[i].fd = -1;
    }
    d->recv.fd = -1;
    snprintf(d->snapshot_dir, sizeof d->snapshot_dir, "%s",
             cfg->snapshot_dir != NULL ? cfg->snapshot_dir : ".");
    d->chunk_bytes = cfg->snapshot_chunk_bytes;
    d->snapshot_rate = cfg->snapshot_rate_bytes;
    d->stall_ms = seams != NULL && seams->snapshot_stall_ms > 0
                      ? seams->snapshot_stall_ms
                      : RAFT__UV_SNAPSHOT_STALL_MS;
    d->install_rate = seams != NULL && seams->install_rate > 0
                          ? seams->install_rate
                          : RAFT__UV_SNAPSHOT_INSTALL_RATE;
    if (seams != NULL) {
        d->on_remove = seams->on_remove;
        d->on_remove_data = seams->on_remove_data;
    }
    d->tr = seams != NULL && seams->transport != NULL ? seams->transport
                                                      : &tcp_transport;
    rc = uv_loop_init(&d->loop);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "uv_loop_init: %s", uv_strerror(rc));
        free(d);
        return RAFT_IOERR;
    }
    rc = d->tr->start(d->tr->data, &d->loop, cfg, on_recv, transport_log, d,
                      &d->transport, errmsg, errmsg_len);
    if (rc != 0) {
        uv_loop_close(&d->loop);
        free(d);
        return rc;
    }
    raft_uv_node_cluster_id_set(d, cfg->cluster_id);
    d->raft = r;
    d->pace_last = raft_last_index(r); /* what it held is no write */
    raft_uv_remove_leftovers(d);
    uv_async_init(&d->loop, &d->wake, on_wake);
    d->wake.data = d;
    uv_async_init(&d->loop, &d->stop_async, on_stop);
    d->stop_async.data = d;
    uv_timer_init(&d->loop, &d->tick);
    d->tick.data = d;
    uv_idle_init(&d->loop, &d->tick_idle);
    d->tick_idle.data = d;
    uv_check_init(&d->loop, &d->tick_check);
    d->tick_check.data = d;
    uv_check_start(&d->tick_check, on_tick_check);
    uv_timer_start(&d->tick, on_tick, 0, cfg->tick_ms);
    /* Written before the loop runs, so callbacks may already use it. */
    *out = d;
    rc = uv_thread_create(&d->thread, loop_main, d);
    if (rc != 0) {
        *out = NULL;
        snprintf(errmsg, errmsg_len, "cannot start the loop thread: %s",
                 uv_strerror(rc));
        on_stop(&d->stop_async);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        free(d);
        return RAFT_IOERR;
    }
    return 0;
}

void raft_uv_node_wake(struct raft_uv_node *d)
{
    uv_async_send(&d->wake);
}

void raft_uv_node_stop(struct raft_uv_node *d)
{
    /* The loop finishes the running storage job, closes its handles and
     * returns; after the join nothing runs on it. */
    uv_async_send(&d->stop_async);
    uv_thread_join(&d->thread);
    uv_loop_close(&d->loop);
    raft_uv_storage_close(d);
    raft_uv_snapshot_close(d);
    raft_close(d->raft);
    free(d);
}

/* ---- Membership (added by the sqlmember branch) ------------------------ */

int raft_uv_node_change(struct raft_uv_node *d, const struct raft_event *ev,
                        raft_index *out_index)
{
    struct raft_update u;
    int rc;
    if (ev->type != RAFT_EVENT_CHANGE && ev->type != RAFT_EVENT_TRANSFER) {
        return RAFT_INVALID;
    }
    rc = raft_uv_node_step(d, ev, &u);
    if (rc == 0 && out_index != NULL) {
        *out_index = ev->type == RAFT_EVENT_CHANGE ? u.proposed_index : 0;
    }
    return rc;
}
