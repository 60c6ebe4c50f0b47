/* The write-request codec: what a Raft log entry carries for raft_exec
 * (SQL text, typed bound parameters, request id, leader time and seed).
 *
 * Payload format, version 2. All integers are little-endian; the header
 * has a fixed size so that sql_request_stamp can patch the leader's stamp
 * (timestamp, seed, work budget) without decoding the rest.
 *
 *   offset  size  field
 *   0       2     magic "RQ" (0x52 0x51)
 *   2       1     version, 2
 *   3       1     flags, 0 (reserved: a decoder refuses other values)
 *   4       4     n_params (u32)
 *   8       8     id[0]: origin node id (u64)
 *   16      8     id[1]: origin sequence number (u64)
 *   24      8     time_ms: leader wall clock, ms since the epoch (i64)
 *   32      8     seed of random()/randomblob() (u64)
 *   40      8     max_steps: the leader's work budget, SQLite virtual
 *                 machine steps, 0 for none (u64)
 *   48      4     sql_len (u32), at least 1
 *   52      sql_len  SQL text (UTF-8, no NUL byte)
 *   then n_params parameters, each:
 *     1     type: enum sql_value_type (1..5)
 *     1     named: 0 (positional) or 1
 *     if named:
 *       4   name_len (u32), at least 1
 *       name_len  name bytes (first one of ? : @ $, no NUL byte)
 *       1   0, so that the decoded name can point into the payload
 *     value by type:
 *       INTEGER  8  two's complement i64
 *       FLOAT    8  IEEE-754 binary64 bits (u64)
 *       TEXT     4 + len  u32 len, then the bytes (NUL bytes allowed)
 *       BLOB     4 + len  u32 len, then the bytes
 *       NULL     0
 *   The payload ends right after the last parameter: trailing bytes are
 *   refused. A new version bumps the version byte; a decoder refuses
 *   versions it does not know with SQL_ERR_FORMAT rather than misread them.
 *
 * Version 1 (entries written before the work budget) has no max_steps:
 * sql_len is at offset 40 and the text at 44. It is still decoded (with
 * no budget), so old logs apply, but never written or stamped.
 *
 * Version 3 is written only for a request that carries a client request
 * id or asks for its rows (raft_exec_id, raft_query, raft_query_id); any
 * other request stays version 2, so that nodes of before version 3 go on
 * applying it. Offsets 0 to 51 are those of version 2 (version byte 3),
 * with the flags byte used:
 *
 *   3       1     flags: bit 0 SQL_REQUEST_CLIENT_ID (a client id
 *                 follows), bit 1 SQL_REQUEST_WANT_ROWS (collect the rows
 *                 as JSON); other bits are refused
 *   52      8     id_window: ids remembered, by count (u64; the
 *                 leader's request_id_window, stamped; 0 unstamped)
 *   60      8     id_window_ms: ids remembered, by entry time (u64, ms;
 *                 the leader's request_id_window_ms, stamped)
 *   68      8     max_result_bytes: cap of the rows' JSON (u64; the
 *                 leader's max_result_bytes, stamped)
 *   76      2     client_id_len (u16): 1..SQL_CLIENT_ID_MAX with the
 *                 CLIENT_ID flag, else 0
 *   78      client_id_len  the client id bytes (any bytes)
 *   then the SQL text (sql_len bytes) and the parameters, as in
 *   version 2. */

#include "sql.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

#define SQL__REQUEST_MAGIC0 0x52 /* 'R' */
#define SQL__REQUEST_MAGIC1 0x51 /* 'Q' */
#define SQL__REQUEST_VERSION 2
#define SQL__REQUEST_OFF_VERSION 2
#define SQL__REQUEST_OFF_FLAGS 3
#define SQL__REQUEST_OFF_N_PARAMS 4
#define SQL__REQUEST_OFF_ID 8
#define SQL__REQUEST_OFF_TIME 24
#define SQL__REQUEST_OFF_SEED 32
#define SQL__REQUEST_OFF_MAX_STEPS 40
#define SQL__REQUEST_OFF_SQL_LEN 48
#define SQL__REQUEST_HEADER 52
#define SQL__REQUEST_V1_OFF_SQL_LEN 40 /* version 1: no max_steps */
#define SQL__REQUEST_V1_HEADER 44
#define SQL__REQUEST_MIN_PARAM 2 /* type + named bytes */
#define SQL__REQUEST_V3 3
#define SQL__REQUEST_OFF_ID_WINDOW 52 /* version 3 */
#define SQL__REQUEST_OFF_ID_WINDOW_MS 60
#define SQL__REQUEST_OFF_MAX_RESULT 68
#define SQL__REQUEST_OFF_CLIENT_ID_LEN 76
#define SQL__REQUEST_V3_HEADER 78 /* before the client id */
/* The previous release's test build (raftsql-testhost-prev, Makefile)
 * decodes versions 1 and 2 only, as that release did. */
