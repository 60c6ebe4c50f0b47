/* gen-corpus: writes the seed corpus of the fuzz targets (tests/fuzz/
 * corpus/<target>/) from the encoders, one small file per sample.
 * Usage: build/fuzz/gen-corpus DIR   (make fuzz-corpus: DIR = the tree's) */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ext/runtime/change_codec.h"
#include "fuzz.h"
#include "lmdb_log/format.h"
#include "raft/address.h"
#include "raft/byte.h"
#include "raft/configuration.h"
#include "raft/message.h"
#include "raft/uv_internal.h"
#include "sql/sql.h"

/* Bytes a stream or file sample may hold. */
#define MAX_SAMPLE 8192

static const char *root;

static void die(const char *what)
{
    fprintf(stderr, "gen-corpus: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void make_dir(const char *target)
{
    char path[512];

    snprintf(path, sizeof path, "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        die(path);
    }
}

static void write_sample(const char *target, const char *name, const void *p,
                         size_t len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        die(path);
    }
}

/* ---- Requests ----------------------------------------------------------- */

/* A request payload, stamped; in a malloc'd buffer of *@out_len bytes. */
static uint8_t *request(const char *sql, const struct sql_param *params,
                        unsigned n_params, int64_t time_ms, size_t *out_len)
{
    static const uint64_t id[2] = {2, 41};
    struct sql_stamp st = {.time_ms = time_ms,
                           .seed = 0x1234567890abcdefull,
                           .max_steps = 100000000};
    size_t len;
    uint8_t *p;

    if (sql_request_size(sql, strlen(sql), params, n_params, UINT64_MAX, &len,
                         NULL, 0) != 0 ||
        (p = malloc(len)) == NULL ||
        sql_request_encode(id, sql, strlen(sql), params, n_params, p, len) !=
            0) {
        fprintf(stderr, "gen-corpus: cannot encode %s\n", sql);
        exit(1);
    }
    if (time_ms != 0) {
        sql_request_stamp(p, len, &st, p);
    }
    *out_len = len;
    return p;
}

/* The version 1 form of version 2 payload @p (sql/request.c: no max_steps
 * at offset 40, version byte 1), in place; returns its length. */
static size_t to_version_1(uint8_t *p, size_t len)
{
    p[2] = 1;
    memmove(p + 40, p + 48, len - 48);
    return len - 8;
}

static struct sql_param params[6];

static void init_params(void)
{
    static const char text[] = "caf\xc3\xa9\0nul";
    static const uint8_t blob[] = {0, 1, 2, 0xff};

    params[0].value.type = SQL_INTEGER;
    params[0].value.integer = -9223372036854775807 - 1;
    params[1].name = ":name";
    params[1].value.type = SQL_TEXT;
    params[1].value.bytes.p = text;
    params[1].value.bytes.len = sizeof text - 1;
    params[2].name = "?5";
    params[2].value.type = SQL_FLOAT;
    params[2].value.real = -0.0;
    params[3].value.type = SQL_BLOB;
    params[3].value.bytes.p = blob;
    params[3].value.bytes.len = sizeof blob;
    params[4].name = "@empty";
    params[4].value.type = SQL_BLOB;
    params[5].name = "$n";
    params[5].value.type = SQL_NULL;
}

/* both_versions writes the stamped request of @sql as sample @name, and
 * its version 1 form as @name_v1. */
static void both_versions(const char *name, const char *sql,
                          const struct sql_param *prm, unsigned n_params)
{
    char v1[64];
    uint8_t *p;
    size_t len;

    p = request(sql, prm, n_params, 1764000000000, &len);
    write_sample("request", name, p, len);
    len = to_version_1(p, len);
    snprintf(v1, sizeof v1, "%s_v1", name);
    write_sample("request", v1, p, len);
    free(p);
}

/* gen_request_v3 writes version 3 samples: a client id with NUL bytes
 * and rows wanted, with parameters; rows only; an id of 256 bytes. */
static void gen_request_v3(void)
{
    static const uint64_t id[2] = {2, 42};
    static const char cid[] = {'o', 'r', 'd', 0, 0xff, '4', '2'};
    static char long_id[SQL_CLIENT_ID_MAX];
    struct sql_stamp st = {.time_ms = 1764000000000,
                           .seed = 7,
                           .max_steps = 100000000,
                           .id_window = 100000,
                           .id_window_ms = 86400000,
                           .max_result_bytes = 16u << 20};
    struct {
        const char *name, *sql;
        struct sql_request_opts o;
        unsigned n_params;
    } v[] = {
        {"v3_id_rows",
         "INSERT INTO t VALUES (?, :name, ?5, ?, @empty, $n) RETURNING *",
         {cid, sizeof cid, SQL_REQUEST_WANT_ROWS},
         6},
        {"v3_rows",
         "DELETE FROM t RETURNING a",
         {NULL, 0, SQL_REQUEST_WANT_ROWS},
         0},
        {"v3_long_id",
         "INSERT INTO t VALUES (1)",
         {long_id, sizeof long_id, 0},
         0},
    };

    memset(long_id, 'k', sizeof long_id);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t len;
        uint8_t *p;

        if (sql_request_size_opts(v[i].sql, strlen(v[i].sql), params,
                                  v[i].n_params, &v[i].o, UINT64_MAX, &len,
                                  NULL, 0) != 0 ||
            (p = malloc(len)) == NULL ||
            sql_request_encode_opts(id, v[i].sql, strlen(v[i].sql), params,
                                    v[i].n_params, &v[i].o, p, len) != 0 ||
            sql_request_stamp(p, len, &st, p) != 0) {
            fprintf(stderr, "gen-corpus: cannot encode %s\n", v[i].name);
            exit(1);
        }
        write_sample("request", v[i].name, p, len);
        free(p);
    }
}

