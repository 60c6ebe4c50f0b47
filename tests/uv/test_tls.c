/* Tests of TLS beneath the transport (raft/uv_tls.h, uv_tls_stream.c):
 * transports on a real loop over 127.0.0.1 with certificates made at test
 * time with the OpenSSL API (a CA, and one EC P-256 certificate per use)
 * in a temporary directory, or a pre-shared secret. Frames pass both ways;
 * a wrong CA, a wrong identity, a missing certificate and a wrong secret
 * are refused with a WARN; a flipped byte closes only that connection; bad
 * files are refused at start and at reload, naming the file. Every wait
 * is bounded (5 s). */

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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "raft/message.h"
#include "raft/uv.h"
#include "raft/uv_tls.h"

#define WAIT_MS 5000
#define MAX_NODES 3
#define MAX_FRAME (8u << 20)
#define DAY (24 * 3600L)

/* ---- Certificates --------------------------------------------------- */

static char g_dir[64]; /* the temporary directory of the test */
static long g_serial = 1;

/* path_of returns "@g_dir/@name" in a static buffer (one of four). */
static const char *path_of(const char *name)
{
    static char bufs[4][256];
    static unsigned next;
    char *b = bufs[next++ % 4];

    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *e;

    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    assert_non_null(e);
    assert_int_equal(X509_add_ext(x, e, -1), 1);
    X509_EXTENSION_free(e);
}

/* A key and its certificate. */
struct cred {
    EVP_PKEY *key;
    X509 *cert;
};

/* make_cred makes a key and a certificate for @cn valid from @from_s to
 * @to_s seconds from now, signed by @ca (NULL: a self-signed CA), naming
 * @san (NULL: none). */
