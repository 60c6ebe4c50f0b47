/* The content of the handshake (uv.h): the acceptor's checks of a
 * handshake and its answer, the dialler's reading of that answer, and the
 * cluster id both compare.
 *
 * Happy path: the acceptor checks the handshake as its bytes arrive
 * (versions, then the fixed part, then build id and address), records the
 * sender's build and cluster id, agrees on the highest wire version both
 * speak and prepares an acceptance (uv_send.c writes it); the dialler
 * reads the acceptance, takes the same version and starts sending frames.
 * Failure modes: a handshake of another cluster, server id, wire range or
 * handshake version, a malformed one, or under TLS one from a client whose
 * certificate does not name its sender (uv_tls_stream.c), is refused: one
 * WARN line here (the same refusal again only at DEBUG), and a refusal
 * naming the cause goes back before the connection closes, which the
 * dialler logs once per peer until the refusal changes and then retries
 * with its backoff. An
 * answer that is malformed, from another server than dialled, or not
 * followed by silence closes the outgoing connection. */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "byte.h"
#include "message.h"
#include "uv_internal.h"

void raft_uv_cluster_id_hex(const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                            char out[RAFT_UV_CLUSTER_ID_HEX])
{
    static const char digits[] = "0123456789abcdef";

    for (unsigned i = 0; i < RAFT_UV_CLUSTER_ID_LEN; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[2 * RAFT_UV_CLUSTER_ID_LEN] = '\0';
}

bool raft_uv_cluster_id_is_zero(const uint8_t id[RAFT_UV_CLUSTER_ID_LEN])
{
    for (unsigned i = 0; i < RAFT_UV_CLUSTER_ID_LEN; i++) {
        if (id[i] != 0) {
            return false;
        }
    }
    return true;
}

/* hex_or_none writes @id in hex into @out, "none" for all zero. */
static const char *hex_or_none(const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                               char out[RAFT_UV_CLUSTER_ID_HEX])
{
    if (raft_uv_cluster_id_is_zero(id)) {
        snprintf(out, RAFT_UV_CLUSTER_ID_HEX, "none");
    } else {
        raft_uv_cluster_id_hex(id, out);
    }
    return out;
}

void raft_uv_transport_set_cluster_id(struct raft_uv_transport *t,
                                      const uint8_t id[RAFT_UV_CLUSTER_ID_LEN])
{
    memcpy(t->cluster_id, id, RAFT_UV_CLUSTER_ID_LEN);
}

bool raft_uv_transport_peer_cluster_id(const struct raft_uv_transport *t,
                                       raft_id id,
                                       uint8_t out[RAFT_UV_CLUSTER_ID_LEN])
{
    const struct raft_uv_out *o = raft_uv_tcp_find(t, id);

    if (o == NULL || !o->build_known) {
        return false;
    }
    memcpy(out, o->cluster_id, RAFT_UV_CLUSTER_ID_LEN);
    return true;
}

/* ---- The acceptor -------------------------------------------------------- */

size_t raft_uv_handshake_answer_encode(uint8_t *a, unsigned verdict,
                                       const uint8_t *cluster_id, raft_id id,
                                       const char *reason)
{
    size_t len = strlen(reason);

    if (len > RAFT__UV_ANSWER_MAX - RAFT__UV_ANSWER_FIXED) {
        len = RAFT__UV_ANSWER_MAX - RAFT__UV_ANSWER_FIXED;
    }
    memcpy(a, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN);
    a[RAFT__UV_MAGIC_LEN] = RAFT__UV_HANDSHAKE_VERSION;
    a[RAFT__UV_MAGIC_LEN + 1] = (uint8_t)verdict;
    a[RAFT__UV_MAGIC_LEN + 2] = RAFT_WIRE_VERSION_MIN;
    a[RAFT__UV_MAGIC_LEN + 3] = RAFT_WIRE_VERSION;
    memcpy(a + RAFT__UV_MAGIC_LEN + 4, cluster_id, RAFT_UV_CLUSTER_ID_LEN);
    raft_byte_store_u64(a + RAFT__UV_MAGIC_LEN + 4 + RAFT_UV_CLUSTER_ID_LEN,
                        id);
    a[RAFT__UV_ANSWER_FIXED - 1] = (uint8_t)len;
    memcpy(a + RAFT__UV_ANSWER_FIXED, reason, len);
    return RAFT__UV_ANSWER_FIXED + len;
}

/* encode_answer writes the answer @verdict of this server, with @reason,
 * into @in->answer. */
static void encode_answer(struct raft_uv_in *in, unsigned verdict,
                          const char *reason)
{
    in->answer_len = raft_uv_handshake_answer_encode(
        in->answer, verdict, in->t->cluster_id, in->t->self, reason);
}

/* log_refusal logs @line (a refusal, without the connection's name) for
 * @in at WARN when it is not among the last RAFT__UV_REFUSALS logged so,
 * else at DEBUG: a refused server retries every few seconds. */
static void log_refusal(struct raft_uv_in *in, const char *line)
{
    struct raft_uv_transport *t = in->t;
    char *slot;

    for (unsigned i = 0; i < RAFT__UV_REFUSALS && i < t->n_refusals; i++) {
        if (strcmp(t->refusals[i], line) == 0) {
            raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: %s (again)", in->name,
                            line);
            return;
        }
    }
    slot = t->refusals[t->n_refusals++ % RAFT__UV_REFUSALS];
    snprintf(slot, RAFT__UV_REFUSAL_LEN, "%s", line);
    raft_uv_tcp_log(t, RAFT_LOG_WARN, "%s: %s", in->name, line);
}