#ifdef SQL_REQUEST_VERSION_MAX_TEST
#define SQL__REQUEST_DECODES_V3 (SQL_REQUEST_VERSION_MAX_TEST >= 3)
#else
#define SQL__REQUEST_DECODES_V3 1
#endif
#define SQL__REQUEST_FLAGS_KNOWN (SQL_REQUEST_CLIENT_ID | SQL_REQUEST_WANT_ROWS)

static int is_name_start(char c)
{
    return c == '?' || c == ':' || c == '@' || c == '$';
}

/* is_v3 says whether @opts (may be NULL) need format version 3. */
static int is_v3(const struct sql_request_opts *opts)
{
    return opts != NULL && (opts->client_id_len > 0 || opts->flags != 0);
}

/* check_opts validates @opts (may be NULL). */
static int check_opts(const struct sql_request_opts *opts, char *errmsg,
                      size_t errmsg_len)
{
    if (opts == NULL) {
        return 0;
    }
    if ((opts->flags & ~(unsigned)SQL_REQUEST_WANT_ROWS) != 0) {
        sql_errmsgf(errmsg, errmsg_len, "request flags 0x%x are not known",
                    opts->flags);
        return SQL_ERR_INVALID;
    }
    if (opts->client_id_len > SQL_CLIENT_ID_MAX) {
        sql_errmsgf(errmsg, errmsg_len,
                    "request id of %zu bytes is longer than %d bytes",
                    opts->client_id_len, SQL_CLIENT_ID_MAX);
        return SQL_ERR_INVALID;
    }
    if (opts->client_id_len > 0 && opts->client_id == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "request id of %zu bytes but no bytes",
                    opts->client_id_len);
        return SQL_ERR_INVALID;
    }
    return 0;
}

int sql_request_size(const char *sql, size_t sql_len,
                     const struct sql_param *params, unsigned n_params,
                     uint64_t max_bytes, size_t *out_len, char *errmsg,
                     size_t errmsg_len)
{
    return sql_request_size_opts(sql, sql_len, params, n_params, NULL,
                                 max_bytes, out_len, errmsg, errmsg_len);
}

/* has_statement says whether @sql (@len bytes) holds more than
 * whitespace, semicolons and comments (-- to the line's end, and
 * C-style). An unterminated C-style comment is a comment to the end, as
 * SQLite reads it. */
static bool has_statement(const char *sql, size_t len)
{
    size_t i = 0;
    while (i < len) {
        char c = sql[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
            c == '\v' || c == ';') {
            i++;
        } else if (c == '-' && i + 1 < len && sql[i + 1] == '-') {
            while (i < len && sql[i] != '\n') {
                i++;
            }
        } else if (c == '/' && i + 1 < len && sql[i + 1] == '*') {
            i += 2;
            while (i < len &&
                   !(sql[i] == '*' && i + 1 < len && sql[i + 1] == '/')) {
                i++;
            }
            i += 2;
        } else {
            return true;
        }
    }
    return false;
}