static void gen_request(void)
{
    uint8_t *p;
    size_t len;

    make_dir("request");
    p = request("INSERT INTO t VALUES (1)", NULL, 0, 0, &len);
    write_sample("request", "plain", p, len);
    free(p);
    both_versions("params",
                  "INSERT INTO t VALUES (?, :name, ?5, ?, @empty, $n)", params,
                  6);
    both_versions("two_statements",
                  "CREATE TABLE t(a); INSERT INTO t VALUES (random());", NULL,
                  0);
    gen_request_v3();
}

/* ---- Frames ------------------------------------------------------------- */

/* The samples: one frame or more of every type, from 2 to 1. */
#define N_FRAMES 23

struct frames {
    struct raft_frame f[N_FRAMES]; /* the frames */
    const char *name[N_FRAMES];    /* their file names */
    struct raft_entry entries[4];  /* of the AppendEntries */
    struct raft_buf *bufs[5];      /* payloads */
};

static struct raft_buf *buf_of(const void *p, size_t len)
{
    struct raft_buf *b = raft_buf_copy(p, len);

    if (b == NULL) {
        die("raft_buf_copy");
    }
    return b;
}

/* frame_of makes @f a zeroed frame of @type from 2 to 1. */
static void frame_of(struct raft_frame *f, uint8_t type)
{
    memset(f, 0, sizeof *f);
    f->type = type;
    f->from = 2;
    f->to = 1;
}

/* message_frame makes @f a zeroed core message of @type from 2 to 1. */
static void message_frame(struct raft_frame *f, uint8_t type)
{
    frame_of(f, type);
    f->message.type = type;
    f->message.from = 2;
    f->message.to = 1;
}