int raft_uv_handshake_refuse(struct raft_uv_in *in, unsigned verdict,
                             const char *there, const char *fmt, ...)
{
    char line[RAFT__UV_REFUSAL_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log_refusal(in, line);
    encode_answer(in, verdict, there != NULL ? there : line);
    in->refused = true;
    return -1;
}

/* address_at returns the offset of the address length byte of @in's
 * handshake (after the build id). */
static size_t address_at(const struct raft_uv_in *in)
{
    return RAFT__UV_HANDSHAKE_FIXED + in->hs[RAFT__UV_HANDSHAKE_FIXED - 1];
}

size_t raft_uv_handshake_need(const struct raft_uv_in *in)
{
    if (in->hs_got < RAFT__UV_HANDSHAKE_VERSIONS) {
        return RAFT__UV_HANDSHAKE_VERSIONS;
    }
    if (in->hs_got < RAFT__UV_HANDSHAKE_FIXED) {
        return RAFT__UV_HANDSHAKE_FIXED;
    }
    if (in->hs_got < address_at(in) + 1) {
        return address_at(in) + 1;
    }
    return address_at(in) + 1 + in->hs[address_at(in)];
}

/* check_versions validates the magic and the handshake version of @in's
 * handshake (its first RAFT__UV_HANDSHAKE_VERSIONS bytes): the rest of the
 * layout depends on them. */
static int check_versions(struct raft_uv_in *in)
{
    unsigned hv = in->hs[RAFT__UV_MAGIC_LEN];
    char there[96];

    if (memcmp(in->hs, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) != 0) {
        /* Not raftsql: no answer. */
        raft_uv_tcp_log(in->t, RAFT_LOG_WARN,
                        "%s: bad handshake magic: closing", in->name);
        return -1;
    }
    if (hv != RAFT__UV_HANDSHAKE_VERSION) {
        snprintf(there, sizeof there,
                 "it speaks handshake version %u, not %u (it runs %s "
                 "raftsql)",
                 (unsigned)RAFT__UV_HANDSHAKE_VERSION, hv,
                 hv < RAFT__UV_HANDSHAKE_VERSION ? "a newer" : "an older");
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_HANDSHAKE, there,
            "handshake version %u, want %u: closing (the peer "
            "runs %s raftsql)",
            hv, (unsigned)RAFT__UV_HANDSHAKE_VERSION,
            hv < RAFT__UV_HANDSHAKE_VERSION ? "an older" : "a newer");
    }
    return 0;
}

/* check_fixed validates the fixed part of @in's handshake: the wire
 * versions, the cluster id, the sender id and the build id's length. */