int sql_request_size_opts(const char *sql, size_t sql_len,
                          const struct sql_param *params, unsigned n_params,
                          const struct sql_request_opts *opts,
                          uint64_t max_bytes, size_t *out_len, char *errmsg,
                          size_t errmsg_len)
{
    uint64_t total = SQL__REQUEST_HEADER;
    unsigned i;
    int rc = check_opts(opts, errmsg, errmsg_len);

    if (rc != 0) {
        return rc;
    }
    if (is_v3(opts)) {
        total = SQL__REQUEST_V3_HEADER + (uint64_t)opts->client_id_len;
    }
    if (sql == NULL || sql_len == 0) {
        sql_errmsgf(errmsg, errmsg_len, "empty SQL");
        return SQL_ERR_INVALID;
    }
    if (!has_statement(sql, sql_len)) {
        sql_errmsgf(errmsg, errmsg_len,
                    "empty SQL: no statement in it (only whitespace, "
                    "semicolons and comments)");
        return SQL_ERR_INVALID;
    }
    if (memchr(sql, 0, sql_len) != NULL) {
        sql_errmsgf(errmsg, errmsg_len, "SQL text contains a NUL byte");
        return SQL_ERR_INVALID;
    }
    if (n_params > 0 && params == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "%u parameters but no array", n_params);
        return SQL_ERR_INVALID;
    }
    total += sql_len;
    for (i = 0; i < n_params; i++) {
        const struct sql_param *prm = &params[i];
        int bad = 0;
        uint64_t vsize = codec_value_size(&prm->value, &bad);

        if (bad) {
            sql_errmsgf(errmsg, errmsg_len, "parameter %u: bad value (type %u)",
                        i + 1, (unsigned)prm->value.type);
            return SQL_ERR_INVALID;
        }
        total += SQL__REQUEST_MIN_PARAM + vsize;
        if (prm->value.type == SQL_TEXT || prm->value.type == SQL_BLOB) {
            if (prm->value.bytes.len > UINT32_MAX) {
                sql_errmsgf(errmsg, errmsg_len,
                            "parameter %u: value of %zu bytes exceeds the "
                            "request format limit (%" PRIu32 ")",
                            i + 1, prm->value.bytes.len, UINT32_MAX);
                return SQL_ERR_TOOBIG;
            }
        }
        if (prm->name != NULL) {
            size_t name_len = strlen(prm->name);

            if (name_len == 0 || !is_name_start(prm->name[0])) {
                sql_errmsgf(errmsg, errmsg_len,
                            "parameter %u: name \"%s\" must start with "
                            "?, :, @ or $",
                            i + 1, prm->name);
                return SQL_ERR_INVALID;
            }
            if (name_len > UINT32_MAX) {
                sql_errmsgf(errmsg, errmsg_len, "parameter %u: name too long",
                            i + 1);
                return SQL_ERR_TOOBIG;
            }
            total += 4 + (uint64_t)name_len + 1;
        }
    }
    if (sql_len > UINT32_MAX) {
        sql_errmsgf(errmsg, errmsg_len,
                    "SQL text of %zu bytes exceeds the request format limit "
                    "(%" PRIu32 ")",
                    sql_len, UINT32_MAX);
        return SQL_ERR_TOOBIG;
    }
    if (total > max_bytes) {
        sql_errmsgf(errmsg, errmsg_len,
                    "request of %" PRIu64
                    " bytes exceeds max_request_bytes "
                    "(%" PRIu64 ")",
                    total, max_bytes);
        return SQL_ERR_TOOBIG;
    }
    if (total > SIZE_MAX) {
        sql_errmsgf(errmsg, errmsg_len, "request too big for this platform");
        return SQL_ERR_TOOBIG;
    }
    *out_len = (size_t)total;
    return 0;
}

int sql_request_encode(const uint64_t id[2], const char *sql, size_t sql_len,
                       const struct sql_param *params, unsigned n_params,
                       void *out, size_t out_len)
{
    return sql_request_encode_opts(id, sql, sql_len, params, n_params, NULL,
                                   out, out_len);
}