static struct cred make_cred(const char *cn, const struct cred *ca,
                             const char *san, long from_s, long to_s)
{
    struct cred c = {EVP_EC_gen("P-256"), X509_new()};
    X509_NAME *name;

    assert_non_null(c.key);
    assert_non_null(c.cert);
    X509_set_version(c.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c.cert), g_serial++);
    X509_gmtime_adj(X509_getm_notBefore(c.cert), from_s);
    X509_gmtime_adj(X509_getm_notAfter(c.cert), to_s);
    X509_set_pubkey(c.cert, c.key);
    name = X509_get_subject_name(c.cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c.cert,
                         ca != NULL ? X509_get_subject_name(ca->cert) : name);
    if (ca == NULL) {
        add_ext(c.cert, c.cert, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(c.cert, c.cert, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(c.cert, ca->cert, NID_basic_constraints, "CA:FALSE");
        add_ext(c.cert, ca->cert, NID_ext_key_usage, "serverAuth,clientAuth");
        if (san != NULL) {
            add_ext(c.cert, ca->cert, NID_subject_alt_name, san);
        }
    }
    assert_true(X509_sign(c.cert, ca != NULL ? ca->key : c.key, EVP_sha256()) >
                0);
    return c;
}

static void free_cred(struct cred *c)
{
    EVP_PKEY_free(c->key);
    X509_free(c->cert);
}

/* write_cred writes @c as "@name.pem" and "@name.key". */
static void write_cred(const struct cred *c, const char *name)
{
    char file[64];
    FILE *f;

    snprintf(file, sizeof file, "%s.pem", name);
    f = fopen(path_of(file), "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, c->cert), 1);
    fclose(f);
    snprintf(file, sizeof file, "%s.key", name);
    f = fopen(path_of(file), "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, c->key, NULL, NULL, 0, NULL, NULL),
                     1);
    fclose(f);
}

/* issue writes a certificate "@name" for @san signed by @ca. */
static void issue(const struct cred *ca, const char *name, const char *san,
                  long from_s, long to_s)
{
    struct cred c = make_cred(name, ca, san, from_s, to_s);

    write_cred(&c, name);
    free_cred(&c);
}

static void write_file(const char *name, const char *text, mode_t mode)
{
    FILE *f = fopen(path_of(name), "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path_of(name), mode), 0);
}

/* new_tls loads the credentials "@name.pem/.key" with CA "@ca.pem". */
static struct raft_uv_tls *new_tls(const char *name, const char *ca)
{
    char cert[256], key[256], cafile[256], err[512] = "";
    struct raft_uv_tls_config cfg = {cert, key, cafile, NULL};
    struct raft_uv_tls *tls = NULL;

    snprintf(cert, sizeof cert, "%s/%s.pem", g_dir, name);
    snprintf(key, sizeof key, "%s/%s.key", g_dir, name);
    snprintf(cafile, sizeof cafile, "%s/%s.pem", g_dir, ca);
    if (raft_uv_tls_new(&cfg, &tls, err, sizeof err) != 0) {
        fail_msg("tls %s: %s", name, err);
    }
    return tls;
}

/* new_psk loads the secret file @name. */
static struct raft_uv_tls *new_psk(const char *name)
{
    struct raft_uv_tls_config cfg = {NULL, NULL, NULL, path_of(name)};
    struct raft_uv_tls *tls = NULL;
    char err[512] = "";

    if (raft_uv_tls_new(&cfg, &tls, err, sizeof err) != 0) {
        fail_msg("psk %s: %s", name, err);
    }
    return tls;
}

/* tls_error returns the error raft_uv_tls_new gives for @cfg. */
static const char *tls_error(const char *cert, const char *key, const char *ca,
                             const char *secret)
{
    static char err[512];
    char c[256], k[256], a[256], s[256];
    struct raft_uv_tls_config cfg = {NULL, NULL, NULL, NULL};
    struct raft_uv_tls *tls = NULL;

#define TLS__PATH(buf, name, field)                                            \
    if (name != NULL) {                                                        \
        snprintf(buf, sizeof buf, "%s/%s", g_dir, name);                       \
        cfg.field = buf;                                                       \
    }
    TLS__PATH(c, cert, cert_file)
    TLS__PATH(k, key, key_file)
    TLS__PATH(a, ca, ca_file)
    TLS__PATH(s, secret, secret_file)
#undef TLS__PATH
    err[0] = '\0';
    assert_int_equal(raft_uv_tls_new(&cfg, &tls, err, sizeof err),
                     RAFT_INVALID);
    assert_null(tls);
    return err;
}

/* ---- Transports ------------------------------------------------------ */

struct node {
    raft_id id;                        /* server id */
    uint16_t port;                     /* listen port */
    struct raft_uv_transport *t;       /* NULL when not running */
    struct raft_uv_tls *tls;           /* its credentials, NULL: plain */
    unsigned n_got;                    /* frames received */
    uint64_t got_bytes;                /* their payload bytes */
    char warns[16384];                 /* every WARN line, one per line */
    unsigned n_secured;                /* outgoing TLS connections made */
    bool closing;                      /* close called, cb not yet */
    uint16_t dial_port[MAX_NODES + 1]; /* where it dials each, 0: its
                                          port */
};

struct fixture {
    uv_loop_t loop;
    uv_timer_t tick;
    struct node nodes[MAX_NODES];
};

static struct fixture *g_f;

static void on_recv(void *data, const struct raft_frame *m)
{
    struct node *n = data;

    assert_true(m->to == n->id);
    n->n_got++;
    if (m->type == RAFT_FRAME_FORWARD) {
        n->got_bytes += m->forward.data->len;
    }
}

static void on_log(void *data, int level, const char *msg)
{
    struct node *n = data;
    size_t at = strlen(n->warns);

    if (getenv("TEST_VERBOSE") != NULL) {
        fprintf(stderr, "[%d] %s\n", level, msg);
    }
    if (strstr(msg, ": connected (") != NULL) {
        n->n_secured++;
    }
    if (level >= RAFT_LOG_WARN && at < sizeof n->warns - 1) {
        snprintf(n->warns + at, sizeof n->warns - at, "%s\n", msg);
    }
}

/* fixture_progress counts the frames and bytes every node received. */
static uint64_t fixture_progress(struct fixture *f)
{
    uint64_t sum = 0;
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        sum += f->nodes[i].n_got + f->nodes[i].got_bytes;
    }
    return sum;
}

/* fixture_report prints, per node, the frames received and the WARN
 * lines. */
static void fixture_report(struct fixture *f)
{
    unsigned i;

    for (i = 0; i < MAX_NODES; i++) {
        fprintf(stderr, "node %u: %u frames received; warns:\n%s", i + 1,
                f->nodes[i].n_got, f->nodes[i].warns);
    }
}

#include "loop.h"

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct cred ca, other;

    assert_non_null(f);
    snprintf(g_dir, sizeof g_dir, "/tmp/raftsql-tls-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    ca = make_cred("test CA", NULL, NULL, -DAY, 30 * DAY);
    other = make_cred("another CA", NULL, NULL, -DAY, 30 * DAY);
    write_cred(&ca, "ca");
    write_cred(&other, "other");
    issue(&ca, "good", "IP:127.0.0.1", -DAY, 10 * DAY);
    issue(&ca, "good2", "IP:127.0.0.1, DNS:node", -DAY, 20 * DAY);
    issue(&ca, "elsewhere", "IP:127.0.0.9, DNS:node9", -DAY, 10 * DAY);
    issue(&ca, "byname", "DNS:localhost", -DAY, 10 * DAY);
    issue(&other, "untrusted", "IP:127.0.0.1", -DAY, 10 * DAY);
    issue(&ca, "expired", "IP:127.0.0.1", -10 * DAY, -DAY);
    issue(&ca, "future", "IP:127.0.0.1", DAY, 10 * DAY);
    free_cred(&ca);
    free_cred(&other);
    write_file("secret", "0123456789abcdef0123456789abcdef\n", 0600);
    write_file("secret2", "fedcba9876543210fedcba9876543210\n", 0600);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_timer_init(&f->loop, &f->tick), 0);
    for (unsigned i = 0; i < MAX_NODES; i++) {
        f->nodes[i].id = i + 1;
        f->nodes[i].port = reserve_port();
    }
    g_f = f;
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
    for (unsigned i = 0; i < MAX_NODES; i++) {
        if (f->nodes[i].closing) {
            return false;
        }
    }
    return true;
}

static void stop_node(struct node *n)
{
    if (n->t != NULL) {
        n->closing = true;
        raft_uv_transport_close(n->t, on_closed, n);
        n->t = NULL;
    }
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];

    for (unsigned i = 0; i < MAX_NODES; i++) {
        stop_node(&f->nodes[i]);
    }
    WAIT_FOR(f, all_closed);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (unsigned i = 0; i < MAX_NODES; i++) {
        raft_uv_tls_free(f->nodes[i].tls);
    }
    free(f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* The host of every peer's address (an IP literal or a hostname). */
static const char *g_host = "127.0.0.1";

/* start_node starts server @id with the first @n_nodes servers as peers
 * at g_host, each of them expected to hold a certificate naming it. */
static void start_node(struct fixture *f, unsigned id, unsigned n_nodes)
{
    struct node *n = &f->nodes[id - 1];
    struct raft_uv_peer peers[MAX_NODES];
    unsigned n_peers = 0;
    char err[256] = "";
    char address[64];
    int rc;

    memset(peers, 0, sizeof peers);
    for (unsigned i = 1; i <= n_nodes; i++) {
        if (i == id) {
            continue;
        }
        peers[n_peers].id = i;
        snprintf(peers[n_peers].host, sizeof peers[n_peers].host, "%s", g_host);
        peers[n_peers].port =
            n->dial_port[i] != 0 ? n->dial_port[i] : f->nodes[i - 1].port;
        snprintf(address, sizeof address, "%s:1", g_host);
        raft_uv_peer_set_identity(&peers[n_peers], address);
        n_peers++;
    }
    rc = raft_uv_transport_start(&f->loop, id, "127.0.0.1", n->port, NULL,
                                 peers, n_peers, MAX_FRAME, "build", n->tls,
                                 on_recv, on_log, n, &n->t, err, sizeof err);
    if (rc != 0) {
        fail_msg("start node %u: %d %s", id, rc, err);
    }
}

static void start_cluster(struct fixture *f, unsigned n_nodes)
{
    for (unsigned i = 1; i <= n_nodes; i++) {
        start_node(f, i, n_nodes);
    }
    wait_connected(f, n_nodes, n_nodes);
}

/* send_forward sends a FORWARD frame with @len payload bytes. */
static int send_forward(struct node *from, raft_id to, size_t len)
{
    struct raft_frame m;
    int rc;

    memset(&m, 0, sizeof m);
    m.from = from->id;
    m.to = to;
    m.type = RAFT_FRAME_FORWARD;
    m.forward.request_id[0] = from->id;
    m.forward.data = raft_buf_new(len);
    assert_non_null(m.forward.data);
    memset(m.forward.data->data, 0x5a, len);
    rc = raft_uv_transport_send(from->t, &m);
    raft_buf_unref(m.forward.data);
    return rc;
}

static unsigned g_want[MAX_NODES];

static bool got_wanted(struct fixture *f)
{
    for (unsigned i = 0; i < MAX_NODES; i++) {
        if (f->nodes[i].n_got < g_want[i]) {
            return false;
        }
    }
    return true;
}

/* exchange sends @n small frames and one of @big bytes each way between
 * nodes 1 and 2 and waits for all of them. */
static void exchange(struct fixture *f, unsigned n, size_t big)
{
    struct node *a = &f->nodes[0], *b = &f->nodes[1];

    for (unsigned k = 0; k < n; k++) {
        assert_int_equal(send_forward(a, 2, 40 + k), 0);
        assert_int_equal(send_forward(b, 1, 40 + k), 0);
    }
    assert_int_equal(send_forward(a, 2, big), 0);
    assert_int_equal(send_forward(b, 1, big), 0);
    g_want[0] = a->n_got + n + 1;
    g_want[1] = b->n_got + n + 1;
    g_want[2] = 0;
    WAIT_FOR(f, got_wanted);
}

/* ---- Tests ------------------------------------------------------------ */

/* With certificates, frames of every size pass both ways, in order, many
 * small ones coalesced into records. */
static void test_certificates(void **state)
{
    struct fixture *f = *state;

    f->nodes[0].tls = new_tls("good", "ca");
    f->nodes[1].tls = new_tls("good2", "ca");
    start_cluster(f, 2);
    exchange(f, 200, 3u << 20);
    assert_int_equal(f->nodes[1].got_bytes, f->nodes[0].got_bytes);
    assert_string_equal(f->nodes[0].warns, "");
    assert_string_equal(f->nodes[1].warns, "");
}

/* A pre-shared secret: frames pass. */
static void test_psk(void **state)
{
    struct fixture *f = *state;

    f->nodes[0].tls = new_psk("secret");
    f->nodes[1].tls = new_psk("secret");
    assert_int_equal(raft_uv_tls_mode(f->nodes[0].tls), RAFT_UV_TLS_PSK);
    start_cluster(f, 2);
    exchange(f, 50, 100000);
    assert_string_equal(f->nodes[0].warns, "");
}

/* refused starts nodes 1 and 2 and checks they never connect, and that
 * each logged a WARN holding @want1 / @want2 (NULL: not checked). */
static void refused(struct fixture *f, const char *want1, const char *want2)
{
    start_node(f, 1, 2);
    start_node(f, 2, 2);
    run_for(f, 1500);
    assert_false(raft_uv_transport_connected(f->nodes[0].t, 2));
    assert_false(raft_uv_transport_connected(f->nodes[1].t, 1));
    assert_int_equal(f->nodes[0].n_got + f->nodes[1].n_got, 0);
    /* Not even for a moment did an outgoing connection count as made,
     * which would let frames out to a server not authenticated (a client
     * whose certificate the acceptor refuses once its handshake names it
     * is refused before the acceptance). */
    assert_int_equal(f->nodes[0].n_secured + f->nodes[1].n_secured, 0);
    if (want1 != NULL && strstr(f->nodes[0].warns, want1) == NULL) {
        fail_msg("node 1 logged no '%s':\n%s", want1, f->nodes[0].warns);
    }
    if (want2 != NULL && strstr(f->nodes[1].warns, want2) == NULL) {
        fail_msg("node 2 logged no '%s':\n%s", want2, f->nodes[1].warns);
    }
}

/* A certificate from another CA is refused by both ends. */
static void test_wrong_ca(void **state)
{
    struct fixture *f = *state;

    f->nodes[0].tls = new_tls("good", "ca");
    f->nodes[1].tls = new_tls("untrusted", "other");
    refused(f, "certificate verify failed", "certificate verify failed");
    /* The same failure, re-dialled every few hundred ms, is logged once
     * per 10 s per peer, not at every attempt. */
    assert_true(strlen(f->nodes[0].warns) < 800);
}

/* A certificate that does not name the member's host is refused: by the
 * dialler (the server it reached) and by the acceptor (the client, once
 * its handshake gave its id: a refusal, which the client logs too), each
 * naming what the certificate holds. */
static void test_wrong_identity(void **state)
{
    struct fixture *f = *state;

    f->nodes[0].tls = new_tls("good", "ca");
    f->nodes[1].tls = new_tls("elsewhere", "ca");
    refused(f, "IP:127.0.0.9, DNS:node9",
            "refused us: its certificate does not name 127.0.0.1, the host "
            "of server 2's address in the configuration (it holds: "
            "IP:127.0.0.9, DNS:node9)");
    assert_non_null(strstr(f->nodes[0].warns, "peer 2 (127.0.0.1:"));
    assert_non_null(
        strstr(f->nodes[0].warns, "its certificate does not name 127.0.0.1"));
    assert_non_null(strstr(f->nodes[0].warns,
                           "server 2's certificate does not name 127.0.0.1"));
}

/* Peers known by hostname are checked against that name (a DNS entry),
 * not the IP it resolves to: a certificate naming it passes, one naming
 * only the IP is refused. */
static void test_hostname_identity(void **state)
{
    struct fixture *f = *state;

    g_host = "localhost";
    f->nodes[0].tls = new_tls("byname", "ca");
    f->nodes[1].tls = new_tls("byname", "ca");
    start_cluster(f, 2);
    exchange(f, 10, 1000);
    assert_string_equal(f->nodes[0].warns, "");
    stop_node(&f->nodes[0]);
    stop_node(&f->nodes[1]);
    WAIT_FOR(f, all_closed);
    raft_uv_tls_free(f->nodes[1].tls);
    f->nodes[1].tls = new_tls("good", "ca");
    for (unsigned i = 0; i < 2; i++) {
        f->nodes[i].warns[0] = '\0';
        f->nodes[i].n_got = f->nodes[i].n_secured = 0;
    }
    refused(f, "server 2's certificate does not name localhost",
            "refused us: its certificate does not name localhost");
    assert_non_null(strstr(f->nodes[0].warns,
                           "refused: its certificate does not name "
                           "localhost, the host of server 2's address"));
    g_host = "127.0.0.1";
}

/* A plain server meets a TLS one: nothing passes. The plain one's
 * handshake, in the clear, gets a refusal in the clear that says why,
 * logged once however often it re-dials, and names neither the TLS
 * server's id nor its cluster. */
static void test_plain_against_tls(void **state)
{
    struct fixture *f = *state;
    const char *why =
        "): refused us: it takes peers over TLS only "
        "(tls_cert= or secret_file=), we run without\n";
    const char *at;

    f->nodes[0].tls = new_tls("good", "ca");
    refused(f,
            "TLS handshake failed (closing): a raftsql handshake in the "
            "clear",
            why);
    at = strstr(f->nodes[1].warns, why);
    assert_null(strstr(at + 1, why));
    assert_null(strstr(f->nodes[1].warns, "server at this address is"));
}

/* A wrong secret and a certificate against a secret are refused, both
 * ways. */
static void test_wrong_psk(void **state)
{
    struct fixture *f = *state;

    f->nodes[0].tls = new_psk("secret");
    f->nodes[1].tls = new_psk("secret2");
    /* Each says why, as acceptor and as dialler. */
    refused(f, "TLS handshake failed (closing): binder does not verify",
            "TLS handshake failed (closing): sslv3 alert illegal parameter: "
            "the server did not take our pre-shared key (another "
            "secret_file?)");
    assert_non_null(strstr(f->nodes[0].warns,
                           "the server did not take our "
                           "pre-shared key"));
    assert_non_null(strstr(f->nodes[1].warns, "binder does not verify"));
    stop_node(&f->nodes[0]);
    stop_node(&f->nodes[1]);
    WAIT_FOR(f, all_closed);
    raft_uv_tls_free(f->nodes[1].tls);
    f->nodes[1].tls = new_tls("good", "ca");
    /* A server that shows a certificate to a PSK client (which has none
     * to verify it with) is refused before anything is sent to it. */
    refused(f, "refused: the server did not use the pre-shared secret",
            "TLS handshake failed");
}

/* A proxy between two transports that can flip one byte of what the
 * dialler sends (after the TLS handshake). */
struct proxy {
    uv_tcp_t listener; /* where the dialler connects */
    uint16_t port;     /* its port */
    uint16_t target;   /* where it forwards */
    bool flip;         /* flip a byte of the next chunk from the dialler */
    unsigned n_open;   /* handles open */
};

struct pipe {
    struct proxy *p;
    uv_tcp_t a;           /* from the dialler */
    uv_tcp_t b;           /* to the target */
    uv_connect_t connect; /* of @b */
    unsigned n_open;      /* of @a and @b */
    bool closing;
    char abuf[65536];
    char bbuf[65536];
};

static struct proxy g_proxy;

static void on_pipe_closed(uv_handle_t *h)
{
    struct pipe *pp = h->data;

    g_proxy.n_open--;
    if (--pp->n_open == 0) {
        free(pp);
    }
}

static void pipe_close(struct pipe *pp)
{
    if (!pp->closing) {
        pp->closing = true;
        uv_close((uv_handle_t *)&pp->a, on_pipe_closed);
        uv_close((uv_handle_t *)&pp->b, on_pipe_closed);
    }
}

static void on_pipe_write(uv_write_t *req, int status)
{
    (void)status;
    free(req);
}

static void pipe_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct pipe *pp = h->data;

    (void)suggested;
    *buf = uv_buf_init(h == (uv_handle_t *)&pp->a ? pp->abuf : pp->bbuf,
                       sizeof pp->abuf);
}

static void pipe_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct pipe *pp = s->data;
    bool from_a = s == (uv_stream_t *)&pp->a;
    uv_write_t *w;
    uv_buf_t out;

    if (nread < 0) {
        pipe_close(pp);
        return;
    }
    if (nread == 0 || pp->closing) {
        return;
    }
    w = malloc(sizeof *w + (size_t)nread);
    assert_non_null(w);
    memcpy(w + 1, buf->base, (size_t)nread);
    if (from_a && pp->p->flip && nread > 10) {
        ((uint8_t *)(w + 1))[nread - 5] ^= 0x20; /* inside a record */
        pp->p->flip = false;
    }
    out = uv_buf_init((char *)(w + 1), (unsigned)nread);
    uv_write(w, (uv_stream_t *)(from_a ? &pp->b : &pp->a), &out, 1,
             on_pipe_write);
}

