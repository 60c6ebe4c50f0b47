/* Tests of the libuv TCP transport (raft/uv.h) on a real loop over
 * 127.0.0.1: frame exchange between two and three servers, reconnect
 * with backoff, hostile raw clients, send errors and close with queued data.
 * Every wait is bounded (5 s) so a hang fails instead of blocking. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "raft/byte.h"
#include "raft/message.h"
#include "raft/uv.h"
#include "raft/uv_internal.h"

#define WAIT_MS 5000
#define MAX_NODES 3
#define MAX_FRAME (8u << 20)
/* The build id of every server unless a test gives it another. */
#define BUILD "build-A"

/* One received message, re-encoded (the encoding is canonical, so equal
 * bytes mean equal messages). */
struct rec {
    uint8_t *bytes; /* whole frame */
    size_t len;     /* bytes */
};

/* A list of frames. */
struct recs {
    struct rec *v; /* items */
    size_t n;      /* count */
    size_t cap;    /* allocated */
};

struct fixture;

/* One transport under test and what it saw. */
struct node {
    struct fixture *f;           /* owner */
    raft_id id;                  /* server id */
    uint16_t port;               /* listen port */
    struct raft_uv_transport *t; /* NULL when not running */
    struct recs got;             /* messages received, in order */
    struct recs want;            /* messages expected, in order */
    unsigned n_warn;             /* WARN lines logged */
    char last_warn[512];         /* text of the last WARN */
    char warns[4096];            /* every WARN, one a line (cut) */
    bool closing;                /* close called, cb not yet */
    bool recv_after_close;       /* a message arrived after close */
    const char *build_id;        /* its build id, NULL: BUILD */
};

struct fixture {
    uv_loop_t loop;               /* the loop */
    uv_timer_t tick;              /* keeps UV_RUN_ONCE from blocking */
    struct node nodes[MAX_NODES]; /* servers 1..MAX_NODES */
};

static void recs_push(struct recs *r, const void *bytes, size_t len)
{
    if (r->n == r->cap) {
        r->cap = r->cap == 0 ? 16 : r->cap * 2;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        assert_non_null(r->v);
    }
    r->v[r->n].bytes = malloc(len);
    assert_non_null(r->v[r->n].bytes);
    memcpy(r->v[r->n].bytes, bytes, len);
    r->v[r->n].len = len;
    r->n++;
}

static void recs_free(struct recs *r)
{
    size_t i;

    for (i = 0; i < r->n; i++) {
        free(r->v[i].bytes);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

static void recs_push_message(struct recs *r, const struct raft_frame *m)
{
    size_t len = raft_frame_encoded_len(m);
    uint8_t *b = malloc(len);

    assert_non_null(b);
    assert_int_equal(raft_frame_encode(m, b, len), 0);
    recs_push(r, b, len);
    free(b);
}

/* recv_delay sleeps TEST_RECV_DELAY_MS (0 by default) in each receive
 * callback: a slow loop, as on a loaded machine under TSan, made
 * deterministic. */
static void recv_delay(void)
{
    const char *ms = getenv("TEST_RECV_DELAY_MS");

    if (ms != NULL && atoi(ms) > 0) {
        usleep((useconds_t)atoi(ms) * 1000);
    }
}

static void on_recv(void *data, const struct raft_frame *m)
{
    struct node *n = data;

    if (n->closing || n->t == NULL) {
        n->recv_after_close = true;
    }
    assert_true(m->to == n->id);
    recs_push_message(&n->got, m);
    recv_delay();
}

static void on_log(void *data, int level, const char *msg)
{
    struct node *n = data;

    if (getenv("TEST_VERBOSE") != NULL) {
        fprintf(stderr, "[%d] %s\n", level, msg);
    }
    if (level >= RAFT_LOG_WARN) {
        size_t used = strlen(n->warns);
        n->n_warn++;
        snprintf(n->last_warn, sizeof n->last_warn, "%s", msg);
        snprintf(n->warns + used, sizeof n->warns - used, "%s\n", msg);
    }
}

/* fixture_progress counts the frames and bytes every node received. */
static uint64_t fixture_progress(struct fixture *f)
{
    uint64_t sum = 0;
    unsigned i;
    size_t k;

    for (i = 0; i < MAX_NODES; i++) {
        sum += f->nodes[i].got.n;
        for (k = 0; k < f->nodes[i].got.n; k++) {
            sum += f->nodes[i].got.v[k].len;
        }
    }
    return sum;
}

/* fixture_report prints, per node, the frames received and expected and
 * the WARN lines. */
static void fixture_report(struct fixture *f)
{
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        struct node *n = &f->nodes[i];
        fprintf(stderr, "node %u: %zu of %zu frames received; warns:\n%s",
                i + 1, n->got.n, n->want.n, n->warns);
    }
}

#include "loop.h"

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    unsigned i;

    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_timer_init(&f->loop, &f->tick), 0);
    for (i = 0; i < MAX_NODES; i++) {
        f->nodes[i].f = f;
        f->nodes[i].id = i + 1;
        f->nodes[i].port = reserve_port();
    }
    *state = f;
    return 0;
}

static void on_closed(void *data)
{
    struct node *n = data;

    n->closing = false;
}

static bool all_closed(struct fixture *f)
{
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        if (f->nodes[i].closing) {
            return false;
        }
    }
    return true;
}

/* stop_node closes @n's transport (callback sets closing back to false). */
static void stop_node(struct node *n)
{
    if (n->t == NULL) {
        return;
    }
    n->closing = true;
    raft_uv_transport_close(n->t, on_closed, n);
    n->t = NULL;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        stop_node(&f->nodes[i]);
    }
    WAIT_FOR(f, all_closed);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    /* Every handle of the transports is closed, or this fails. */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (i = 0; i < MAX_NODES; i++) {
        assert_false(f->nodes[i].recv_after_close);
        recs_free(&f->nodes[i].got);
        recs_free(&f->nodes[i].want);
    }
    free(f);
    return 0;
}

/* start_node_at starts server @id (1-based) listening on @listen with
 * the first @n_nodes servers as its peers, each at host @peer_host, and
 * advertising @advertise (NULL: its listen address). */
static void start_node_at(struct fixture *f, unsigned id, unsigned n_nodes,
                          const char *listen, const char *peer_host,
                          const char *advertise)
{
    struct node *n = &f->nodes[id - 1];
    struct raft_uv_peer peers[MAX_NODES];
    unsigned n_peers = 0, i;
    char err[256] = "";
    int rc;

    memset(peers, 0, sizeof peers);
    for (i = 1; i <= n_nodes; i++) {
        if (i == id) {
            continue;
        }
        peers[n_peers].id = i;
        snprintf(peers[n_peers].host, sizeof peers[n_peers].host, "%s",
                 peer_host);
        peers[n_peers].port = f->nodes[i - 1].port;
        n_peers++;
    }
    rc = raft_uv_transport_start(
        &f->loop, id, listen, n->port, advertise, peers, n_peers, MAX_FRAME,
        n->build_id != NULL ? n->build_id : BUILD, NULL, on_recv, on_log, n,
        &n->t, err, sizeof err);
    if (rc != 0) {
        fail_msg("start node %u: %d %s", id, rc, err);
    }
    assert_int_equal(raft_uv_transport_port(n->t), n->port);
}

/* start_node starts server @id (1-based) on 127.0.0.1 with the first
 * @n_nodes servers as its peers. */
static void start_node(struct fixture *f, unsigned id, unsigned n_nodes)
{
    start_node_at(f, id, n_nodes, "127.0.0.1", "127.0.0.1", NULL);
}

static void start_cluster(struct fixture *f, unsigned n_nodes)
{
    unsigned i;

    for (i = 1; i <= n_nodes; i++) {
        start_node(f, i, n_nodes);
    }
    wait_connected(f, n_nodes, n_nodes);
}

/* send_ok sends @m from its sender and records it as expected at the
 * receiver. */
static void send_ok(struct fixture *f, const struct raft_frame *m)
{
    struct node *from = &f->nodes[m->from - 1];
    struct node *to = &f->nodes[m->to - 1];
    int rc = raft_uv_transport_send(from->t, m);

    if (rc != 0) {
        fail_msg("send %u -> %u type %u: %s", (unsigned)m->from,
                 (unsigned)m->to, (unsigned)m->type, raft_strerror(rc));
    }
    recs_push_message(&to->want, m);
}

/* framed returns the frame that carries the core's message @c. */
static struct raft_frame framed(const struct raft_message *c)
{
    struct raft_frame fr;

    raft_frame_wrap(c, &fr);
    return fr;
}