static void frames_init(struct frames *s)
{
    static const char chunk[] = "SQLite format 3\0 a chunk of a database";
    struct raft_frame *f = s->f;
    uint8_t *req;
    size_t req_len;
    unsigned i = 0;

    req = request("INSERT INTO t VALUES (?, :name, ?5, ?, @empty, $n)", params,
                  6, 1764000000000, &req_len);
    s->bufs[0] = buf_of(req, req_len);
    free(req);
    s->bufs[1] = buf_of("x", 1);
    s->bufs[2] = buf_of(chunk, sizeof chunk - 1);
    req = request("INSERT INTO t VALUES (1)", NULL, 0, 0, &req_len);
    s->bufs[3] = buf_of(req, req_len);
    free(req);

    message_frame(&f[i], RAFT_MSG_REQUEST_VOTE);
    f[i].message.request_vote.term = 7;
    f[i].message.request_vote.last_log_index = 120;
    f[i].message.request_vote.last_log_term = 6;
    f[i].message.request_vote.pre_vote = true;
    s->name[i++] = "request_vote";
    message_frame(&f[i], RAFT_MSG_REQUEST_VOTE_RESULT);
    f[i].message.request_vote_result.term = 7;
    f[i].message.request_vote_result.vote_granted = true;
    s->name[i++] = "request_vote_result";
    message_frame(&f[i], RAFT_MSG_APPEND_ENTRIES);
    f[i].message.append_entries.term = 7;
    f[i].message.append_entries.prev_log_index = 120;
    f[i].message.append_entries.prev_log_term = 6;
    f[i].message.append_entries.leader_commit = 119;
    f[i].message.append_entries.seq = 3;
    s->name[i++] = "heartbeat";
    s->entries[0].term = 7;
    s->entries[0].index = 121;
    s->entries[0].type = RAFT_ENTRY_NOOP;
    s->entries[1].term = 7;
    s->entries[1].index = 122;
    s->entries[1].type = RAFT_ENTRY_NORMAL;
    s->entries[1].data = s->bufs[0];
    s->entries[2].term = 7;
    s->entries[2].index = 123;
    s->entries[2].type = RAFT_ENTRY_NORMAL;
    s->entries[2].data = s->bufs[1];
    f[i] = f[i - 1];
    f[i].message.append_entries.seq = 4;
    f[i].message.append_entries.n_entries = 3;
    f[i].message.append_entries.entries = s->entries;
    s->name[i++] = "append_entries";
    message_frame(&f[i], RAFT_MSG_APPEND_ENTRIES_RESULT);
    f[i].message.append_entries_result.term = 7;
    f[i].message.append_entries_result.success = true;
    f[i].message.append_entries_result.last_log_index = 123;
    f[i].message.append_entries_result.seq = 4;
    s->name[i++] = "append_entries_result";
    f[i] = f[i - 1];
    f[i].message.append_entries_result.success = false;
    f[i].message.append_entries_result.reject_index = 120;
    f[i].message.append_entries_result.last_log_index = 100;
    f[i].message.append_entries_result.conflict_index = 90;
    s->name[i++] = "append_entries_reject";
    frame_of(&f[i], RAFT_FRAME_FORWARD);
    f[i].forward.request_id[0] = 2;
    f[i].forward.request_id[1] = 41;
    f[i].forward.data = s->bufs[3];
    s->name[i++] = "forward";
    f[i] = f[i - 1];
    f[i].type = RAFT_FRAME_FORWARD_RESULT;
    f[i].forward_result.status = RAFT_NOTLEADER;
    s->name[i++] = "forward_result";
    frame_of(&f[i], RAFT_FRAME_SNAPSHOT_CHUNK);
    f[i].snapshot_chunk.term = 7;
    f[i].snapshot_chunk.last_index = 100;
    f[i].snapshot_chunk.last_term = 6;
    f[i].snapshot_chunk.total = 3 * (sizeof chunk - 1);
    f[i].snapshot_chunk.offset = sizeof chunk - 1;
    f[i].snapshot_chunk.checksum = 0x0123456789abcdefull;
    f[i].snapshot_chunk.data = s->bufs[2];
    s->name[i++] = "snapshot_chunk";
    f[i] = f[i - 1];
    f[i].snapshot_chunk.offset = f[i].snapshot_chunk.total;
    f[i].snapshot_chunk.data = NULL;
    s->name[i++] = "snapshot_chunk_empty";
    frame_of(&f[i], RAFT_FRAME_SNAPSHOT_CHUNK_RESULT);
    f[i].snapshot_chunk_result.term = 7;
    f[i].snapshot_chunk_result.last_index = 100;
    f[i].snapshot_chunk_result.offset = 2 * (sizeof chunk - 1);
    s->name[i++] = "snapshot_chunk_result";
    f[i] = f[i - 1];
    f[i].snapshot_chunk_result.offset = 0;
    f[i].snapshot_chunk_result.status = RAFT_IOERR;
    s->name[i++] = "snapshot_chunk_refused";
    message_frame(&f[i], RAFT_MSG_TIMEOUT_NOW);
    f[i].message.timeout_now.term = 7;
    s->name[i++] = "timeout_now";
    f[i] = f[0];
    f[i].message.request_vote.term = 8;
    f[i].message.request_vote.pre_vote = false;
    f[i].message.request_vote.disrupt = true;
    s->name[i++] = "request_vote_transfer";
    {
        struct raft_configuration c;
        raft_configuration_init(&c);
        if (raft_configuration_add(&c, 1, RAFT_VOTER, "127.0.0.1:7001") ||
            raft_configuration_add(&c, 2, RAFT_VOTER, "127.0.0.1:7002") ||
            raft_configuration_add(&c, 4, RAFT_LEARNER, "10.0.0.4:7004") ||
            raft_configuration_encode_buf(&c, &s->bufs[4])) {
            die("raft_configuration_encode_buf");
        }
    }
    s->entries[3].term = 7;
    s->entries[3].index = 121;
    s->entries[3].type = RAFT_ENTRY_CONFIG;
    s->entries[3].data = s->bufs[4];
    f[i] = f[3];
    f[i].message.append_entries.n_entries = 1;
    f[i].message.append_entries.entries = &s->entries[3];
    s->name[i++] = "append_entries_config";
    frame_of(&f[i], RAFT_FRAME_CHECKSUM);
    f[i].checksum.index = 123;
    f[i].checksum.checksum = 0x9e3779b97f4a7c15ull;
    s->name[i++] = "checksum";
    frame_of(&f[i], RAFT_FRAME_REPAIR_REQUEST);
    f[i].repair_request.applied = 4242;
    s->name[i++] = "repair_request";
    frame_of(&f[i], RAFT_FRAME_READ_INDEX);
    f[i].read_index.tag = 0x8000000000000007ull;
    s->name[i++] = "read_index";
    frame_of(&f[i], RAFT_FRAME_READ_INDEX_RESULT);
    f[i].read_index_result.tag = 7;
    f[i].read_index_result.index = 4243;
    s->name[i++] = "read_index_result";
    frame_of(&f[i], RAFT_FRAME_READ_INDEX_RESULT);
    f[i].read_index_result.tag = 8;
    f[i].read_index_result.status = RAFT_TIMEOUT;
    s->name[i++] = "read_index_timeout";
    frame_of(&f[i], RAFT_FRAME_LEASE);
    f[i].lease.tag = 3;
    f[i].lease.op = RAFT_LEASE_ASK;
    f[i].lease.holder = 17;
    s->name[i++] = "lease_ask";
    frame_of(&f[i], RAFT_FRAME_LEASE);
    f[i].lease.tag = 4;
    f[i].lease.op = RAFT_LEASE_COMMIT;
    f[i].lease.id = (7ull << 32) | 1;
    f[i].lease.data = s->bufs[1];
    s->name[i++] = "lease_commit";
    frame_of(&f[i], RAFT_FRAME_LEASE_RESULT);
    f[i].lease_result.tag = 4;
    f[i].lease_result.op = RAFT_LEASE_COMMIT;
    f[i].lease_result.id = (7ull << 32) | 1;
    f[i].lease_result.index = 4244;
    s->name[i++] = "lease_result";
}