static int check_fixed(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    const uint8_t *hs = in->hs;
    unsigned lo = hs[RAFT__UV_MAGIC_LEN + 1], hi = hs[RAFT__UV_MAGIC_LEN + 2];
    const uint8_t *cid = hs + RAFT__UV_HANDSHAKE_VERSIONS;
    raft_id id = raft_byte_load_u64(hs + RAFT__UV_HANDSHAKE_ID);
    size_t len = hs[RAFT__UV_HANDSHAKE_FIXED - 1];
    char there[RAFT__UV_REFUSAL_LEN], theirs[RAFT_UV_CLUSTER_ID_HEX],
        ours[RAFT_UV_CLUSTER_ID_HEX];

    if (lo == 0 || lo > hi) {
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_HANDSHAKE, NULL,
            "handshake from server %llu with wire versions %u to "
            "%u: malformed: closing",
            (unsigned long long)id, lo, hi);
    }
    if (hi < RAFT_WIRE_VERSION_MIN || lo > RAFT_WIRE_VERSION) {
        snprintf(there, sizeof there,
                 "it speaks wire versions %u to %u, we speak %u to %u: no "
                 "version in common",
                 (unsigned)RAFT_WIRE_VERSION_MIN, (unsigned)RAFT_WIRE_VERSION,
                 lo, hi);
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_WIRE, there,
            "refused server %llu: it speaks wire versions %u to "
            "%u, this server %u to %u: no version in common "
            "(upgrade one release at a time)",
            (unsigned long long)id, lo, hi, (unsigned)RAFT_WIRE_VERSION_MIN,
            (unsigned)RAFT_WIRE_VERSION);
    }
    if (!raft_uv_cluster_id_is_zero(cid) &&
        !raft_uv_cluster_id_is_zero(t->cluster_id) &&
        memcmp(cid, t->cluster_id, RAFT_UV_CLUSTER_ID_LEN) != 0) {
        raft_uv_cluster_id_hex(cid, theirs);
        raft_uv_cluster_id_hex(t->cluster_id, ours);
        snprintf(there, sizeof there, "cluster id %s is not its cluster %s",
                 theirs, ours);
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_CLUSTER, there,
            "refused server %llu: its cluster id %s is not this "
            "cluster's %s (a server of another cluster)",
            (unsigned long long)id, theirs, ours);
    }
    if (id == 0 || id == t->self) {
        snprintf(there, sizeof there, "server id %llu is %s",
                 (unsigned long long)id, id == 0 ? "no server's" : "its own");
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_ID, there,
            "handshake from server id %llu (%s): closing",
            (unsigned long long)id,
            id == 0 ? "no server" : "this server's own");
    }
    if (len > RAFT_UV_BUILD_ID_MAX) {
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_HANDSHAKE, NULL,
            "handshake build id of %zu bytes, at most %d: closing", len,
            RAFT_UV_BUILD_ID_MAX);
    }
    return 0; /* the address length follows */
}

/* printable checks that the @len bytes at @b, the handshake's @what, are
 * printable ASCII, refusing the handshake at the first that is not. */
static bool printable(struct raft_uv_in *in, const char *what, const uint8_t *b,
                      size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] < 0x20 || b[i] > 0x7e) {
            raft_uv_handshake_refuse(
                in, RAFT__UV_REFUSED_HANDSHAKE, NULL,
                "handshake %s has byte 0x%02x at %zu, not printable "
                "ASCII: closing",
                what, (unsigned)b[i], i);
            return false;
        }
    }
    return true;
}

/* note_peer keeps the build and cluster id of @in's complete handshake as
 * its peer's (@out, NULL for none), and logs a build that differs from
 * ours. */
static void note_peer(struct raft_uv_in *in, struct raft_uv_out *out)
{
    struct raft_uv_transport *t = in->t;
    size_t len = in->hs[RAFT__UV_HANDSHAKE_FIXED - 1];
    const uint8_t *b = in->hs + RAFT__UV_HANDSHAKE_FIXED;

    if (out == NULL) {
        return;
    }
    memcpy(out->build_id, b, len);
    out->build_id[len] = '\0';
    memcpy(out->cluster_id, in->hs + RAFT__UV_HANDSHAKE_VERSIONS,
           RAFT_UV_CLUSTER_ID_LEN);
    out->build_known = true;
    if (strcmp(out->build_id, t->build_id) != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: its build differs from this server's: build id "
                        "'%s' there, '%s' here (accepted: a rolling upgrade "
                        "passes through this)",
                        in->name, out->build_id, t->build_id);
    }
}

/* take_handshake takes @in's complete, valid handshake: under TLS the
 * client's certificate must name its sender (else it is refused), which
 * becomes the connection's peer (dialled back when it is none yet), and
 * the acceptance is prepared. */
