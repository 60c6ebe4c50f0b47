/* libFuzzer target: the request codec (sql/sql.h): sql_request_decode,
 * sql_request_id and sql_request_stamp on any payload, format versions 1,
 * 2 and 3 alike; what decodes must encode back (versions 2 and 3: the
 * same bytes, a version 3 one with its client id and flags; version 1: a
 * version 2 payload that decodes to the same request). */

#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "sql/codec.h"
#include "sql/sql.h"

/* Offset of the version byte (sql/request.c), to tell the two formats. */
#define VERSION_OFFSET 2

/* Bytes version 2 adds to a version 1 payload: max_steps (u64). */
#define V2_EXTRA 8

/* Bytes version 3's fixed header adds to version 2's (the id window, the
 * result cap and the client id's length). */
#define V3_EXTRA 26

/* check_same compares two decoded requests, their stamps too when
 * @stamps. */
static void check_same(const struct sql_request *a, const struct sql_request *b,
                       bool stamps)
{
    unsigned i;

    FUZZ_CHECK(a->id[0] == b->id[0] && a->id[1] == b->id[1], "ids differ");
    FUZZ_CHECK(
        a->sql_len == b->sql_len && memcmp(a->sql, b->sql, a->sql_len) == 0,
        "SQL texts differ");
    FUZZ_CHECK(a->n_params == b->n_params, "%u params, then %u", a->n_params,
               b->n_params);
    for (i = 0; i < a->n_params; i++) {
        const struct sql_param *pa = &a->params[i], *pb = &b->params[i];
        FUZZ_CHECK((pa->name == NULL) == (pb->name == NULL) &&
                       (pa->name == NULL || strcmp(pa->name, pb->name) == 0),
                   "parameter %u: names differ", i + 1);
        FUZZ_CHECK(codec_value_equal(&pa->value, &pb->value),
                   "parameter %u: values differ", i + 1);
    }
    FUZZ_CHECK(a->want_rows == b->want_rows &&
                   a->client_id_len == b->client_id_len &&
                   (a->client_id_len == 0 ||
                    memcmp(a->client_id, b->client_id, a->client_id_len) == 0),
               "client ids or flags differ");
    if (stamps) {
        FUZZ_CHECK(a->time_ms == b->time_ms && a->seed == b->seed &&
                       a->max_steps == b->max_steps &&
                       a->id_window == b->id_window &&
                       a->id_window_ms == b->id_window_ms &&
                       a->max_result_bytes == b->max_result_bytes,
                   "stamps differ");
    }
}

/* check_refused: a payload the decoder refuses. */
static void check_refused(const uint8_t *data, size_t size, int rc, int rid,
                          const char *err, size_t err_len)
{
    FUZZ_CHECK(
        rc == SQL_ERR_CORRUPT || rc == SQL_ERR_FORMAT || rc == SQL_ERR_NOMEM,
        "rc %d", rc);
    FUZZ_CHECK(fuzz_msg_ok(err, err_len), "no error message");
    /* An unknown version is no request: it has no id either. */
    FUZZ_CHECK(rc != SQL_ERR_FORMAT || rid != 0, "id of version %u",
               size > VERSION_OFFSET ? (unsigned)data[VERSION_OFFSET] : 0);
}

/* check_stamp: stamping a decoded version 2 or 3 @req (@size bytes at @data)
 * changes its stamp and nothing else. */