static void frames_close(struct frames *s)
{
    unsigned i;

    for (i = 0; i < sizeof s->bufs / sizeof s->bufs[0]; i++) {
        raft_buf_unref(s->bufs[i]);
    }
}

/* encode_frame appends the encoding of @f (length prefix included) at
 * @out + *@len, at most MAX_SAMPLE bytes in all. */
static void encode_frame(const struct raft_frame *f, uint8_t *out, size_t *len)
{
    size_t n = raft_frame_encoded_len(f);

    if (n == 0 || *len + n > MAX_SAMPLE ||
        raft_frame_encode(f, out + *len, n) != 0) {
        fprintf(stderr, "gen-corpus: cannot encode frame type %u\n",
                (unsigned)f->type);
        exit(1);
    }
    *len += n;
}

static void gen_frame(const struct frames *s)
{
    uint8_t out[MAX_SAMPLE];
    unsigned i;

    make_dir("frame");
    for (i = 0; i < N_FRAMES; i++) {
        size_t len = 0;
        encode_frame(&s->f[i], out, &len);
        /* The decoder takes the body, after the length prefix. */
        write_sample("frame", s->name[i], out + RAFT_FRAME_HEADER,
                     len - RAFT_FRAME_HEADER);
    }
}

/* The cluster id of fuzz_recv.c's receiver, and another. */
static const uint8_t fuzz_cluster[RAFT_UV_CLUSTER_ID_LEN] = FUZZ_CLUSTER_ID;
static const uint8_t other_cluster[RAFT_UV_CLUSTER_ID_LEN] = {1, 2, 3};