int sql_request_encode_opts(const uint64_t id[2], const char *sql,
                            size_t sql_len, const struct sql_param *params,
                            unsigned n_params,
                            const struct sql_request_opts *opts, void *out,
                            size_t out_len)
{
    uint8_t *p = out;
    size_t len = 0, header = SQL__REQUEST_HEADER;
    unsigned i;

    if (sql_request_size_opts(sql, sql_len, params, n_params, opts, UINT64_MAX,
                              &len, NULL, 0) != 0 ||
        len != out_len) {
        return SQL_ERR_INVALID;
    }
    p[0] = SQL__REQUEST_MAGIC0;
    p[1] = SQL__REQUEST_MAGIC1;
    p[SQL__REQUEST_OFF_VERSION] = SQL__REQUEST_VERSION;
    p[SQL__REQUEST_OFF_FLAGS] = 0;
    codec_put_u32(p + SQL__REQUEST_OFF_N_PARAMS, n_params);
    codec_put_u64(p + SQL__REQUEST_OFF_ID, id[0]);
    codec_put_u64(p + SQL__REQUEST_OFF_ID + 8, id[1]);
    codec_put_u64(p + SQL__REQUEST_OFF_TIME, 0);
    codec_put_u64(p + SQL__REQUEST_OFF_SEED, 0);
    codec_put_u64(p + SQL__REQUEST_OFF_MAX_STEPS, 0);
    codec_put_u32(p + SQL__REQUEST_OFF_SQL_LEN, (uint32_t)sql_len);
    if (is_v3(opts)) {
        p[SQL__REQUEST_OFF_VERSION] = SQL__REQUEST_V3;
        p[SQL__REQUEST_OFF_FLAGS] =
            (uint8_t)(opts->flags |
                      (opts->client_id_len > 0 ? SQL_REQUEST_CLIENT_ID : 0));
        codec_put_u64(p + SQL__REQUEST_OFF_ID_WINDOW, 0);
        codec_put_u64(p + SQL__REQUEST_OFF_ID_WINDOW_MS, 0);
        codec_put_u64(p + SQL__REQUEST_OFF_MAX_RESULT, 0);
        p[SQL__REQUEST_OFF_CLIENT_ID_LEN] = (uint8_t)opts->client_id_len;
        p[SQL__REQUEST_OFF_CLIENT_ID_LEN + 1] =
            (uint8_t)(opts->client_id_len >> 8);
        if (opts->client_id_len > 0) {
            memcpy(p + SQL__REQUEST_V3_HEADER, opts->client_id,
                   opts->client_id_len);
        }
        header = SQL__REQUEST_V3_HEADER + opts->client_id_len;
    }
    memcpy(p + header, sql, sql_len);
    p += header + sql_len;

    for (i = 0; i < n_params; i++) {
        const struct sql_param *prm = &params[i];
        const struct sql_value *v = &prm->value;

        *p++ = v->type;
        *p++ = prm->name != NULL ? 1 : 0;
        if (prm->name != NULL) {
            size_t name_len = strlen(prm->name);

            codec_put_u32(p, (uint32_t)name_len);
            memcpy(p + 4, prm->name, name_len);
            p[4 + name_len] = 0;
            p += 4 + name_len + 1;
        }
        p = codec_value_put(p, v);
    }
    /* Invariant: the size sql_request_size computed is exactly what was
     * written. */
    assert((size_t)(p - (uint8_t *)out) == out_len);
    return 0;
}

/* check_header validates the fixed header of @p (@len bytes), of format
 * version 1, 2 or 3, and gives its size in *@out_header (for version 3,
 * through the client id). */