/* send_message_ok sends the core's message @c as send_ok sends a frame. */
static void send_message_ok(struct fixture *f, const struct raft_message *c)
{
    struct raft_frame fr = framed(c);

    send_ok(f, &fr);
}

/* heartbeat returns the frame of an empty AppendEntries of @term from
 * @from to @to. */
static struct raft_frame heartbeat(raft_id from, raft_id to, uint64_t term)
{
    struct raft_message c;

    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = from;
    c.to = to;
    c.append_entries.term = term;
    return framed(&c);
}

static bool all_delivered(struct fixture *f)
{
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        if (f->nodes[i].got.n < f->nodes[i].want.n) {
            return false;
        }
    }
    return true;
}

/* check_delivered waits for every expected message and compares them in
 * order (per receiver; see check_per_sender for several senders). */
static void check_delivered(struct fixture *f)
{
    unsigned i;
    size_t k;

    WAIT_FOR(f, all_delivered);
    for (i = 0; i < MAX_NODES; i++) {
        struct node *n = &f->nodes[i];
        assert_int_equal(n->got.n, n->want.n);
        for (k = 0; k < n->want.n; k++) {
            if (n->got.v[k].len != n->want.v[k].len ||
                memcmp(n->got.v[k].bytes, n->want.v[k].bytes,
                       n->want.v[k].len) != 0) {
                fail_msg("node %u message %zu differs", i + 1, k);
            }
        }
    }
}

static struct raft_buf *pattern_buf(size_t len, unsigned seed)
{
    struct raft_buf *b = raft_buf_new(len);
    size_t i;

    assert_non_null(b);
    for (i = 0; i < len; i++) {
        b->data[i] = (unsigned char)(i * 131 + seed);
    }
    return b;
}

/* send_every_type sends one frame of each type from @from to @to, the
 * AppendEntries with a 4 MiB payload among small and empty ones. */
static void send_every_type(struct fixture *f, raft_id from, raft_id to,
                            uint64_t term)
{
    struct raft_entry e[3];
    struct raft_message c;
    struct raft_frame m;

    memset(&c, 0, sizeof c);
    c.from = from;
    c.to = to;

    c.type = RAFT_MSG_REQUEST_VOTE;
    c.request_vote = (struct raft_request_vote){term, 10, 9, true, false};
    send_message_ok(f, &c);

    c.type = RAFT_MSG_REQUEST_VOTE_RESULT;
    c.request_vote_result =
        (struct raft_request_vote_result){term, true, false};
    send_message_ok(f, &c);

    e[0] = (struct raft_entry){term, 11, RAFT_ENTRY_NORMAL,
                               pattern_buf(4u << 20, (unsigned)term)};
    e[1] = (struct raft_entry){term, 12, RAFT_ENTRY_NOOP, NULL};
    e[2] =
        (struct raft_entry){term, 13, RAFT_ENTRY_NORMAL, pattern_buf(100, 7)};
    memset(&c.append_entries, 0, sizeof c.append_entries);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.append_entries.term = term;
    c.append_entries.prev_log_index = 10;
    c.append_entries.prev_log_term = term - 1;
    c.append_entries.leader_commit = 10;
    c.append_entries.entries = e;
    c.append_entries.n_entries = 3;
    send_message_ok(f, &c);
    /* The transport copied the frame: the payloads can go now. */
    raft_buf_unref(e[0].data);
    raft_buf_unref(e[2].data);

    memset(&c.append_entries, 0, sizeof c.append_entries);
    c.append_entries.term = term;
    c.append_entries.prev_log_index = UINT64_MAX;
    send_message_ok(f, &c); /* heartbeat */

    c.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    memset(&c.append_entries_result, 0, sizeof c.append_entries_result);
    c.append_entries_result.term = term;
    c.append_entries_result.success = false;
    c.append_entries_result.reject_index = 10;
    c.append_entries_result.last_log_index = 7;
    send_message_ok(f, &c);

    memset(&m, 0, sizeof m);
    m.from = from;
    m.to = to;
    m.type = RAFT_FRAME_FORWARD;
    m.forward.request_id[0] = from;
    m.forward.request_id[1] = 42;
    m.forward.data = pattern_buf(3000, 3);
    send_ok(f, &m);
    raft_buf_unref(m.forward.data);

    m.type = RAFT_FRAME_FORWARD_RESULT;
    m.forward_result.request_id[0] = from;
    m.forward_result.request_id[1] = 42;
    m.forward_result.status = RAFT_NOTLEADER;
    m.forward_result.index = 0;
    m.forward_result.term = term;
    send_ok(f, &m);

    m.type = RAFT_FRAME_SNAPSHOT_CHUNK;
    m.snapshot_chunk =
        (struct raft_snapshot_chunk){.term = term,
                                     .last_index = 900,
                                     .last_term = term - 1,
                                     .total = 5000,
                                     .offset = 1000,
                                     .checksum = 0x0123456789abcdefULL,
                                     .data = pattern_buf(2000, 5)};
    send_ok(f, &m);
    raft_buf_unref(m.snapshot_chunk.data);

    m.type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
    m.snapshot_chunk_result = (struct raft_snapshot_chunk_result){
        .term = term, .last_index = 900, .offset = 3000, .status = RAFT_IOERR};
    send_ok(f, &m);
}

/* send_heartbeats sends @n small AppendEntries numbered by term. */
static void send_heartbeats(struct fixture *f, raft_id from, raft_id to,
                            unsigned n)
{
    struct raft_frame m;
    unsigned i;

    for (i = 0; i < n; i++) {
        m = heartbeat(from, to, 1000 + i);
        send_ok(f, &m);
    }
}

/* Two servers exchange every frame type, big payloads included, in
 * order, in both directions. */
static void test_two_nodes(void **state)
{
    struct fixture *f = *state;

    start_cluster(f, 2);
    send_every_type(f, 1, 2, 5);
    send_heartbeats(f, 1, 2, 200);
    send_every_type(f, 2, 1, 6);
    send_heartbeats(f, 2, 1, 50);
    send_every_type(f, 1, 2, 7);
    check_delivered(f);
    assert_int_equal(f->nodes[0].n_warn, 0);
    assert_int_equal(f->nodes[1].n_warn, 0);
}

/* Each server learns its peer's build id from the peer's handshake; a
 * build that differs is logged once per connection, naming both, and
 * changes nothing else: messages flow both ways. */
static void test_build_ids(void **state)
{
    struct fixture *f = *state;

    f->nodes[1].build_id = "build-B 2.0";
    start_cluster(f, 2);
    wait_connected(f, 2, 2);
    run_for(f, 20);
    assert_null(raft_uv_transport_peer_build_id(f->nodes[0].t, 3));
    send_heartbeats(f, 1, 2, 5);
    send_heartbeats(f, 2, 1, 5);
    check_delivered(f);
    assert_string_equal(raft_uv_transport_peer_build_id(f->nodes[0].t, 2),
                        "build-B 2.0");
    assert_string_equal(raft_uv_transport_peer_build_id(f->nodes[1].t, 1),
                        BUILD);
    assert_int_equal(f->nodes[0].n_warn, 1);
    assert_non_null(
        strstr(f->nodes[0].last_warn, "peer 2 (incoming 127.0.0.1:"));
    assert_non_null(strstr(f->nodes[0].last_warn,
                           "its build differs from this server's: build id "
                           "'build-B 2.0' there, 'build-A' here"));
    assert_int_equal(f->nodes[1].n_warn, 1);
    assert_non_null(
        strstr(f->nodes[1].last_warn, "'build-A' there, 'build-B 2.0' here"));
}

/* split_by_sender keeps the frames of @r sent by @from. */
static void split_by_sender(const struct recs *r, raft_id from,
                            struct recs *out)
{
    size_t k;

    for (k = 0; k < r->n; k++) {
        /* from is the u64 at frame offset 4 + 2. */
        if (raft_byte_load_u64(r->v[k].bytes + RAFT_FRAME_HEADER + 2) == from) {
            recs_push(out, r->v[k].bytes, r->v[k].len);
        }
    }
}

/* Three servers all send to each other; each receiver gets each sender's
 * messages in the order sent. */