/* stream_of starts a receive sample: the cut byte, then the handshake of
 * @from of cluster @cid with build id @build. */
static size_t stream_of(uint8_t *out, uint8_t cut, raft_id from,
                        const uint8_t *cid, const char *build)
{
    out[0] = cut;
    return 1 + raft_uv_send_handshake_encode(from, cid, build, "127.0.0.1:7002",
                                             out + 1);
}

/* stream_build is stream_of with no cluster id. */
static size_t stream_build(uint8_t *out, uint8_t cut, raft_id from,
                           const char *build)
{
    static const uint8_t none[RAFT_UV_CLUSTER_ID_LEN];
    return stream_of(out, cut, from, none, build);
}

/* stream is stream_build with the fuzz target's own build id. */
static size_t stream(uint8_t *out, uint8_t cut, raft_id from)
{
    return stream_build(out, cut, from, "fuzz build");
}

static void gen_recv(const struct frames *s)
{
    uint8_t out[MAX_SAMPLE];
    struct raft_frame other;
    size_t len;
    unsigned i;

    make_dir("recv");
    len = stream(out, 0, 2);
    write_sample("recv", "handshake", out, len);
    write_sample("recv", "handshake_cut", out, len - 3);
    len = stream(out, 7, 2);
    for (i = 0; i < N_FRAMES; i++) {
        encode_frame(&s->f[i], out, &len);
    }
    write_sample("recv", "every_frame_cut7", out, len);
    out[0] = 0;
    write_sample("recv", "every_frame", out, len);
    /* A frame in progress at the end. */
    write_sample("recv", "frame_cut_short", out, len - 5);
    len = stream(out, 1, 2);
    encode_frame(&s->f[3], out, &len);
    write_sample("recv", "append_entries_bytewise", out, len);
    /* An unknown sender (accepted, dialled back when there is room);
     * refused: sender not the handshake's, bad length. */
    len = stream(out, 0, 9);
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "unknown_peer", out, len);
    len = stream(out, 3, 3);
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "wrong_sender", out, len);
    other = s->f[1];
    other.from = other.message.from = 3;
    len = stream(out, 3, 3);
    encode_frame(&other, out, &len);
    encode_frame(&s->f[1], out, &len);
    write_sample("recv", "peer3_then_wrong_sender", out, len);
    len = stream(out, 0, 2);
    raft_byte_store_u32(out + len, UINT32_MAX);
    len += 4;
    write_sample("recv", "length_too_big", out, len);
    /* Build ids: another build (accepted, logged), none, one that is
     * not printable (refused), and the 15 bytes of handshake version 1
     * (refused). */
    len = stream_build(out, 0, 2, "3.40.1 2022-12-28 other build");
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "other_build", out, len);
    len = stream_build(out, 2, 3, "");
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "no_build", out, len);
    len = stream_build(out, 0, 2, "bad\x01build");
    write_sample("recv", "build_not_printable", out, len);
    out[0] = 0;
    memcpy(out + 1, "RFTSQL\x01", 7);
    raft_byte_store_u64(out + 8, 2);
    write_sample("recv", "handshake_v1", out, 16);
    /* Handshake version 3 (no cluster id, one wire version): refused. */
    len = stream(out, 0, 2);
    out[1 + RAFT__UV_MAGIC_LEN] = 3;
    write_sample("recv", "handshake_v3", out, len - 16);
    /* The receiver's cluster id (accepted), another (refused), wire
     * versions it does not speak (refused), and a newer range that
     * includes its own (accepted: frames in its version). */
    len = stream_of(out, 0, 2, fuzz_cluster, "fuzz build");
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "same_cluster", out, len);
    len = stream_of(out, 0, 2, other_cluster, "fuzz build");
    write_sample("recv", "other_cluster", out, len);
    len = stream(out, 0, 2);
    out[1 + RAFT__UV_MAGIC_LEN + 1] = RAFT_WIRE_VERSION + 1;
    out[1 + RAFT__UV_MAGIC_LEN + 2] = RAFT_WIRE_VERSION + 1;
    write_sample("recv", "newer_wire_only", out, len);
    len = stream(out, 0, 2);
    out[1 + RAFT__UV_MAGIC_LEN + 2] = RAFT_WIRE_VERSION + 1;
    encode_frame(&s->f[0], out, &len);
    write_sample("recv", "newer_wire_too", out, len);
}