static int check_header(const uint8_t *p, size_t len, size_t *out_header,
                        char *errmsg, size_t errmsg_len)
{
    size_t header;
    uint8_t version, flags;

    if (len < SQL__REQUEST_OFF_VERSION + 1 || p[0] != SQL__REQUEST_MAGIC0 ||
        p[1] != SQL__REQUEST_MAGIC1) {
        sql_errmsgf(errmsg, errmsg_len,
                    "not a request payload (too short or bad magic)");
        return SQL_ERR_CORRUPT;
    }
    version = p[SQL__REQUEST_OFF_VERSION];
    if (version == SQL__REQUEST_VERSION) {
        header = SQL__REQUEST_HEADER;
    } else if (version == SQL__REQUEST_V3 && SQL__REQUEST_DECODES_V3) {
        header = SQL__REQUEST_V3_HEADER;
    } else if (version == 1) {
        header = SQL__REQUEST_V1_HEADER;
    } else {
        /* (The previous release's text, in its test build.) */
        sql_errmsgf(
            errmsg, errmsg_len,
            SQL__REQUEST_DECODES_V3
                ? "request format version %u is not supported "
                  "(expected 1 to %u)"
                : "request format version %u is not supported "
                  "(expected 1 or %u)",
            (unsigned)version,
            SQL__REQUEST_DECODES_V3 ? SQL__REQUEST_V3 : SQL__REQUEST_VERSION);
        return SQL_ERR_FORMAT;
    }
    if (len < header) {
        sql_errmsgf(errmsg, errmsg_len,
                    "truncated request: %zu bytes, header needs %zu", len,
                    header);
        return SQL_ERR_CORRUPT;
    }
    flags = p[SQL__REQUEST_OFF_FLAGS];
    if (version == SQL__REQUEST_V3) {
        size_t id_len = (size_t)p[SQL__REQUEST_OFF_CLIENT_ID_LEN] |
                        (size_t)p[SQL__REQUEST_OFF_CLIENT_ID_LEN + 1] << 8;

        if ((flags & ~SQL__REQUEST_FLAGS_KNOWN) != 0) {
            sql_errmsgf(errmsg, errmsg_len,
                        "request flags 0x%02x are not known", (unsigned)flags);
            return SQL_ERR_CORRUPT;
        }
        if (id_len > SQL_CLIENT_ID_MAX ||
            (id_len > 0) != ((flags & SQL_REQUEST_CLIENT_ID) != 0)) {
            sql_errmsgf(errmsg, errmsg_len,
                        "bad request: client id of %zu bytes with flags "
                        "0x%02x",
                        id_len, (unsigned)flags);
            return SQL_ERR_CORRUPT;
        }
        if (len - header < id_len) {
            sql_errmsgf(errmsg, errmsg_len,
                        "truncated request: %zu bytes, the client id needs "
                        "%zu",
                        len, header + id_len);
            return SQL_ERR_CORRUPT;
        }
        header += id_len;
    } else if (flags != 0) {
        sql_errmsgf(errmsg, errmsg_len, "request flags 0x%02x are not known",
                    (unsigned)flags);
        return SQL_ERR_CORRUPT;
    }
    *out_header = header;
    return 0;
}

int sql_request_stamp(const void *in, size_t len, const struct sql_stamp *stamp,
                      void *out)
{
    uint8_t *b = out;
    size_t header;
    int rc = check_header(in, len, &header, NULL, 0);

    if (rc != 0) {
        return rc;
    }
    if (((const uint8_t *)in)[SQL__REQUEST_OFF_VERSION] == 1) {
        return SQL_ERR_FORMAT; /* version 1 has no room for the budget */
    }
    if (out != in) {
        memcpy(out, in, len);
    }
    codec_put_u64(b + SQL__REQUEST_OFF_TIME, (uint64_t)stamp->time_ms);
    codec_put_u64(b + SQL__REQUEST_OFF_SEED, stamp->seed);
    codec_put_u64(b + SQL__REQUEST_OFF_MAX_STEPS, stamp->max_steps);
    if (b[SQL__REQUEST_OFF_VERSION] == SQL__REQUEST_V3) {
        codec_put_u64(b + SQL__REQUEST_OFF_ID_WINDOW, stamp->id_window);
        codec_put_u64(b + SQL__REQUEST_OFF_ID_WINDOW_MS, stamp->id_window_ms);
        codec_put_u64(b + SQL__REQUEST_OFF_MAX_RESULT, stamp->max_result_bytes);
    }
    return 0;
}

int sql_request_id(const void *p, size_t len, uint64_t out[2])
{
    const uint8_t *b = p;
    size_t header;

    if (check_header(b, len, &header, NULL, 0) != 0) {
        return SQL_ERR_CORRUPT;
    }
    out[0] = codec_get_u64(b + SQL__REQUEST_OFF_ID);
    out[1] = codec_get_u64(b + SQL__REQUEST_OFF_ID + 8);
    return 0;
}

int sql_request_time(const void *p, size_t len, int64_t *out)
{
    const uint8_t *b = p;
    size_t header;

    if (check_header(b, len, &header, NULL, 0) != 0) {
        return SQL_ERR_CORRUPT;
    }
    *out = (int64_t)codec_get_u64(b + SQL__REQUEST_OFF_TIME);
    return 0;
}

unsigned sql_request_version(const void *p, size_t len)
{
    const uint8_t *b = p;
    size_t header;

    if (check_header(b, len, &header, NULL, 0) != 0) {
        return 0;
    }
    return b[SQL__REQUEST_OFF_VERSION];
}