static void test_three_nodes(void **state)
{
    struct fixture *f = *state;
    unsigned i, j;
    size_t k;

    start_cluster(f, 3);
    for (i = 1; i <= 3; i++) {
        for (j = 1; j <= 3; j++) {
            if (i != j) {
                send_every_type(f, i, j, 10 * i + j);
                send_heartbeats(f, i, j, 30);
            }
        }
    }
    WAIT_FOR(f, all_delivered);
    for (i = 1; i <= 3; i++) {
        struct node *n = &f->nodes[i - 1];
        assert_int_equal(n->got.n, n->want.n);
        for (j = 1; j <= 3; j++) {
            struct recs got = {0}, want = {0};
            split_by_sender(&n->got, j, &got);
            split_by_sender(&n->want, j, &want);
            assert_int_equal(got.n, want.n);
            for (k = 0; k < want.n; k++) {
                assert_int_equal(got.v[k].len, want.v[k].len);
                assert_memory_equal(got.v[k].bytes, want.v[k].bytes,
                                    want.v[k].len);
            }
            recs_free(&got);
            recs_free(&want);
        }
    }
}

/* A peer that starts late is reached through the re-dial backoff; sends
 * before that are dropped with RAFT_NOCONN. */
static void test_late_peer(void **state)
{
    struct fixture *f = *state;
    struct raft_frame m;
    uint64_t t0, waited;

    start_node(f, 1, 2);
    run_for(f, 350); /* dials at 0, ~100, ~300 ms all refused */
    assert_false(raft_uv_transport_connected(f->nodes[0].t, 2));
    m = heartbeat(1, 2, 0);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_NOCONN);

    start_node(f, 2, 2);
    uv_update_time(&f->loop);
    t0 = uv_now(&f->loop);
    wait_connected(f, 2, 2);
    waited = uv_now(&f->loop) - t0;
    /* The next dial is due within the current backoff (400 ms). */
    assert_true(waited <= 1500);
    send_every_type(f, 1, 2, 3);
    send_every_type(f, 2, 1, 4);
    check_delivered(f);
}

static bool one_not_connected_to_two(struct fixture *f)
{
    return !raft_uv_transport_connected(f->nodes[0].t, 2);
}

/* A server that is no peer yet but connects to us (a joining server, or a
 * leader this server does not know) is dialled back at the listen address
 * its handshake advertises; peers are removed and added at run time, a
 * removed one dropped, an added one dialled. */
static void test_peers_change(void **state)
{
    struct fixture *f = *state;
    struct raft_uv_peer p;
    struct raft_frame m;

    start_node(f, 1, 1); /* no peers */
    start_node(f, 2, 2); /* peer 1 */
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 3);
    send_heartbeats(f, 2, 1, 3);
    check_delivered(f);

    assert_int_equal(raft_uv_transport_remove_peer(f->nodes[0].t, 2), 0);
    assert_int_equal(raft_uv_transport_remove_peer(f->nodes[0].t, 2),
                     RAFT_NOTFOUND);
    WAIT_FOR(f, one_not_connected_to_two);
    m = heartbeat(1, 2, 0);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_NOTFOUND);

    memset(&p, 0, sizeof p);
    p.id = 2;
    strcpy(p.host, "127.0.0.1");
    p.port = f->nodes[1].port;
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p), 0);
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p), 0);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 2);
    check_delivered(f);
    p.id = 1;
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p),
                     RAFT_INVALID);
    p.id = 3;
    p.port = 0;
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p),
                     RAFT_INVALID);
}

/* A peer that goes away and comes back is re-dialled. */
static void test_reconnect_after_restart(void **state)
{
    struct fixture *f = *state;

    start_cluster(f, 2);
    send_heartbeats(f, 1, 2, 5);
    check_delivered(f);
    stop_node(&f->nodes[1]);
    WAIT_FOR(f, all_closed);
    run_for(f, 150);
    assert_false(raft_uv_transport_connected(f->nodes[0].t, 2));
    start_node(f, 2, 2);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 5);
    send_heartbeats(f, 2, 1, 5);
    check_delivered(f);
}

/* A raw TCP client. */
struct raw {
    uv_tcp_t tcp;      /* the socket */
    uv_connect_t conn; /* dial */
    bool connected;    /* connect done */
    bool eof;          /* the server closed it */
    bool closed;       /* our close finished */
    char rbuf[256];    /* read sink */
    uint8_t got[1024]; /* bytes the server sent (its answer) */
    size_t n_got;      /* bytes at @got */
};

static struct raw *g_raw; /* the client run_until predicates look at */

static void raw_on_connect(uv_connect_t *req, int status)
{
    struct raw *r = req->data;

    assert_int_equal(status, 0);
    r->connected = true;
}

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    struct raw *r = h->data;

    (void)s;
    buf->base = r->rbuf;
    buf->len = sizeof r->rbuf;
}

static void raw_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct raw *r = s->data;

    /* The transport writes only its answer on an accepted connection. */
    if (nread > 0) {
        assert_true(r->n_got + (size_t)nread <= sizeof r->got);
        memcpy(r->got + r->n_got, buf->base, (size_t)nread);
        r->n_got += (size_t)nread;
    }
    if (nread < 0) {
        r->eof = true;
        uv_read_stop(s);
    }
}

static bool raw_connected(struct fixture *f)
{
    (void)f;
    return g_raw->connected;
}

static bool raw_eof(struct fixture *f)
{
    (void)f;
    return g_raw->eof;
}

static bool raw_closed(struct fixture *f)
{
    (void)f;
    return g_raw->closed;
}

static void raw_on_close(uv_handle_t *h)
{
    struct raw *r = h->data;

    r->closed = true;
}

/* loopback returns 127.0.0.1:@port. */
static struct sockaddr_in loopback(uint16_t port)
{
    struct sockaddr_in sin;

    assert_int_equal(uv_ip4_addr("127.0.0.1", port, &sin), 0);
    return sin;
}

static void raw_open(struct fixture *f, struct raw *r, uint16_t port)
{
    struct sockaddr_in sin = loopback(port);

    memset(r, 0, sizeof *r);
    g_raw = r;
    assert_int_equal(uv_tcp_init(&f->loop, &r->tcp), 0);
    r->tcp.data = r;
    r->conn.data = r;
    assert_int_equal(uv_tcp_connect(&r->conn, &r->tcp, (struct sockaddr *)&sin,
                                    raw_on_connect),
                     0);
    WAIT_FOR(f, raw_connected);
    assert_int_equal(uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read),
                     0);
}

static void raw_write(struct raw *r, const void *bytes, size_t len)
{
    uv_buf_t buf = uv_buf_init((char *)bytes, (unsigned)len);
    int rv = uv_try_write((uv_stream_t *)&r->tcp, &buf, 1);

    /* Small writes to an idle loopback socket complete at once. */
    assert_int_equal(rv, (int)len);
}

static void raw_close(struct fixture *f, struct raw *r)
{
    uv_close((uv_handle_t *)&r->tcp, raw_on_close);
    WAIT_FOR(f, raw_closed);
}

/* The cluster id of a raw client's handshake, all zero unless a test
 * sets it. */
static uint8_t g_cluster[RAFT_UV_CLUSTER_ID_LEN];

/* handshake_at writes the handshake (version 4 layout, uv.h) of sender
 * @id of cluster g_cluster into @out with handshake version @hv, wire
 * versions @lo to @hi, build id @build of @build_len bytes and listen
 * address @address; returns its length. */
static size_t handshake_at(uint8_t *out, const char *magic, uint8_t hv,
                           uint8_t lo, uint8_t hi, raft_id id,
                           const char *build, size_t build_len,
                           const char *address)
{
    size_t alen = strlen(address);

    memcpy(out, magic, 6);
    out[6] = hv;
    out[7] = lo;
    out[8] = hi;
    memcpy(out + 9, g_cluster, RAFT_UV_CLUSTER_ID_LEN);
    raft_byte_store_u64(out + 25, id);
    out[33] = (uint8_t)build_len;
    memcpy(out + 34, build, build_len);
    out[34 + build_len] = (uint8_t)alen;
    memcpy(out + 35 + build_len, address, alen);
    return 35 + build_len + alen;
}

/* handshake_of is handshake_at with this build's wire versions and no
 * listen address. */
static size_t handshake_of(uint8_t *out, const char *magic, uint8_t hv,
                           raft_id id, const char *build, size_t build_len)
{
    return handshake_at(out, magic, hv, RAFT_WIRE_VERSION_MIN,
                        RAFT_WIRE_VERSION, id, build, build_len, "");
}

/* handshake writes the handshake of sender @id, with BUILD, into @out. */
static size_t handshake(uint8_t *out, const char *magic, uint8_t version,
                        raft_id id)
{
    return handshake_of(out, magic, version, id, BUILD, strlen(BUILD));
}

/* frame_of encodes @m into @out (at most @cap bytes) and returns its
 * length. */