/* ---- Log records -------------------------------------------------------- */

static void gen_log_entry(const struct frames *s)
{
    uint8_t out[1 + LMDB_LOG_FORMAT_KEY_LEN + MAX_SAMPLE];
    const struct raft_entry *e;
    struct raft_entry big;
    char name[64];
    unsigned i;
    size_t len;

    make_dir("log_entry");
    for (i = 0; i < 3; i++) {
        e = &s->entries[i];
        len = format_entry_len(e->data != NULL ? e->data->len : 0);
        out[0] = 0;
        format_key_encode(e->index, out + 1);
        format_entry_encode(e, out + 1 + LMDB_LOG_FORMAT_KEY_LEN);
        snprintf(name, sizeof name, "entry_%u", i);
        write_sample("log_entry", name, out, 1 + LMDB_LOG_FORMAT_KEY_LEN + len);
        /* The same, checksum spoiled, for the fixing mode. */
        out[0] = 1;
        out[LMDB_LOG_FORMAT_KEY_LEN + len] ^= 0xff; /* last checksum byte */
        snprintf(name, sizeof name, "entry_%u_fix", i);
        write_sample("log_entry", name, out, 1 + LMDB_LOG_FORMAT_KEY_LEN + len);
    }
    big = s->entries[1];
    big.index = UINT64_MAX;
    big.term = UINT64_MAX - 1;
    big.type = 200; /* stored as given */
    len = format_entry_len(big.data->len);
    out[0] = 0;
    format_key_encode(big.index, out + 1);
    format_entry_encode(&big, out + 1 + LMDB_LOG_FORMAT_KEY_LEN);
    write_sample("log_entry", "entry_last_index", out,
                 1 + LMDB_LOG_FORMAT_KEY_LEN + len);
}

/* gen_configuration writes encoded configurations: empty, a bootstrap's
 * three voters, voters and learners with long and empty addresses, and
 * the same with a learner to promote (version 2). */
static void gen_configuration(void)
{
    struct raft_configuration c;
    struct raft_buf *b = NULL;
    char longaddr[RAFT_ADDRESS_MAX + 1];
    static const char *names[4] = {"empty", "three_voters", "mixed",
                                   "auto_promote"};
    unsigned i;

    make_dir("configuration");
    memset(longaddr, 'h', RAFT_ADDRESS_MAX);
    longaddr[RAFT_ADDRESS_MAX] = '\0';
    for (i = 0; i < 4; i++) {
        int rc = 0;
        raft_configuration_init(&c);
        if (i >= 1) {
            rc |= raft_configuration_add(&c, 1, RAFT_VOTER, "127.0.0.1:7001");
            rc |= raft_configuration_add(&c, 2, RAFT_VOTER, "127.0.0.1:7002");
            rc |= raft_configuration_add(&c, 3, RAFT_VOTER, "127.0.0.1:7003");
        }
        if (i >= 2) {
            rc |= raft_configuration_add(&c, 9, RAFT_LEARNER, longaddr);
            rc |= raft_configuration_add(&c, 12, RAFT_LEARNER, "");
        }
        if (i == 3) {
            c.servers[4].auto_promote = true;
        }
        if (rc != 0 || raft_configuration_encode_buf(&c, &b) != 0) {
            die("raft_configuration_encode_buf");
        }
        write_sample("configuration", names[i], b->data, b->len);
        raft_buf_unref(b);
    }
}

