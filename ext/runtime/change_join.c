/* A joining node's JOIN requests and the answers it hears
 * (change_join.h). */

#include "change_join.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "change_codec.h"

void change_join_init(struct ext_change_join *j, const struct ext_config *cfg)
{
    uint64_t bits = 0;

    memset(j, 0, sizeof *j);
    j->self = cfg->id;
    j->pace_ms = cfg->election_timeout_ms;
    if (ext_config_join(cfg)) {
        snprintf(j->advertise, sizeof j->advertise, "%s", cfg->advertise);
        snprintf(j->host, sizeof j->host, "%s", cfg->join_host);
        j->port = cfg->join_port;
    }
    /* Unique to this start: a leader remembers its latest answers by
     * request id, and would answer the JOIN of an id removed, wiped and
     * joining again with the answer to that id's first JOIN. */
    if (getrandom(&bits, sizeof bits, 0) != (ssize_t)sizeof bits) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        bits = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    j->rid[0] = j->self;
    j->rid[1] = EXT_CHANGE_SEQ_BIT | (bits >> 2);
    pthread_mutex_init(&j->mu, NULL);
}

void change_join_close(struct ext_change_join *j)
{
    pthread_mutex_destroy(&j->mu);
}

/* send_to sends @payload, the JOIN, to @to. */
static void send_to(struct ext_change_join *j, struct raft_uv_node *d,
                    raft_id to, struct raft_buf *payload)
{
    struct raft_frame m = {.type = RAFT_FRAME_FORWARD};

    m.from = j->self;
    m.to = to;
    m.forward.request_id[0] = j->rid[0];
    m.forward.request_id[1] = j->rid[1];
    m.forward.data = payload;
    raft_uv_node_send_frame(d, &m);
}

void change_join_tick(struct ext_change_join *j, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    uint8_t role = raft_self_role(core);
    uint64_t now = raft_uv_node_now(d);
    raft_id leader = raft_leader_id(core);
    struct ext_change_request q;
    struct raft_buf *payload = NULL;
    raft_id ids[RAFT_MAX_SERVERS];
    unsigned n;

    if (role != 0) {
        j->was_member = true;
    }
    if (j->advertise[0] == '\0' || role != 0 || j->was_member ||
        now < j->next_at) {
        /* Once a member (a learner too: raft_demote and raft_add's
         * 'learner' must hold), it asks no more. */
        return;
    }
    j->next_at = now + j->pace_ms;
    memset(&q, 0, sizeof q);
    q.op = EXT_CHANGE_JOIN;
    q.id = j->self;
    snprintf(q.address, sizeof q.address, "%s", j->advertise);
    if (change_codec_encode(&q, &payload) != 0) {
        return;
    }
    if (!j->probed && j->port != 0) {
        /* The join= member's id is not known: dial it, it dials back. */
        j->probed = raft_uv_node_probe(d, j->host, j->port) == 0;
    }
    n = raft_uv_node_connected_peers(d, ids, RAFT_MAX_SERVERS);
    for (unsigned i = 0; i < n; i++) {
        if (ids[i] != j->self && (leader == 0 || ids[i] == leader)) {
            send_to(j, d, ids[i], payload);
        }
    }
    raft_buf_unref(payload);
}

bool change_join_answer(struct ext_change_join *j, struct raft_uv_node *d,
                        const struct raft_frame *m)
{
    const struct raft_forward_result *r = &m->forward_result;
    struct ext_change_request q = {.op = EXT_CHANGE_JOIN, .id = j->self};
    char text[EXT__JOIN_WHY_MAX] = "";
    bool fresh;

    if (r->request_id[0] != j->rid[0] || r->request_id[1] != j->rid[1]) {
        return false;
    }
    if (r->status != 0) {
        change_codec_describe(
            &q, r->status, r->status == RAFT_NOTLEADER ? 0 : (unsigned)r->index,
            0, text, sizeof text);
    }
    pthread_mutex_lock(&j->mu);
    fresh = strcmp(text, j->why) != 0;
    snprintf(j->why, sizeof j->why, "%s", text);
    pthread_mutex_unlock(&j->mu);
    if (fresh && text[0] != '\0') {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "join: server %" PRIu64 " refused: %s", m->from, text);
    }
    return true;
}

void change_join_why(struct ext_change_join *j, char *buf, size_t len)
{
    pthread_mutex_lock(&j->mu);
    snprintf(buf, len, "%s", j->why);
    pthread_mutex_unlock(&j->mu);
}