static size_t frame_of(const struct raft_frame *m, uint8_t *out, size_t cap)
{
    size_t len = raft_frame_encoded_len(m);

    assert_true(len <= cap);
    assert_int_equal(raft_frame_encode(m, out, cap), 0);
    return len;
}

/* expect_rejected sends @bytes from a raw client to server 1 and checks the
 * connection is closed with a WARN containing @reason, then that server 2
 * still exchanges messages with server 1. */
static void expect_rejected(struct fixture *f, const void *bytes, size_t len,
                            const char *reason)
{
    struct raw r;
    unsigned warns = f->nodes[0].n_warn;

    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, bytes, len);
    WAIT_FOR(f, raw_eof);
    raw_close(f, &r);
    /* One WARN for the refusal (and, when the client's handshake claims
     * a connected peer's id, one naming the second connection). */
    assert_true(f->nodes[0].n_warn >= warns + 1);
    if (strstr(f->nodes[0].last_warn, reason) == NULL) {
        fail_msg("warning '%s' lacks '%s'", f->nodes[0].last_warn, reason);
    }
    send_heartbeats(f, 2, 1, 3);
    send_heartbeats(f, 1, 2, 3);
    check_delivered(f);
}

/* Garbage, bad handshakes, bad lengths and bad frames from a raw client
 * close that connection only; the servers keep exchanging messages. */
static void test_hostile_clients(void **state)
{
    struct fixture *f = *state;
    uint8_t buf[320];
    char long_build[130];
    char want[80];
    struct raft_message c;
    struct raft_frame m;
    size_t n;

    start_cluster(f, 2);

    expect_rejected(f, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27,
                    "bad handshake magic");

    /* Version 1, the 15 bytes of earlier raftsql (wire version 1 where
     * the handshake version is now), version 3 (no cluster id, one wire
     * version), then version 5. */
    memcpy(buf, "RFTSQL\x01", 7);
    raft_byte_store_u64(buf + 7, 2);
    expect_rejected(f, buf, 15,
                    "handshake version 1, want 4: closing (the peer runs an "
                    "older raftsql)");
    memcpy(buf, "RFTSQL\x03\x01", 8);
    raft_byte_store_u64(buf + 8, 2);
    buf[16] = 0;
    buf[17] = 0;
    expect_rejected(f, buf, 18,
                    "handshake version 3, want 4: closing (the peer runs an "
                    "older raftsql)");
    n = handshake(buf, "RFTSQL", 5, 2);
    expect_rejected(f, buf, n, "handshake version 5, want 4");
    n = handshake_at(buf, "RFTSQL", 4, RAFT_WIRE_VERSION + 1,
                     RAFT_WIRE_VERSION + 1, 2, "", 0, "");
    expect_rejected(f, buf, n, "no version in common");
    n = handshake_at(buf, "RFTSQL", 4, 0, RAFT_WIRE_VERSION, 2, "", 0, "");
    snprintf(want, sizeof want, "wire versions 0 to %u: malformed",
             (unsigned)RAFT_WIRE_VERSION);
    expect_rejected(f, buf, n, want);
    memset(long_build, 'x', sizeof long_build);
    n = handshake_of(buf, "RFTSQL", 4, 2, long_build, sizeof long_build);
    expect_rejected(f, buf, n, "handshake build id of 130 bytes, at most 128");
    n = handshake_of(buf, "RFTSQL", 4, 2, "a\tb", 3);
    expect_rejected(f, buf, n,
                    "build id has byte 0x09 at 1, not printable ASCII");
    n = handshake_at(buf, "RFTSQL", 4, RAFT_WIRE_VERSION_MIN, RAFT_WIRE_VERSION,
                     2, "", 0, "127.0.0.1:\x01");
    expect_rejected(f, buf, n,
                    "listen address has byte 0x01 at 10, not printable");

    n = handshake(buf, "RFTSQL", 4, 0);
    expect_rejected(f, buf, n, "handshake from server id 0 (no server)");
    n = handshake(buf, "RFTSQL", 4, 1);
    expect_rejected(f, buf, n, "server id 1 (this server's own)");

    n = handshake(buf, "RFTSQL", 4, 2);
    raft_byte_store_u32(buf + n, UINT32_MAX);
    expect_rejected(f, buf, n + 4, "frame length 4294967295");

    n = handshake(buf, "RFTSQL", 4, 2);
    raft_byte_store_u32(buf + n, MAX_FRAME + 1);
    expect_rejected(f, buf, n + 4, "frame length");

    n = handshake(buf, "RFTSQL", 4, 2);
    raft_byte_store_u32(buf + n, 1);
    buf[n + 4] = RAFT_WIRE_VERSION;
    expect_rejected(f, buf, n + 5, "frame length 1");

    /* A frame whose body is cut short of its AppendEntries fields. */
    n = handshake(buf, "RFTSQL", 4, 2);
    raft_byte_store_u32(buf + n, 20);
    memset(buf + n + 4, 0, 20);
    buf[n + 4] = RAFT_WIRE_VERSION;
    buf[n + 5] = RAFT_MSG_APPEND_ENTRIES;
    expect_rejected(f, buf, n + 24, "bad frame");

    /* A frame of an unknown version. */
    n = handshake(buf, "RFTSQL", 4, 2);
    raft_byte_store_u32(buf + n, 2);
    buf[n + 4] = RAFT_WIRE_VERSION + 1;
    buf[n + 5] = 1;
    snprintf(want, sizeof want,
             "frame of wire version %u, the handshake agreed on %u",
             (unsigned)RAFT_WIRE_VERSION + 1, (unsigned)RAFT_WIRE_VERSION);
    expect_rejected(f, buf, n + 6, want);

    /* A well-formed message whose sender is not the handshake's. */
    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_REQUEST_VOTE;
    c.from = 3;
    c.to = 1;
    m = framed(&c);
    n = handshake(buf, "RFTSQL", 4, 2);
    n += frame_of(&m, buf + n, sizeof buf - n);
    expect_rejected(f, buf, n, "message from 3 to 1");

    /* A well-formed message addressed to another server. */
    c.from = 2;
    c.to = 2;
    m = framed(&c);
    n = handshake(buf, "RFTSQL", 4, 2);
    n += frame_of(&m, buf + n, sizeof buf - n);
    expect_rejected(f, buf, n, "message from 2 to 2");
}

static bool node1_has_3(struct fixture *f)
{
    return f->nodes[0].got.n >= 3;
}

/* Frames split across writes and packed several per write are
 * reassembled exactly, and the connection stays open. */
static void test_reassembly(void **state)
{
    struct fixture *f = *state;
    struct raft_message c;
    struct raft_frame m;
    struct raw r;
    uv_write_t req;
    uv_buf_t b;
    uint8_t *buf;
    size_t n = 0, cut1, cut2;
    struct raft_entry e = {2, 1, RAFT_ENTRY_NORMAL, NULL};

    start_cluster(f, 2);
    buf = malloc(1 << 20);
    assert_non_null(buf);
    n += handshake(buf, "RFTSQL", 4, 2);
    memset(&c, 0, sizeof c);
    c.from = 2;
    c.to = 1;
    c.type = RAFT_MSG_REQUEST_VOTE;
    c.request_vote.term = 9;
    m = framed(&c);
    n += frame_of(&m, buf + n, (1 << 20) - n);
    recs_push_message(&f->nodes[0].want, &m);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    memset(&c.append_entries, 0, sizeof c.append_entries);
    e.data = pattern_buf(200000, 1);
    c.append_entries.entries = &e;
    c.append_entries.n_entries = 1;
    m = framed(&c);
    n += frame_of(&m, buf + n, (1 << 20) - n);
    recs_push_message(&f->nodes[0].want, &m);
    raft_buf_unref(e.data);
    c.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    c.append_entries_result.term = 11;
    m = framed(&c);
    n += frame_of(&m, buf + n, (1 << 20) - n);
    recs_push_message(&f->nodes[0].want, &m);

    /* Cut inside the handshake, then inside the big frame's length
     * prefix area, and send the rest (two frames' worth) at once. */
    cut1 = 9;
    cut2 = 35 + strlen(BUILD) +
           raft_frame_encoded_len(
               &(struct raft_frame){.type = RAFT_MSG_REQUEST_VOTE}) +
           2;
    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, cut1);
    run_for(f, 20);
    raw_write(&r, buf + cut1, cut2 - cut1);
    run_for(f, 20);
    /* The big frame may not fit the socket buffer in one go. */
    b = uv_buf_init((char *)buf + cut2, (unsigned)(n - cut2));
    assert_int_equal(uv_write(&req, (uv_stream_t *)&r.tcp, &b, 1, NULL), 0);
    WAIT_FOR(f, node1_has_3);
    check_delivered(f);
    assert_false(r.eof);
    /* The raw client claims server 2's id while server 2 is connected:
     * the one WARN allowed names the second connection. */
    assert_true(
        f->nodes[0].n_warn == 0 ||
        (f->nodes[0].n_warn == 1 &&
         strstr(f->nodes[0].last_warn, "a second connection claims") != NULL));
    raw_close(f, &r);
    free(buf);
}