static void on_pipe_connect(uv_connect_t *req, int status)
{
    struct pipe *pp = req->data;

    if (status != 0 || pp->closing) {
        pipe_close(pp);
        return;
    }
    uv_read_start((uv_stream_t *)&pp->a, pipe_alloc, pipe_read);
    uv_read_start((uv_stream_t *)&pp->b, pipe_alloc, pipe_read);
}

static void on_proxy_conn(uv_stream_t *server, int status)
{
    struct proxy *p = server->data;
    struct pipe *pp = calloc(1, sizeof *pp);
    struct sockaddr_in sin;

    assert_int_equal(status, 0);
    assert_non_null(pp);
    pp->p = p;
    uv_tcp_init(server->loop, &pp->a);
    uv_tcp_init(server->loop, &pp->b);
    pp->a.data = pp->b.data = pp->connect.data = pp;
    pp->n_open = 2;
    p->n_open += 2;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&pp->a), 0);
    uv_ip4_addr("127.0.0.1", p->target, &sin);
    uv_tcp_connect(&pp->connect, &pp->b, (const struct sockaddr *)&sin,
                   on_pipe_connect);
}

static void on_proxy_closed(uv_handle_t *h)
{
    (void)h;
    g_proxy.n_open--;
}

static bool proxy_closed(struct fixture *f)
{
    (void)f;
    return g_proxy.n_open == 0;
}