/* A bounds-checked cursor over the payload being decoded. */
struct reader {
    const uint8_t *base; /* payload start */
    size_t len;          /* payload bytes */
    size_t pos;          /* next byte to read */
    char *errmsg;        /* message buffer, may be NULL */
    size_t errmsg_len;   /* its size */
};

/* need checks that @n more bytes are there for @what. */
static int need(struct reader *r, uint64_t n, const char *what, unsigned param)
{
    if (n > r->len - r->pos) {
        if (param > 0) {
            sql_errmsgf(r->errmsg, r->errmsg_len,
                        "truncated request: parameter %u: %s needs %" PRIu64
                        " bytes at offset %zu, %zu left",
                        param, what, n, r->pos, r->len - r->pos);
        } else {
            sql_errmsgf(r->errmsg, r->errmsg_len,
                        "truncated request: %s needs %" PRIu64
                        " bytes at offset %zu, %zu left",
                        what, n, r->pos, r->len - r->pos);
        }
        return SQL_ERR_CORRUPT;
    }
    return 0;
}

static int decode_param(struct reader *r, unsigned i, struct sql_param *out)
{
    const uint8_t *p;
    uint8_t type, named;
    uint32_t n;
    uint64_t used;
    int rc, bytes;

    rc = need(r, SQL__REQUEST_MIN_PARAM, "header", i);
    if (rc != 0) {
        return rc;
    }
    p = r->base + r->pos;
    type = p[0];
    named = p[1];
    r->pos += 2;
    if (type < SQL_INTEGER || type > SQL_NULL) {
        sql_errmsgf(r->errmsg, r->errmsg_len,
                    "bad request: parameter %u has value type %u", i,
                    (unsigned)type);
        return SQL_ERR_CORRUPT;
    }
    if (named > 1) {
        sql_errmsgf(r->errmsg, r->errmsg_len,
                    "bad request: parameter %u has name flag %u", i,
                    (unsigned)named);
        return SQL_ERR_CORRUPT;
    }
    out->name = NULL;
    out->value.type = type;
    if (named) {
        rc = need(r, 4, "name length", i);
        if (rc != 0) {
            return rc;
        }
        n = codec_get_u32(r->base + r->pos);
        r->pos += 4;
        rc = need(r, (uint64_t)n + 1, "name", i);
        if (rc != 0) {
            return rc;
        }
        p = r->base + r->pos;
        if (n == 0 || !is_name_start((char)p[0]) || p[n] != 0 ||
            memchr(p, 0, n) != NULL) {
            sql_errmsgf(r->errmsg, r->errmsg_len,
                        "bad request: parameter %u has a malformed name", i);
            return SQL_ERR_CORRUPT;
        }
        out->name = (const char *)p;
        r->pos += (size_t)n + 1;
    }
    bytes = type == SQL_TEXT || type == SQL_BLOB;
    if (codec_value_get(r->base + r->pos, r->len - r->pos, type, &out->value,
                        &used) != 0) {
        if (bytes && used > 4) {
            r->pos += 4; /* the length is there, its bytes are not */
            return need(r, used - 4, "value", i);
        }
        return need(r, used, bytes ? "value length" : "value", i);
    }
    r->pos += (size_t)used;
    return 0;
}