/* mid_frame: node 1 has an accepted connection in the middle of a
 * frame's body. */
static bool mid_frame(struct fixture *f)
{
    for (struct raft_uv_in *in = f->nodes[0].t->ins; in != NULL;
         in = in->next) {
        if (in->stage == RAFT__UV_BODY && in->body_got > 0) {
            return true;
        }
    }
    return false;
}

static bool node1_has_1(struct fixture *f)
{
    return f->nodes[0].got.n >= 1;
}

/* handshake_and_append writes into @buf (@cap bytes) a raw client's
 * handshake as server 2 and one AppendEntries from 2 to 1 carrying a
 * @payload_len-byte entry (pattern @seed), records the frame in @want
 * (NULL: nowhere), and returns the bytes written. */
static size_t handshake_and_append(uint8_t *buf, size_t cap, size_t payload_len,
                                   unsigned seed, struct recs *want)
{
    struct raft_message c;
    struct raft_frame m;
    struct raft_entry e = {2, 1, RAFT_ENTRY_NORMAL, NULL};
    size_t n = handshake(buf, "RFTSQL", 4, 2);

    memset(&c, 0, sizeof c);
    c.from = 2;
    c.to = 1;
    c.type = RAFT_MSG_APPEND_ENTRIES;
    e.data = pattern_buf(payload_len, seed);
    c.append_entries.entries = &e;
    c.append_entries.n_entries = 1;
    m = framed(&c);
    n += frame_of(&m, buf + n, cap - n);
    if (want != NULL) {
        recs_push_message(want, &m);
    }
    raft_buf_unref(e.data);
    return n;
}

/* A frame whose rest waits unread in the socket while the loop thread is
 * held up (a long callback, a loaded machine) past the stall timeout has
 * not stalled: it is read and delivered, with no WARN; a frame whose rest
 * never comes is still closed once the stall timeout passes. */
static void test_held_loop_is_no_stall(void **state)
{
    struct fixture *f = *state;
    struct raw r;
    uint8_t *buf;
    size_t n, cut;
    const uint64_t stall_ms = 200;

    start_cluster(f, 2);
    raft_uv_transport_set_timeouts(f->nodes[0].t, RAFT__UV_HANDSHAKE_TIMEOUT_MS,
                                   stall_ms);
    buf = malloc(1 << 16);
    assert_non_null(buf);
    n = handshake_and_append(buf, 1 << 16, 20000, 3, &f->nodes[0].want);
    cut = n - 10000;

    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, cut);
    WAIT_FOR(f, mid_frame);
    raw_write(&r, buf + cut, n - cut);
    /* The loop thread held up: the sweep is due and the frame's last read
     * is older than the stall timeout, but its rest waits in the socket. */
    usleep((useconds_t)(RAFT__UV_SWEEP_MS + 2 * stall_ms) * 1000);
    WAIT_FOR(f, node1_has_1);
    check_delivered(f);
    assert_null(strstr(f->nodes[0].warns, "stalled"));
    assert_false(r.eof);

    /* Half a frame and then nothing: closed as stalled. */
    raw_close(f, &r);
    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, cut);
    WAIT_FOR(f, raw_eof);
    assert_non_null(strstr(f->nodes[0].warns, "stalled"));
    raw_close(f, &r);
    free(buf);
}

/* has_contact returns whether node 1's transport lists @id as a contact
 * (a new period starts with the call). */
static bool has_contact(struct fixture *f, raft_id id)
{
    raft_id ids[RAFT_MAX_SERVERS];
    unsigned n =
        raft_uv_transport_contacts(f->nodes[0].t, ids, RAFT_MAX_SERVERS);

    for (unsigned i = 0; i < n; i++) {
        if (ids[i] == id) {
            return true;
        }
    }
    return false;
}

/* Contact is a large frame still arriving: whole small frames (a
 * restarted leader's pre-votes) are no contact, or they would keep its
 * old followers' election timers from firing; a period with no new bytes
 * of the large frame is none either. */
static void test_contact_is_a_large_frame_arriving(void **state)
{
    struct fixture *f = *state;
    struct raw r;
    uv_write_t req;
    uv_buf_t b;
    uint8_t *buf;
    size_t n, cut;

    start_cluster(f, 2);
    (void)has_contact(f, 2);
    send_heartbeats(f, 2, 1, 20);
    check_delivered(f);
    assert_false(has_contact(f, 2));

    buf = malloc(1 << 20);
    assert_non_null(buf);
    n = handshake_and_append(buf, 1 << 20, 400000, 5, NULL);
    cut = n / 2;
    raw_open(f, &r, f->nodes[0].port);
    /* Half of it, more than a socket buffer takes at once. */
    b = uv_buf_init((char *)buf, (unsigned)cut);
    assert_int_equal(uv_write(&req, (uv_stream_t *)&r.tcp, &b, 1, NULL), 0);
    WAIT_FOR(f, mid_frame);
    assert_true(has_contact(f, 2));
    assert_false(has_contact(f, 2));
    raw_close(f, &r);
    free(buf);
}

/* Send errors: unknown peer, wrong sender, unknown type, frame over the
 * bound, a core message whose header is not its frame's, full queue; and
 * closing with 64 MiB queued frees everything. */
static void test_send_errors_and_close_with_queue(void **state)
{
    struct fixture *f = *state;
    struct raft_entry e = {1, 1, RAFT_ENTRY_NORMAL, NULL};
    struct raft_frame m;
    unsigned i, n_busy = 0, n_sent = 0;
    int rc;

    start_cluster(f, 2);
    m = heartbeat(1, 3, 0);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_NOTFOUND);
    m.from = 2;
    m.to = 2;
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_INVALID);
    m.from = 1;
    m.type = 99;
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_INVALID);

    m = heartbeat(1, 2, 0);
    m.message.append_entries.entries = &e;
    m.message.append_entries.n_entries = 1;
    e.data = pattern_buf(MAX_FRAME, 2);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_TOOBIG);
    raft_buf_unref(e.data);

    /* A core message whose header is not the frame's. */
    e.data = NULL;
    m.message.to = 3;
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_INVALID);
    m.message.to = 2;

    /* Without running the loop no write completes: the queue fills. */
    e.data = pattern_buf(4u << 20, 3);
    for (i = 0; i < 24; i++) {
        rc = raft_uv_transport_send(f->nodes[0].t, &m);
        if (rc == RAFT_BUSY) {
            n_busy++;
        } else {
            assert_int_equal(rc, 0);
            n_sent++;
        }
    }
    /* 64 MiB holds 15 frames of 4 MiB plus headers. */
    assert_int_equal(n_sent, (64u << 20) / raft_frame_encoded_len(&m));
    raft_buf_unref(e.data);
    assert_int_equal(n_sent, 15);
    assert_int_equal(n_busy, 24 - n_sent);
    /* Close both ends with the queue full; teardown checks the handles,
     * LeakSanitizer the memory, and that nothing arrives after close. */
    stop_node(&f->nodes[1]);
    stop_node(&f->nodes[0]);
}

/* A queue filled to its bound by large entries refuses another large one
 * but still takes a heartbeat: a big entry on its way must not make the
 * next heartbeat be dropped (its followers would start an election). */
static void test_heartbeat_passes_full_queue(void **state)
{
    struct fixture *f = *state;
    struct raft_entry e = {1, 1, RAFT_ENTRY_NORMAL, NULL};
    struct raft_frame m = heartbeat(1, 2, 0);
    struct raft_frame hb = heartbeat(1, 2, 0);
    size_t overhead;

    start_cluster(f, 2);
    m.message.append_entries.entries = &e;
    m.message.append_entries.n_entries = 1;
    /* Frames of exactly 4 MiB: 16 of them fill the 64 MiB queue. */
    overhead = raft_frame_encoded_len(&m);
    e.data = pattern_buf((4u << 20) - overhead, 4);
    assert_int_equal(raft_frame_encoded_len(&m), 4u << 20);
    for (unsigned i = 0; i < 16; i++) {
        assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), 0);
    }
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_BUSY);
    raft_buf_unref(e.data);
    /* Without running the loop nothing completed: the queue is full. */
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &hb), 0);
    stop_node(&f->nodes[1]);
    stop_node(&f->nodes[0]);
}