static bool link_down(struct fixture *f)
{
    return !raft_uv_transport_connected(f->nodes[0].t, 2);
}

/* A flipped byte in a TLS record closes that connection only: the
 * receiver logs why, its other connections carry on, and the dialler
 * re-dials and gets through again. */
static void test_corrupt_record(void **state)
{
    struct fixture *f = *state;
    struct sockaddr_in sin;

    memset(&g_proxy, 0, sizeof g_proxy);
    g_proxy.target = f->nodes[1].port;
    g_proxy.port = reserve_port();
    uv_tcp_init(&f->loop, &g_proxy.listener);
    g_proxy.listener.data = &g_proxy;
    g_proxy.n_open = 1;
    uv_ip4_addr("127.0.0.1", g_proxy.port, &sin);
    assert_int_equal(
        uv_tcp_bind(&g_proxy.listener, (const struct sockaddr *)&sin, 0), 0);
    assert_int_equal(
        uv_listen((uv_stream_t *)&g_proxy.listener, 16, on_proxy_conn), 0);
    for (unsigned i = 0; i < 3; i++) {
        f->nodes[i].tls = new_tls("good", "ca");
    }
    f->nodes[0].dial_port[2] = g_proxy.port; /* 1 -> 2 through the proxy */
    start_cluster(f, 3);
    exchange(f, 10, 1000);

    g_proxy.flip = true;
    assert_int_equal(send_forward(&f->nodes[0], 2, 500), 0);
    WAIT_FOR(f, link_down);
    assert_non_null(strstr(f->nodes[1].warns, "TLS failed"));
    assert_non_null(
        strstr(f->nodes[1].warns, "decryption failed or bad record mac"));
    /* Node 2 still takes node 3's frames... */
    g_want[1] = f->nodes[1].n_got + 1;
    g_want[0] = g_want[2] = 0;
    assert_int_equal(send_forward(&f->nodes[2], 2, 100), 0);
    WAIT_FOR(f, got_wanted);
    /* ...and node 1 gets through again once it re-dialled. */
    wait_connected(f, 1, 2);
    exchange(f, 10, 1000);

    for (unsigned i = 0; i < 3; i++) {
        stop_node(&f->nodes[i]);
    }
    uv_close((uv_handle_t *)&g_proxy.listener, on_proxy_closed);
    WAIT_FOR(f, proxy_closed);
}