static void gen_log_meta(void)
{
    static const char *const names[] = {
        LMDB_LOG_FORMAT_META_TERM,          LMDB_LOG_FORMAT_META_VOTE,
        LMDB_LOG_FORMAT_META_FIRST_INDEX,   LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX,
        LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, LMDB_LOG_FORMAT_META_CLUSTER_ID_0,
        LMDB_LOG_FORMAT_META_CLUSTER_ID_1,
    };
    static const uint64_t values[] = {
        7, 2, 101, 100, 6, 0x0102030405060708u, 0x1112131415161718u};
    const unsigned n_names = sizeof names / sizeof names[0];
    uint8_t out[1 + LMDB_LOG_FORMAT_META_LEN];
    char name[64];
    unsigned i;

    make_dir("log_meta");
    /* Selector i picks names[i] (fuzz_log_meta.c), n_names the format
     * record. */
    for (i = 0; i < n_names; i++) {
        out[0] = (uint8_t)i;
        format_meta_encode(names[i], values[i], out + 1);
        write_sample("log_meta", names[i], out, sizeof out);
        out[0] |= 0x80;
        out[9] ^= 0xff;
        snprintf(name, sizeof name, "%s_fix", names[i]);
        write_sample("log_meta", name, out, sizeof out);
    }
    out[0] = (uint8_t)n_names;
    format_version_encode(LMDB_LOG_FORMAT_VERSION, out + 1);
    write_sample("log_meta", "format", out, 1 + LMDB_LOG_FORMAT_VERSION_LEN);
}

/* gen_change writes change requests (ext/runtime/change_codec.h), one of each
 * op. */
static void gen_change(void)
{
    static const struct {
        const char *name;
        uint8_t op;
        bool manual;
        raft_id id;
        const char *address;
    } reqs[] = {
        {"add", EXT_CHANGE_ADD, false, 4, "127.0.0.1:7004"},
        {"add_learner", EXT_CHANGE_ADD, true, 5, "127.0.0.1:7005"},
        {"remove", EXT_CHANGE_REMOVE, false, 3, ""},
        {"promote", EXT_CHANGE_PROMOTE, false, 4, ""},
        {"demote", EXT_CHANGE_DEMOTE, false, 2, ""},
        {"update", EXT_CHANGE_UPDATE, false, 2, "10.0.0.2:7001"},
        {"transfer_any", EXT_CHANGE_TRANSFER, false, 0, ""},
        {"join", EXT_CHANGE_JOIN, false, 6, "127.0.0.1:7006"},
    };
    make_dir("change");
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        struct ext_change_request q;
        struct raft_buf *b = NULL;
        memset(&q, 0, sizeof q);
        q.op = reqs[i].op;
        q.manual = reqs[i].manual;
        q.id = reqs[i].id;
        snprintf(q.address, sizeof q.address, "%s", reqs[i].address);
        if (change_codec_encode(&q, &b) != 0) {
            die("change_codec_encode");
        }
        write_sample("change", reqs[i].name, b->data, b->len);
        raft_buf_unref(b);
    }
}

/* gen_address writes addresses (raft/address.h) of every kind, and a few
 * near misses. */
static void gen_address(void)
{
    static const struct {
        const char *name;
        const char *text;
    } samples[] = {
        {"ipv4", "127.0.0.1:7001"},
        {"ipv4_any", "0.0.0.0:7001"},
        {"ipv6", "[::1]:7001"},
        {"ipv6_any", "[::]:7001"},
        {"ipv6_zone", "[fe80::1%eth0]:7001"},
        {"ipv6_mapped", "[::ffff:10.0.0.1]:7001"},
        {"name", "node-1.example.com:7001"},
        {"localhost", "localhost:7001"},
        {"bare_ipv6", "::1:7001"},
        {"bad_port", "10.0.0.1:70000"},
        {"bad_octet", "10.0.0.256:7001"},
    };
    make_dir("address");
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        write_sample("address", samples[i].name, samples[i].text,
                     strlen(samples[i].text));
    }
}

int main(int argc, char **argv)
{
    struct frames s;

    if (argc != 2) {
        fprintf(stderr, "usage: gen-corpus DIR\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        die(root);
    }
    init_params();
    memset(&s, 0, sizeof s);
    frames_init(&s);
    gen_request();
    gen_frame(&s);
    gen_recv(&s);
    gen_log_entry(&s);
    gen_log_meta();
    gen_configuration();
    gen_change();
    gen_address();
    frames_close(&s);
    return 0;
}