/* Close from inside the receive callback stops further deliveries. */
static void on_recv_close(void *data, const struct raft_frame *m)
{
    struct node *n = data;

    on_recv(data, m);
    if (n->got.n == 2) {
        stop_node(n);
    }
}

static void test_close_in_callback(void **state)
{
    struct fixture *f = *state;
    struct node *n2 = &f->nodes[1];
    struct raft_uv_peer peer = {1, "127.0.0.1", f->nodes[0].port, ""};
    char err[128];

    start_node(f, 1, 2);
    assert_int_equal(
        raft_uv_transport_start(&f->loop, 2, "127.0.0.1", n2->port, NULL, &peer,
                                1, MAX_FRAME, BUILD, NULL, on_recv_close,
                                on_log, n2, &n2->t, err, sizeof err),
        0);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 10);
    WAIT_FOR(f, all_closed);
    run_for(f, 50);
    assert_int_equal(n2->got.n, 2);
}

/* Two cluster ids for the tests that need them. */
static const uint8_t CLUSTER_A[RAFT_UV_CLUSTER_ID_LEN] = {
    0xa9, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
static const uint8_t CLUSTER_B[RAFT_UV_CLUSTER_ID_LEN] = {
    0x1f, 0x2e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15};

static bool one_two_unreachable(struct fixture *f)
{
    return !raft_uv_transport_connected(f->nodes[0].t, 2) &&
           !raft_uv_transport_connected(f->nodes[1].t, 1);
}

/* assert_warned fails unless server @n logged a WARN holding @what. */
static void assert_warned(const struct node *n, const char *what)
{
    if (strstr(n->warns, what) == NULL) {
        fail_msg("server %u logged no '%s'; it logged:\n%s", (unsigned)n->id,
                 what, n->warns);
    }
}

/* Servers of two clusters refuse each other however often they re-dial:
 * each logs one WARN for the refusal it made and one for the refusal its
 * dial got, naming both ids, and no frame passes. A server without
 * cluster id is refused by none and refuses none, and each side learns
 * the other's id from its handshake. */
static void test_cluster_ids(void **state)
{
    struct fixture *f = *state;
    uint8_t zero[RAFT_UV_CLUSTER_ID_LEN] = {0}, id[RAFT_UV_CLUSTER_ID_LEN];
    char a[RAFT_UV_CLUSTER_ID_HEX], b[RAFT_UV_CLUSTER_ID_HEX], line[256];
    struct raft_frame m;

    raft_uv_cluster_id_hex(CLUSTER_A, a);
    raft_uv_cluster_id_hex(CLUSTER_B, b);
    assert_string_equal(a, "a9b80102030405060708090a0b0c0d0e");
    assert_true(raft_uv_cluster_id_is_zero(zero));
    assert_false(raft_uv_cluster_id_is_zero(CLUSTER_A));
    start_node(f, 1, 2);
    start_node(f, 2, 2);
    raft_uv_transport_set_cluster_id(f->nodes[0].t, CLUSTER_A);
    raft_uv_transport_set_cluster_id(f->nodes[1].t, CLUSTER_B);
    /* Dials at about 0, 100, 300, 700 and 1500 ms, all refused. */
    run_for(f, 1600);
    assert_true(one_two_unreachable(f));
    m = heartbeat(1, 2, 0);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_NOCONN);
    assert_false(raft_uv_transport_peer_cluster_id(f->nodes[0].t, 2, id));
    snprintf(line, sizeof line,
             "refused server 2: its cluster id %s is not this cluster's %s "
             "(a server of another cluster)",
             b, a);
    assert_warned(&f->nodes[0], line);
    snprintf(line, sizeof line,
             "): refused us: cluster id %s is not its cluster %s", a, b);
    assert_warned(&f->nodes[0], line);
    assert_int_equal(f->nodes[0].n_warn, 2);
    snprintf(line, sizeof line,
             "refused server 1: its cluster id %s is not this cluster's %s", a,
             b);
    assert_warned(&f->nodes[1], line);
    assert_int_equal(f->nodes[1].n_warn, 2);

    /* Server 2 has no id: both accept. */
    raft_uv_transport_set_cluster_id(f->nodes[1].t, zero);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 3);
    send_heartbeats(f, 2, 1, 3);
    check_delivered(f);
    assert_true(raft_uv_transport_peer_cluster_id(f->nodes[1].t, 1, id));
    assert_memory_equal(id, CLUSTER_A, sizeof id);
    wait_connected(f, 2, 2);
    assert_true(raft_uv_transport_peer_cluster_id(f->nodes[0].t, 2, id));
    assert_memory_equal(id, zero, sizeof id);
    assert_int_equal(f->nodes[0].n_warn, 2);
    assert_int_equal(f->nodes[1].n_warn, 2);
}

static bool raw_has_answer(struct fixture *f)
{
    (void)f;
    return g_raw->n_got >= RAFT__UV_ANSWER_FIXED &&
           g_raw->n_got >=
               raft_uv_handshake_answer_need(g_raw->got, g_raw->n_got);
}

/* raw_answer waits for the answer to @r's handshake and decodes it. */
static void raw_answer(struct fixture *f, struct raw *r,
                       struct raft_uv_answer *out)
{
    char why[128] = "";

    WAIT_FOR(f, raw_has_answer);
    if (!raft_uv_handshake_answer_decode(
            r->got, raft_uv_handshake_answer_need(r->got, r->n_got), out, why,
            sizeof why)) {
        fail_msg("bad answer: %s", why);
    }
}

/* raw_refused sends the handshake @buf (@n bytes) from a raw client to
 * server 1 and gives the refusal it gets back, then the close. */
static void raw_refused(struct fixture *f, const uint8_t *buf, size_t n,
                        struct raft_uv_answer *out)
{
    struct raw r;

    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, n);
    raw_answer(f, &r, out);
    WAIT_FOR(f, raw_eof);
    raw_close(f, &r);
    assert_int_not_equal(out->verdict, RAFT__UV_ACCEPTED);
}

/* An acceptor answers every handshake: an acceptance with its wire
 * versions, cluster id and server id, after which frames go in the
 * highest version both speak; a refusal names why (no version in common,
 * another cluster) and the connection closes. */
static void test_answers(void **state)
{
    struct fixture *f = *state;
    struct raft_uv_answer a;
    struct raft_frame m;
    uint8_t buf[320];
    char want[120];
    struct raw r;
    size_t n;

    start_cluster(f, 2);
    raft_uv_transport_set_cluster_id(f->nodes[0].t, CLUSTER_A);

    /* A newer server that also speaks this build's versions. */
    n = handshake_at(buf, "RFTSQL", 4, RAFT_WIRE_VERSION_MIN,
                     RAFT_WIRE_VERSION + 3, 2, BUILD, strlen(BUILD), "");
    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, n);
    raw_answer(f, &r, &a);
    assert_int_equal(a.verdict, RAFT__UV_ACCEPTED);
    assert_int_equal(a.wire_min, RAFT_WIRE_VERSION_MIN);
    assert_int_equal(a.wire_max, RAFT_WIRE_VERSION);
    assert_int_equal(a.id, 1);
    assert_memory_equal(a.cluster_id, CLUSTER_A, RAFT_UV_CLUSTER_ID_LEN);
    assert_string_equal(a.reason, "");
    m = heartbeat(2, 1, 77);
    n = frame_of(&m, buf, sizeof buf);
    raw_write(&r, buf, n);
    recs_push_message(&f->nodes[0].want, &m);
    check_delivered(f);
    assert_false(r.eof);
    raw_close(f, &r);

    /* Only newer versions. */
    n = handshake_at(buf, "RFTSQL", 4, RAFT_WIRE_VERSION + 1,
                     RAFT_WIRE_VERSION + 2, 2, BUILD, strlen(BUILD), "");
    raw_refused(f, buf, n, &a);
    assert_int_equal(a.verdict, RAFT__UV_REFUSED_WIRE);
    snprintf(want, sizeof want,
             "it speaks wire versions %u to %u, we speak %u to %u: no "
             "version in common",
             (unsigned)RAFT_WIRE_VERSION_MIN, (unsigned)RAFT_WIRE_VERSION,
             (unsigned)RAFT_WIRE_VERSION + 1, (unsigned)RAFT_WIRE_VERSION + 2);
    assert_non_null(strstr(a.reason, want));

    /* Another cluster. */
    memcpy(g_cluster, CLUSTER_B, sizeof g_cluster);
    n = handshake(buf, "RFTSQL", 4, 2);
    memset(g_cluster, 0, sizeof g_cluster);
    raw_refused(f, buf, n, &a);
    assert_int_equal(a.verdict, RAFT__UV_REFUSED_CLUSTER);
    assert_string_equal(a.reason,
                        "cluster id 1f2e0102030405060708090a0b0c0d0f "
                        "is not its cluster "
                        "a9b80102030405060708090a0b0c0d0e");
    /* The handshake's length byte allows addresses of 255 bytes. */
    {
        char address[256];
        memset(address, 'h', 249);
        strcpy(address + 249, ":7009");
        n = handshake_at(buf, "RFTSQL", 4, RAFT_WIRE_VERSION_MIN,
                         RAFT_WIRE_VERSION, 2, "", 0, address);
        assert_int_equal(n, 35 + 254);
    }
    raw_open(f, &r, f->nodes[0].port);
    raw_write(&r, buf, n);
    raw_answer(f, &r, &a);
    assert_int_equal(a.verdict, RAFT__UV_ACCEPTED);
    raw_close(f, &r);
}