/* Bad files are refused at start, naming the key, the file and why. */
static void test_start_errors(void **state)
{
    static const struct {
        const char *cert, *key, *ca, *secret; /* files, NULL: not given */
        const char *want;                     /* in the message */
    } cases[] = {
        {"expired.pem", "expired.key", "ca.pem", NULL,
         "tls_cert: %s/expired.pem: expired on 20"},
        {"future.pem", "future.key", "ca.pem", NULL,
         "tls_cert: %s/future.pem: not valid before 20"},
        {"good.pem", "good2.key", "ca.pem", NULL,
         "tls_key: %s/good2.key: does not match tls_cert %s/good.pem"},
        {"good.pem", "good.key", "nope.pem", NULL,
         "tls_ca: %s/nope.pem: No such file or directory"},
        {"good.pem", "good.key", "junk.pem", NULL,
         "tls_ca: %s/junk.pem: no CA certificate read"},
        {"junk.pem", "good.key", "ca.pem", NULL,
         "tls_cert: %s/junk.pem: no PEM certificate read"},
        {"good.pem", "junk.pem", "ca.pem", NULL,
         "tls_key: %s/junk.pem: no PEM private key read"},
        {NULL, NULL, NULL, "short",
         "secret_file: %s/short: 12 bytes, want at least 32, e.g. "
         "`openssl rand -hex 32 > "},
        {NULL, NULL, NULL, "open",
         "secret_file: %s/open: mode 0644, want 0600 or stricter"},
        {"untrusted.pem", "untrusted.key", "ca.pem", NULL,
         "tls_cert: %s/untrusted.pem: not signed by tls_ca %s/ca.pem ("},
        {"ca.pem", "ca.key", "ca.pem", NULL,
         "tls_cert: %s/ca.pem: a CA certificate (basicConstraints "
         "CA:TRUE), not this node's own"},
        {"good.pem", "good.key", "ca.pem", "secret",
         "give tls_cert, tls_key and tls_ca, or secret_file"},
        {"good.pem", NULL, "ca.pem", NULL,
         "give tls_cert, tls_key and tls_ca, or secret_file"},
    };
    char want[512];

    (void)state;
    write_file("junk.pem", "not a certificate\n", 0644);
    write_file("short", "0123456789a\n", 0600);
    write_file("open", "0123456789abcdef0123456789abcdef\n", 0644);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *err = tls_error(cases[i].cert, cases[i].key, cases[i].ca,
                                    cases[i].secret);
        snprintf(want, sizeof want, cases[i].want, g_dir, g_dir);
        if (strstr(err, want) == NULL) {
            fail_msg("case %zu: '%s' lacks '%s'", i, err, want);
        }
    }
}