int sql_request_decode(const void *p, size_t len, struct sql_request *out,
                       char *errmsg, size_t errmsg_len)
{
    struct reader r = {p, len, 0, errmsg, errmsg_len};
    struct sql_request req;
    uint32_t n_params, sql_len;
    size_t header;
    unsigned i;
    int rc;

    rc = check_header(p, len, &header, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    memset(&req, 0, sizeof req);
    n_params = codec_get_u32(r.base + SQL__REQUEST_OFF_N_PARAMS);
    req.id[0] = codec_get_u64(r.base + SQL__REQUEST_OFF_ID);
    req.id[1] = codec_get_u64(r.base + SQL__REQUEST_OFF_ID + 8);
    req.time_ms = (int64_t)codec_get_u64(r.base + SQL__REQUEST_OFF_TIME);
    req.seed = codec_get_u64(r.base + SQL__REQUEST_OFF_SEED);
    if (r.base[SQL__REQUEST_OFF_VERSION] == 1) {
        sql_len = codec_get_u32(r.base + SQL__REQUEST_V1_OFF_SQL_LEN);
    } else {
        req.max_steps = codec_get_u64(r.base + SQL__REQUEST_OFF_MAX_STEPS);
        sql_len = codec_get_u32(r.base + SQL__REQUEST_OFF_SQL_LEN);
    }
    if (r.base[SQL__REQUEST_OFF_VERSION] == SQL__REQUEST_V3) {
        uint8_t flags = r.base[SQL__REQUEST_OFF_FLAGS];

        req.want_rows = (flags & SQL_REQUEST_WANT_ROWS) != 0;
        req.id_window = codec_get_u64(r.base + SQL__REQUEST_OFF_ID_WINDOW);
        req.id_window_ms =
            codec_get_u64(r.base + SQL__REQUEST_OFF_ID_WINDOW_MS);
        req.max_result_bytes =
            codec_get_u64(r.base + SQL__REQUEST_OFF_MAX_RESULT);
        req.client_id_len = header - SQL__REQUEST_V3_HEADER;
        if (req.client_id_len > 0) {
            req.client_id = r.base + SQL__REQUEST_V3_HEADER;
        }
    }
    r.pos = header;

    rc = need(&r, sql_len, "SQL text", 0);
    if (rc != 0) {
        return rc;
    }
    if (sql_len == 0 || memchr(r.base + r.pos, 0, sql_len) != NULL) {
        sql_errmsgf(errmsg, errmsg_len,
                    "bad request: SQL text is empty or contains a NUL byte");
        return SQL_ERR_CORRUPT;
    }
    req.sql = (const char *)(r.base + r.pos);
    req.sql_len = sql_len;
    r.pos += sql_len;
    req.params_data = r.base + r.pos;
    req.params_len = len - r.pos;

    /* Each parameter takes at least 2 bytes: refuse a count the payload
     * cannot hold before allocating for it. */
    if ((uint64_t)n_params * SQL__REQUEST_MIN_PARAM > len - r.pos) {
        sql_errmsgf(errmsg, errmsg_len,
                    "truncated request: %" PRIu32
                    " parameters cannot fit in the %zu bytes left",
                    n_params, len - r.pos);
        return SQL_ERR_CORRUPT;
    }
    if (n_params > 0) {
        req.params = calloc(n_params, sizeof *req.params);
        if (req.params == NULL) {
            sql_errmsgf(errmsg, errmsg_len,
                        "out of memory (%" PRIu32 " parameters)", n_params);
            return SQL_ERR_NOMEM;
        }
    }
    req.n_params = n_params;
    for (i = 0; i < n_params; i++) {
        rc = decode_param(&r, i + 1, &req.params[i]);
        if (rc != 0) {
            goto err_params;
        }
    }
    if (r.pos != len) {
        sql_errmsgf(errmsg, errmsg_len,
                    "bad request: %zu trailing bytes after the last "
                    "parameter",
                    len - r.pos);
        rc = SQL_ERR_CORRUPT;
        goto err_params;
    }
    *out = req;
    return 0;

err_params:
    free(req.params);
    return rc;
}

void sql_request_free(struct sql_request *r)
{
    free(r->params);
    r->params = NULL;
    r->n_params = 0;
}

void sql_request_surplus_msg(char *out, size_t out_len, unsigned n_values,
                             int max_params, unsigned n_statements)
{
    if (max_params <= 0) {
        sql_errmsgf(out, out_len,
                    "%u value%s given but the SQL has no parameters", n_values,
                    n_values == 1 ? "" : "s");
    } else if (n_statements <= 1) {
        sql_errmsgf(out, out_len,
                    "%u values given but the SQL has only %d parameter%s",
                    n_values, max_params, max_params == 1 ? "" : "s");
    } else {
        /* Several statements that each take the list from its start
         * surprise a caller who expected them to consume it in turn. */
        sql_errmsgf(out, out_len,
                    "%u values given but no statement of the SQL has more "
                    "than %d parameter%s: each statement binds the values "
                    "from the first one on; write ?NNN (?1 to ?%u) to bind "
                    "value NNN in any statement",
                    n_values, max_params, max_params == 1 ? "" : "s", n_values);
    }
}