static void check_stamp(const uint8_t *data, size_t size,
                        const struct sql_request *req)
{
    struct sql_stamp st = {.time_ms = ~req->time_ms,
                           .seed = req->seed ^ 0x5555u,
                           .max_steps = req->max_steps + 1,
                           .id_window = req->id_window + 1,
                           .id_window_ms = req->id_window_ms + 1,
                           .max_result_bytes = req->max_result_bytes + 1};
    struct sql_request s;
    uint8_t *copy = malloc(size);
    int rc;

    FUZZ_CHECK(copy != NULL, "out of memory");
    rc = sql_request_stamp(data, size, &st, copy);
    FUZZ_CHECK(rc == 0, "stamp: rc %d", rc);
    rc = sql_request_decode(copy, size, &s, NULL, 0);
    FUZZ_CHECK(rc == 0, "decode after stamp: rc %d", rc);
    check_same(req, &s, false);
    FUZZ_CHECK(s.time_ms == st.time_ms && s.seed == st.seed &&
                   s.max_steps == st.max_steps,
               "the stamp did not take");
    /* Version 2 has no room for the id window and the cap. */
    FUZZ_CHECK(data[VERSION_OFFSET] == 2
                   ? s.id_window == 0 && s.max_result_bytes == 0
                   : s.id_window == st.id_window &&
                         s.id_window_ms == st.id_window_ms &&
                         s.max_result_bytes == st.max_result_bytes,
               "the version 3 stamp did not take");
    sql_request_free(&s);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sql_request req, again;
    struct sql_stamp st;
    struct sql_request_opts opts;
    uint64_t id[2];
    char err[256];
    uint8_t *buf;
    size_t len = 0;
    unsigned version;
    bool plain3;
    int rc, rid;

    rc = sql_request_decode(data, size, &req, err, sizeof err);
    rid = sql_request_id(data, size, id);
    FUZZ_CHECK(rid == 0 || rid == SQL_ERR_CORRUPT, "id: rc %d", rid);
    if (rc != 0) {
        check_refused(data, size, rc, rid, err, sizeof err);
        return 0;
    }
    FUZZ_CHECK(rid == 0 && id[0] == req.id[0] && id[1] == req.id[1],
               "sql_request_id disagrees with the decoder");
    version = data[VERSION_OFFSET];
    FUZZ_CHECK(version >= 1 && version <= 3, "decoded version %u", version);
    FUZZ_CHECK(version != 1 || req.max_steps == 0, "version 1 with a budget");
    FUZZ_CHECK(version == 3 || (req.client_id == NULL && !req.want_rows),
               "version %u with version 3 fields", version);
    FUZZ_CHECK(req.client_id_len <= SQL_CLIENT_ID_MAX, "client id of %zu",
               req.client_id_len);

    /* Encode what was decoded, stamp it alike. */
    opts.client_id = req.client_id;
    opts.client_id_len = req.client_id_len;
    opts.flags = req.want_rows ? SQL_REQUEST_WANT_ROWS : 0;
    rc = sql_request_size_opts(req.sql, req.sql_len, req.params, req.n_params,
                               &opts, UINT64_MAX, &len, err, sizeof err);
    if (rc == SQL_ERR_INVALID &&
        strncmp(err, "empty SQL: no statement", 23) == 0) {
        /* SQL of no statement: the encoder refuses it (a request that
         * does nothing), the decoder still reads it (entries of older
         * logs). */
        sql_request_free(&req);
        return 0;
    }
    FUZZ_CHECK(rc == 0, "a decoded request does not size: %s", err);
    plain3 = version == 3 && !req.want_rows && req.client_id == NULL;
    FUZZ_CHECK(
        len + (plain3 ? V3_EXTRA : 0) == size + (version == 1 ? V2_EXTRA : 0),
        "version %u: %zu bytes re-encode to %zu", version, size, len);
    buf = malloc(len);
    FUZZ_CHECK(buf != NULL, "out of memory");
    rc = sql_request_encode_opts(req.id, req.sql, req.sql_len, req.params,
                                 req.n_params, &opts, buf, len);
    FUZZ_CHECK(rc == 0, "a decoded request does not encode: rc %d", rc);
    st.time_ms = req.time_ms;
    st.seed = req.seed;
    st.max_steps = req.max_steps;
    st.id_window = req.id_window;
    st.id_window_ms = req.id_window_ms;
    st.max_result_bytes = req.max_result_bytes;
    rc = sql_request_stamp(buf, len, &st, buf);
    FUZZ_CHECK(rc == 0, "stamp in place: rc %d", rc);
    if (plain3) {
        /* A version 3 payload without options re-encodes as version 2. */
        FUZZ_CHECK(buf[VERSION_OFFSET] == 2, "no options, version %u",
                   (unsigned)buf[VERSION_OFFSET]);
        check_stamp(data, size, &req);
    } else if (version >= 2) {
        FUZZ_CHECK(memcmp(buf, data, size) == 0, "re-encoded bytes differ");
        check_stamp(data, size, &req);
    } else {
        /* Version 1 is read, never stamped. */
        FUZZ_CHECK(sql_request_stamp(data, size, &st, buf) == SQL_ERR_FORMAT,
                   "a version 1 payload was stamped");
    }
    rc = sql_request_decode(buf, len, &again, err, sizeof err);
    FUZZ_CHECK(rc == 0, "the re-encoded request does not decode: %s", err);
    check_same(&req, &again, !plain3);
    sql_request_free(&again);
    free(buf);
    sql_request_free(&req);
    return 0;
}