/* raft_uv_tls_names_host: whether this node's certificate names a host
 * (the WARN at start when it does not name the advertised one). */
static void test_names_host(void **state)
{
    struct raft_uv_tls *tls = new_tls("good2", "ca");
    struct raft_uv_tls *psk = new_psk("secret");
    char names[256] = "";

    (void)state;
    assert_true(raft_uv_tls_names_host(tls, "127.0.0.1", names, sizeof names));
    assert_true(raft_uv_tls_names_host(tls, "node", names, sizeof names));
    assert_false(raft_uv_tls_names_host(tls, "db3", names, sizeof names));
    assert_string_equal(names, "IP:127.0.0.1, DNS:node");
    assert_false(raft_uv_tls_names_host(tls, "127.0.0.2", names, sizeof names));
    assert_true(raft_uv_tls_names_host(psk, "db3", names, sizeof names));
    raft_uv_tls_free(tls);
    raft_uv_tls_free(psk);
}

/* raft_uv_tls_reload takes renewed files (new connections use them), and
 * keeps the context in use when they are bad; raft_uv_tls_check reloads
 * only once the files changed. */
static void test_reload(void **state)
{
    struct fixture *f = *state;
    char before[32], after[32], msg[1024];
    struct raft_uv_tls *tls;
    char cmd[600];

    snprintf(cmd, sizeof cmd,
             "cp %s/good.pem %s/n.pem && cp %s/good.key "
             "%s/n.key",
             g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    tls = new_tls("n", "ca");
    f->nodes[0].tls = tls;
    f->nodes[1].tls = new_tls("good", "ca");
    raft_uv_tls_expires(tls, before, sizeof before);
    assert_int_equal(strlen(before), 20);
    assert_int_equal(raft_uv_tls_check(tls, msg, sizeof msg), 0);
    assert_string_equal(msg, "");

    /* Renewed (good2 is valid ten days longer). */
    snprintf(cmd, sizeof cmd,
             "cp %s/good2.pem %s/n.pem && cp %s/good2.key "
             "%s/n.key",
             g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(raft_uv_tls_check(tls, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "loaded tls_cert "));
    raft_uv_tls_expires(tls, after, sizeof after);
    assert_string_not_equal(before, after);
    assert_int_equal(raft_uv_tls_check(tls, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    start_cluster(f, 2);
    exchange(f, 5, 100);

    /* A bad file keeps what is in use. */
    write_file("n.pem", "garbage\n", 0644);
    assert_int_equal(raft_uv_tls_reload(tls, msg, sizeof msg), RAFT_INVALID);
    assert_non_null(strstr(msg, "tls_cert: "));
    assert_non_null(strstr(msg, "n.pem: no PEM certificate read"));
    raft_uv_tls_expires(tls, before, sizeof before);
    assert_string_equal(before, after);
    stop_node(&f->nodes[0]);
    WAIT_FOR(f, all_closed);
    f->nodes[0].n_got = 0;
    start_node(f, 1, 2);
    wait_connected(f, 2, 2);
    exchange(f, 5, 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_certificates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_ca, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostname_identity, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_plain_against_tls, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wrong_psk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_host, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