/* A raw server that a transport dials, in place of a peer. */
struct srv {
    uv_tcp_t listener; /* listening on the peer's port */
    struct raw conn;   /* the connection accepted last */
    unsigned n_conns;  /* connections accepted */
};

static struct srv *g_srv; /* the server run_until predicates look at */

static void srv_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct raw *r = s->data;

    if (nread > 0) {
        size_t k = (size_t)nread;
        k = k < sizeof r->got - r->n_got ? k : sizeof r->got - r->n_got;
        memcpy(r->got + r->n_got, buf->base, k);
        r->n_got += k;
    } else if (nread < 0) {
        r->eof = true;
        uv_close((uv_handle_t *)&r->tcp, raw_on_close);
    }
}

static void srv_on_connection(uv_stream_t *server, int status)
{
    struct srv *v = server->data;
    struct raw *r = &v->conn;

    assert_int_equal(status, 0);
    /* The previous connection was failed and closed by the dialler. */
    assert_true(v->n_conns == 0 || r->closed);
    memset(r, 0, sizeof *r);
    assert_int_equal(uv_tcp_init(server->loop, &r->tcp), 0);
    r->tcp.data = r;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&r->tcp), 0);
    r->connected = true;
    assert_int_equal(uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, srv_read),
                     0);
    v->n_conns++;
}

static void srv_open(struct fixture *f, struct srv *v, uint16_t port)
{
    struct sockaddr_in sin = loopback(port);

    memset(v, 0, sizeof *v);
    assert_int_equal(uv_tcp_init(&f->loop, &v->listener), 0);
    v->listener.data = v;
    g_srv = v;
    assert_int_equal(
        uv_tcp_bind(&v->listener, (const struct sockaddr *)&sin, 0), 0);
    assert_int_equal(
        uv_listen((uv_stream_t *)&v->listener, 8, srv_on_connection), 0);
}

static unsigned g_want_conns; /* connections srv_handshake waits for */

static bool srv_has_handshake(struct fixture *f)
{
    (void)f;
    return g_srv->n_conns >= g_want_conns && !g_srv->conn.closed &&
           g_srv->conn.n_got > RAFT__UV_HANDSHAKE_FIXED;
}

/* srv_handshake waits for connection @k (1-based) and its handshake. */
static void srv_handshake(struct fixture *f, unsigned k)
{
    g_want_conns = k;
    WAIT_FOR(f, srv_has_handshake);
}

/* srv_answer writes the answer of server @id with @verdict, wire
 * versions @lo to @hi, cluster id @cid and @reason on the last
 * connection. */
static void srv_answer(struct srv *v, unsigned verdict, uint8_t lo, uint8_t hi,
                       const uint8_t *cid, raft_id id, const char *reason)
{
    uint8_t a[RAFT__UV_ANSWER_MAX] = {
        'R', 'F', 'T', 'S', 'Q', 'L', 4, (uint8_t)verdict, lo, hi};
    size_t len = strlen(reason);

    memcpy(a + 10, cid, RAFT_UV_CLUSTER_ID_LEN);
    raft_byte_store_u64(a + 26, id);
    a[34] = (uint8_t)len;
    memcpy(a + 35, reason, len);
    raw_write(&v->conn, a, 35 + len);
}

static bool srv_eof(struct fixture *f)
{
    (void)f;
    return g_srv->conn.closed;
}

/* A dialler sends no frame before the acceptance, logs a refusal once
 * until it changes (its backoff re-dials), refuses an answer from another
 * server than it dialled, one whose versions do not meet its own and
 * bytes after the answer, and sends its frames in the highest version
 * both speak. */
static void test_dialler(void **state)
{
    struct fixture *f = *state;
    uint8_t zero[RAFT_UV_CLUSTER_ID_LEN] = {0};
    struct raft_frame m;
    uint8_t buf[64];
    struct srv v;
    size_t n;

    srv_open(f, &v, f->nodes[1].port);
    start_node(f, 1, 2);
    srv_handshake(f, 1);
    assert_int_equal(v.conn.n_got, RAFT__UV_HANDSHAKE_FIXED + strlen(BUILD) +
                                       1 + strlen("127.0.0.1:") +
                                       (f->nodes[0].port >= 10000 ? 5 : 4));
    assert_memory_equal(v.conn.got, "RFTSQL\x04", 7);
    assert_int_equal(v.conn.got[7], RAFT_WIRE_VERSION_MIN);
    assert_int_equal(v.conn.got[8], RAFT_WIRE_VERSION);
    assert_int_equal(raft_byte_load_u64(v.conn.got + 25), 1);
    m = heartbeat(1, 2, 0);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_NOCONN);
    assert_int_equal(raft_uv_transport_peer_wire(f->nodes[0].t, 2), 0);
    assert_int_equal(raft_uv_transport_peer_wire(f->nodes[0].t, 9), 0);
    assert_int_equal(raft_uv_transport_peer_wire_last(f->nodes[0].t, 2), 0);
    assert_int_equal(raft_uv_transport_peer_wire_last(f->nodes[0].t, 9), 0);

    /* The same refusal twice: one WARN. */
    srv_answer(&v, RAFT__UV_REFUSED_CLUSTER, 1, 1, CLUSTER_B, 2,
               "cluster id none is not its cluster 1f2e");
    WAIT_FOR(f, srv_eof);
    assert_int_equal(f->nodes[0].n_warn, 1);
    assert_warned(&f->nodes[0],
                  "peer 2 (127.0.0.1:"); /* the peer's name, then: */
    assert_warned(&f->nodes[0],
                  "): refused us: cluster id none is not its cluster 1f2e");
    srv_handshake(f, 2);
    srv_answer(&v, RAFT__UV_REFUSED_CLUSTER, 1, 1, CLUSTER_B, 2,
               "cluster id none is not its cluster 1f2e");
    WAIT_FOR(f, srv_eof);
    assert_int_equal(f->nodes[0].n_warn, 1);

    /* Another server at that address. */
    srv_handshake(f, 3);
    srv_answer(&v, RAFT__UV_ACCEPTED, 1, 1, zero, 3, "");
    WAIT_FOR(f, srv_eof);
    assert_warned(&f->nodes[0], "the server at this address is server 3");

    /* No version in common. */
    srv_handshake(f, 4);
    srv_answer(&v, RAFT__UV_ACCEPTED, RAFT_WIRE_VERSION + 1,
               RAFT_WIRE_VERSION + 1, zero, 2, "");
    WAIT_FOR(f, srv_eof);
    assert_warned(&f->nodes[0], "accepted us but speaks wire versions");

    /* Accepted by a newer server: frames go in this build's version. */
    srv_handshake(f, 5);
    srv_answer(&v, RAFT__UV_ACCEPTED, RAFT_WIRE_VERSION_MIN,
               RAFT_WIRE_VERSION + 4, CLUSTER_A, 2, "");
    wait_connected(f, 1, 2);
    n = v.conn.n_got;
    m = heartbeat(1, 2, 5);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), 0);
    run_for(f, 50);
    assert_int_equal(v.conn.n_got, n + raft_frame_encoded_len(&m));
    assert_int_equal(v.conn.got[n + RAFT_FRAME_HEADER], RAFT_WIRE_VERSION);
    assert_int_equal(raft_uv_transport_peer_wire(f->nodes[0].t, 2),
                     RAFT_WIRE_VERSION);

    /* Bytes after the answer. */
    buf[0] = 0;
    raw_write(&v.conn, buf, 1);
    WAIT_FOR(f, srv_eof);
    assert_warned(&f->nodes[0], "unexpected bytes on outgoing connection");
    /* Closed: what it spoke when last reached is kept. */
    assert_int_equal(raft_uv_transport_peer_wire(f->nodes[0].t, 2), 0);
    assert_int_equal(raft_uv_transport_peer_wire_last(f->nodes[0].t, 2),
                     RAFT_WIRE_VERSION);

    /* Accepted by a server of wire version 1 only: frames go in version
     * 1, and a CHECKSUM frame (version 2 on) is refused, never sent. */
    srv_handshake(f, 6);
    srv_answer(&v, RAFT__UV_ACCEPTED, 1, 1, CLUSTER_A, 2, "");
    wait_connected(f, 1, 2);
    assert_int_equal(raft_uv_transport_peer_wire(f->nodes[0].t, 2), 1);
    assert_int_equal(raft_uv_transport_peer_wire_last(f->nodes[0].t, 2), 1);
    n = v.conn.n_got;
    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_CHECKSUM;
    m.from = 1;
    m.to = 2;
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), RAFT_INVALID);
    m = heartbeat(1, 2, 6);
    assert_int_equal(raft_uv_transport_send(f->nodes[0].t, &m), 0);
    run_for(f, 50);
    assert_int_equal(v.conn.n_got, n + raft_frame_encoded_len_at(&m, 1));
    assert_int_equal(v.conn.got[n + RAFT_FRAME_HEADER], 1);
    stop_node(&f->nodes[0]);
    WAIT_FOR(f, all_closed);
    uv_close((uv_handle_t *)&v.listener, NULL);
    run_for(f, 20);
}