static int take_handshake(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    const uint8_t *cid = in->hs + RAFT__UV_HANDSHAKE_VERSIONS;
    size_t alen = in->hs[address_at(in)];
    unsigned hi = in->hs[RAFT__UV_MAGIC_LEN + 2];
    char address[RAFT__UV_ADDRESS_MAX + 1];
    char addr[sizeof in->name];
    struct raft_uv_out *out;
    bool was_peer;
    raft_id id;

    memcpy(address, in->hs + address_at(in) + 1, alen);
    address[alen] = '\0';
    id = raft_byte_load_u64(in->hs + RAFT__UV_HANDSHAKE_ID);
    out = raft_uv_tcp_find(t, id);
    was_peer = out != NULL;
    if (raft_uv_tls_stream_identity(in, id, out, address) != 0) {
        return -1;
    }
    /* From now on, logs name the peer as well as the address. */
    memcpy(addr, in->name, sizeof addr);
    snprintf(in->name, sizeof in->name, "peer %llu (%.60s)",
             (unsigned long long)id, addr);
    if (out == NULL && address[0] != '\0') {
        out = raft_uv_tcp_learn(t, id, address);
    }
    note_peer(in, out);
    in->peer = id;
    /* Invariant: the ranges meet (check_fixed), so this is in both. */
    in->wire_version = hi < RAFT_WIRE_VERSION ? hi : RAFT_WIRE_VERSION;
    if (!was_peer && raft_uv_cluster_id_is_zero(cid) &&
        !raft_uv_cluster_id_is_zero(t->cluster_id)) {
        raft_uv_tcp_log(t, RAFT_LOG_INFO,
                        "%s: has no cluster id yet: accepted (a server that "
                        "joins)",
                        in->name);
    }
    raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: handshake ok (wire version %u)",
                    in->name, in->wire_version);
    encode_answer(in, RAFT__UV_ACCEPTED, "");
    raft_uv_accept_verified(in);
    return 1;
}

int raft_uv_handshake_check(struct raft_uv_in *in)
{
    size_t at;

    if (in->hs_got == RAFT__UV_HANDSHAKE_VERSIONS) {
        return check_versions(in);
    }
    if (in->hs_got == RAFT__UV_HANDSHAKE_FIXED) {
        return check_fixed(in);
    }
    at = address_at(in);
    if (in->hs_got == at + 1) {
        if (!printable(in, "build id", in->hs + RAFT__UV_HANDSHAKE_FIXED,
                       at - RAFT__UV_HANDSHAKE_FIXED)) {
            return -1;
        }
        if (in->hs[at] > 0) {
            return 0;
        }
    }
    if (!printable(in, "listen address", in->hs + at + 1, in->hs[at])) {
        return -1;
    }
    return take_handshake(in);
}

/* ---- The dialler --------------------------------------------------------- */

size_t raft_uv_handshake_answer_need(const uint8_t *a, size_t got)
{
    if (got < RAFT__UV_ANSWER_FIXED) {
        return RAFT__UV_ANSWER_FIXED;
    }
    return RAFT__UV_ANSWER_FIXED + a[RAFT__UV_ANSWER_FIXED - 1];
}

bool raft_uv_handshake_answer_decode(const uint8_t *a, size_t len,
                                     struct raft_uv_answer *out, char *errmsg,
                                     size_t errmsg_len)
{
    size_t n_reason;

    if (len < RAFT__UV_ANSWER_FIXED ||
        len != raft_uv_handshake_answer_need(a, len)) {
        snprintf(errmsg, errmsg_len, "answer of %zu bytes", len);
        return false;
    }
    if (memcmp(a, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) != 0 ||
        a[RAFT__UV_MAGIC_LEN] != RAFT__UV_HANDSHAKE_VERSION) {
        snprintf(errmsg, errmsg_len,
                 "the answer is not that of a raftsql of handshake version "
                 "%d",
                 RAFT__UV_HANDSHAKE_VERSION);
        return false;
    }
    out->verdict = a[RAFT__UV_MAGIC_LEN + 1];
    out->wire_min = a[RAFT__UV_MAGIC_LEN + 2];
    out->wire_max = a[RAFT__UV_MAGIC_LEN + 3];
    memcpy(out->cluster_id, a + RAFT__UV_MAGIC_LEN + 4, RAFT_UV_CLUSTER_ID_LEN);
    out->id =
        raft_byte_load_u64(a + RAFT__UV_MAGIC_LEN + 4 + RAFT_UV_CLUSTER_ID_LEN);
    if (out->verdict > RAFT__UV_REFUSED_HANDSHAKE || out->wire_min == 0 ||
        out->wire_min > out->wire_max) {
        snprintf(errmsg, errmsg_len,
                 "the answer has verdict %u, wire versions %u to %u",
                 out->verdict, out->wire_min, out->wire_max);
        return false;
    }
    n_reason = len - RAFT__UV_ANSWER_FIXED;
    for (size_t i = 0; i < n_reason; i++) {
        uint8_t c = a[RAFT__UV_ANSWER_FIXED + i];
        if (c < 0x20 || c > 0x7e) {
            snprintf(errmsg, errmsg_len,
                     "the answer's reason has byte 0x%02x at %zu", (unsigned)c,
                     i);
            return false;
        }
    }
    memcpy(out->reason, a + RAFT__UV_ANSWER_FIXED, n_reason);
    out->reason[n_reason] = '\0';
    return true;
}