/* Bad arguments and a busy port are refused, leaving nothing behind. */
static void test_start_errors(void **state)
{
    struct fixture *f = *state;
    struct raft_uv_transport *t = NULL;
    struct raft_uv_peer peer = {2, "127.0.0.1", 1, ""};
    char err[256] = "";

    assert_int_equal(raft_uv_transport_start(
                         &f->loop, 1, "not-an-ip", 0, NULL, NULL, 0, MAX_FRAME,
                         NULL, NULL, on_recv, NULL, NULL, &t, err, sizeof err),
                     RAFT_INVALID);
    assert_null(t);
    /* A hostname is no listen address (what to bind is an IP). */
    assert_int_equal(raft_uv_transport_start(
                         &f->loop, 1, "localhost", 0, NULL, NULL, 0, MAX_FRAME,
                         NULL, NULL, on_recv, NULL, NULL, &t, err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "bad listen address localhost"));
    assert_int_equal(
        raft_uv_transport_start(&f->loop, 1, "127.0.0.1", 0, "[::1]", NULL, 0,
                                MAX_FRAME, NULL, NULL, on_recv, NULL, NULL, &t,
                                err, sizeof err),
        RAFT_INVALID);
    assert_non_null(strstr(err, "bad advertised address '[::1]'"));
    assert_null(t);
    peer.id = 1;
    assert_int_equal(raft_uv_transport_start(
                         &f->loop, 1, "127.0.0.1", 0, NULL, &peer, 1, MAX_FRAME,
                         NULL, NULL, on_recv, NULL, NULL, &t, err, sizeof err),
                     RAFT_INVALID);
    peer.id = 2;
    assert_int_equal(
        raft_uv_transport_start(&f->loop, 1, "127.0.0.1", 0, NULL, &peer, 1,
                                MAX_FRAME, "bad\nbuild", NULL, on_recv, NULL,
                                NULL, &t, err, sizeof err),
        RAFT_INVALID);
    assert_non_null(strstr(err, "not printable ASCII"));
    {
        char big[RAFT_UV_BUILD_ID_MAX + 2];
        memset(big, 'b', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        assert_int_equal(
            raft_uv_transport_start(&f->loop, 1, "127.0.0.1", 0, NULL, &peer, 1,
                                    MAX_FRAME, big, NULL, on_recv, NULL, NULL,
                                    &t, err, sizeof err),
            RAFT_INVALID);
        assert_non_null(strstr(err, "build id of 129 bytes, at most 128"));
    }
    strcpy(peer.host, "bad_host");
    assert_int_equal(raft_uv_transport_start(
                         &f->loop, 1, "127.0.0.1", 0, NULL, &peer, 1, MAX_FRAME,
                         NULL, NULL, on_recv, NULL, NULL, &t, err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "hostname 'bad_host' has '_'"));
    assert_null(t);

    start_node(f, 1, 1);
    assert_int_equal(
        raft_uv_transport_start(&f->loop, 2, "127.0.0.1", f->nodes[0].port,
                                NULL, NULL, 0, MAX_FRAME, NULL, NULL, on_recv,
                                NULL, NULL, &t, err, sizeof err),
        RAFT_IOERR);
    assert_null(t);
    assert_non_null(strstr(err, "bind"));
}

/* ipv6_loopback says whether this machine can listen on ::1. */
static bool ipv6_loopback(void)
{
    struct sockaddr_in6 sin6;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool ok;

    if (fd < 0) {
        return false;
    }
    memset(&sin6, 0, sizeof sin6);
    sin6.sin6_family = AF_INET6;
    sin6.sin6_addr = in6addr_loopback;
    ok = bind(fd, (struct sockaddr *)&sin6, sizeof sin6) == 0;
    close(fd);
    return ok;
}

/* Three servers listen and dial on ::1; frames pass every way. */
static void test_ipv6(void **state)
{
    struct fixture *f = *state;

    if (!ipv6_loopback()) {
        skip(); /* no ::1 here */
    }
    for (unsigned i = 1; i <= 3; i++) {
        start_node_at(f, i, 3, "::1", "::1", NULL);
    }
    wait_connected(f, 3, 3);
    send_heartbeats(f, 1, 2, 3);
    send_heartbeats(f, 2, 3, 3);
    send_heartbeats(f, 3, 1, 3);
    check_delivered(f);
}

/* Peers known by hostname ("localhost", resolved before each dial) are
 * reached, and reached again after a restart. */
static void test_hostname_peers(void **state)
{
    struct fixture *f = *state;

    start_node_at(f, 1, 2, "127.0.0.1", "localhost", NULL);
    start_node_at(f, 2, 2, "127.0.0.1", "localhost", NULL);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 1, 2, 3);
    send_heartbeats(f, 2, 1, 3);
    check_delivered(f);
    stop_node(&f->nodes[1]);
    WAIT_FOR(f, all_closed);
    start_node_at(f, 2, 2, "127.0.0.1", "localhost", NULL);
    wait_connected(f, 2, 2);
    assert_int_equal(f->nodes[0].n_warn, 0);
}

/* A server on the wildcard 0.0.0.0 advertises a hostname; a server that
 * does not know it dials it back at that name (raft_uv_tcp_learn). */
static void test_wildcard_advertised(void **state)
{
    struct fixture *f = *state;
    char advertise[32];

    snprintf(advertise, sizeof advertise, "localhost:%u",
             (unsigned)f->nodes[0].port);
    start_node_at(f, 1, 2, "0.0.0.0", "127.0.0.1", advertise);
    start_node_at(f, 2, 0, "127.0.0.1", "127.0.0.1", NULL);
    wait_connected(f, 2, 2);
    send_heartbeats(f, 2, 1, 3);
    check_delivered(f);
}

/* A peer removed, re-addressed, or its transport closed while its name
 * resolves drops the result; nothing leaks or outlives the transport. */
static void test_change_while_resolving(void **state)
{
    struct fixture *f = *state;
    struct raft_uv_peer p = {3, "localhost", f->nodes[2].port, ""};

    start_node_at(f, 1, 2, "127.0.0.1", "localhost", NULL);
    assert_int_equal(raft_uv_transport_remove_peer(f->nodes[0].t, 2), 0);
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p), 0);
    snprintf(p.host, sizeof p.host, "127.0.0.1");
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p), 0);
    snprintf(p.host, sizeof p.host, "localhost");
    assert_int_equal(raft_uv_transport_add_peer(f->nodes[0].t, &p), 0);
    stop_node(&f->nodes[0]);
    WAIT_FOR(f, all_closed);
    /* And once the loop ran: a fresh start resolves and connects. */
    start_node_at(f, 1, 2, "127.0.0.1", "localhost", NULL);
    start_node_at(f, 2, 2, "127.0.0.1", "localhost", NULL);
    wait_connected(f, 2, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_three_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peers_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect_after_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hostile_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reassembly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_held_loop_is_no_stall, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_contact_is_a_large_frame_arriving,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_errors_and_close_with_queue,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_passes_full_queue, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_in_callback, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ipv6, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostname_peers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wildcard_advertised, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_change_while_resolving, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_start_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dialler, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