/* note_refusal logs @line, why @out's handshake got no acceptance, at
 * WARN when it differs from the last one so logged for @out, else at
 * DEBUG (the dialler retries with its backoff), and fails the
 * connection. */
static void note_refusal(struct raft_uv_out *out, const char *line)
{
    bool again = strcmp(out->refusal, line) == 0;

    raft_uv_tcp_log(out->t, again ? RAFT_LOG_DEBUG : RAFT_LOG_WARN, "%s: %s%s",
                    out->name, line, again ? " (again)" : "");
    snprintf(out->refusal, sizeof out->refusal, "%s", line);
    raft_uv_tcp_out_fail(out);
}

/* take_answer acts on @out's complete answer @a. */
static void take_answer(struct raft_uv_out *out, const struct raft_uv_answer *a)
{
    char line[RAFT__UV_REFUSAL_LEN];
    char hex[RAFT_UV_CLUSTER_ID_HEX];
    char how[128] = "";

    if (a->verdict != RAFT__UV_ACCEPTED) {
        snprintf(line, sizeof line, "refused us: %s", a->reason);
        note_refusal(out, line);
        return;
    }
    if (out->id != RAFT_UV_PROBE_ID && a->id != out->id) {
        snprintf(line, sizeof line,
                 "the server at this address is server %llu: closing (a "
                 "wrong address in the configuration or dial=)",
                 (unsigned long long)a->id);
        note_refusal(out, line);
        return;
    }
    if (a->wire_max < RAFT_WIRE_VERSION_MIN ||
        a->wire_min > RAFT_WIRE_VERSION) {
        snprintf(line, sizeof line,
                 "accepted us but speaks wire versions %u to %u, we %u to "
                 "%u: closing",
                 a->wire_min, a->wire_max, (unsigned)RAFT_WIRE_VERSION_MIN,
                 (unsigned)RAFT_WIRE_VERSION);
        note_refusal(out, line);
        return;
    }
    uv_timer_stop(&out->timer);
    out->wire_version =
        a->wire_max < RAFT_WIRE_VERSION ? a->wire_max : RAFT_WIRE_VERSION;
    out->state = RAFT__UV_CONNECTED;
    out->answered = a->id;
    out->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
    out->refusal[0] = '\0';
    if (out->conn->tls != NULL) {
        raft_uv_tls_session_describe(out->conn->tls, how, sizeof how - 2);
        strcat(how, "; ");
    }
    raft_uv_tcp_log(out->t, RAFT_LOG_INFO,
                    "%s: connected (%swire version %u, its cluster id %s)",
                    out->name, how, out->wire_version,
                    hex_or_none(a->cluster_id, hex));
}

void raft_uv_handshake_on_answer(struct raft_uv_out *out, const uint8_t *p,
                                 size_t n)
{
    struct raft_uv_conn *conn = out->conn;
    struct raft_uv_answer a;
    char why[128];

    if (out->state != RAFT__UV_HANDSHAKING) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN,
                        "%s: unexpected bytes on outgoing connection: "
                        "closing",
                        out->name);
        raft_uv_tcp_out_fail(out);
        return;
    }
    while (n > 0 && out->conn == conn && out->state == RAFT__UV_HANDSHAKING) {
        size_t need =
            raft_uv_handshake_answer_need(conn->answer, conn->answer_got);
        size_t k = need - conn->answer_got;

        k = k < n ? k : n;
        memcpy(conn->answer + conn->answer_got, p, k);
        conn->answer_got += k;
        p += k;
        n -= k;
        if (conn->answer_got <
            raft_uv_handshake_answer_need(conn->answer, conn->answer_got)) {
            continue; /* the reason follows */
        }
        if (!raft_uv_handshake_answer_decode(conn->answer, conn->answer_got, &a,
                                             why, sizeof why)) {
            char line[200];
            snprintf(line, sizeof line,
                     "bad answer to our handshake: %s: closing", why);
            note_refusal(out, line);
            return;
        }
        take_answer(out, &a);
    }
    if (n > 0 && out->conn == conn) {
        raft_uv_handshake_on_answer(out, p, n); /* stray bytes: closes */
    }
}
