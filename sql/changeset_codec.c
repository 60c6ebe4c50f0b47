/* The changeset payload of changeset.h: the encoder's pieces that the
 * capture writes records with (changeset_internal.h), and the decoder,
 * which bounds-checks every length and refuses anything the format does
 * not allow, naming the record. */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "changeset_internal.h"
#include "codec.h"

#define SQL__CHANGESET_MAGIC0 0x43 /* 'C' */
#define SQL__CHANGESET_MAGIC1 0x53 /* 'S' */
#define SQL__CHANGESET_VERSION 1
#define SQL__CHANGESET_OFF_VERSION 2
#define SQL__CHANGESET_OFF_FLAGS 3
#define SQL__CHANGESET_OFF_ID 4
#define SQL__CHANGESET_OFF_LEASE 20
#define SQL__CHANGESET_OFF_N_RECORDS 28
/* The smallest record: a schema record of one byte of text. */
#define SQL__CHANGE_MIN (SQL__CHANGE_SCHEMA_FIXED + 1)

int sql_changeset_is(const void *p, size_t len)
{
    const uint8_t *b = p;

    return len >= 2 && b[0] == SQL__CHANGESET_MAGIC0 &&
           b[1] == SQL__CHANGESET_MAGIC1;
}

void changeset_codec_header(uint8_t *p, const uint64_t id[2], uint64_t lease,
                            uint32_t n_records)
{
    p[0] = SQL__CHANGESET_MAGIC0;
    p[1] = SQL__CHANGESET_MAGIC1;
    p[SQL__CHANGESET_OFF_VERSION] = SQL__CHANGESET_VERSION;
    p[SQL__CHANGESET_OFF_FLAGS] = 0;
    codec_put_u64(p + SQL__CHANGESET_OFF_ID, id[0]);
    codec_put_u64(p + SQL__CHANGESET_OFF_ID + 8, id[1]);
    codec_put_u64(p + SQL__CHANGESET_OFF_LEASE, lease);
    codec_put_u32(p + SQL__CHANGESET_OFF_N_RECORDS, n_records);
}

uint8_t *changeset_codec_row(uint8_t *p, uint8_t kind, const char *table,
                             size_t table_len, int64_t old_rowid,
                             int64_t new_rowid, unsigned n_cols)
{
    p[0] = kind;
    codec_put_u16(p + 1, (uint16_t)table_len);
    memcpy(p + 3, table, table_len);
    p += 3 + table_len;
    codec_put_u64(p, (uint64_t)old_rowid);
    codec_put_u64(p + 8, (uint64_t)new_rowid);
    codec_put_u16(p + 16, (uint16_t)n_cols);
    return p + 18;
}

uint8_t *changeset_codec_schema(uint8_t *p, const char *sql, size_t len)
{
    p[0] = SQL_CHANGE_SCHEMA;
    codec_put_u32(p + 1, (uint32_t)len);
    memcpy(p + 5, sql, len);
    return p + 5 + len;
}

uint8_t *changeset_codec_schema_in_txn(uint8_t *p, uint8_t settings,
                                       const char *sql, size_t len)
{
    p[0] = SQL_CHANGE_SCHEMA_IN_TXN;
    p[1] = settings;
    codec_put_u32(p + 2, (uint32_t)len);
    memcpy(p + 6, sql, len);
    return p + 6 + len;
}

/* A bounds-checked cursor over the payload being decoded. */
struct reader {
    const uint8_t *base; /* payload start */
    size_t len;          /* payload bytes */
    size_t pos;          /* next byte to read */
    unsigned record;     /* record being read, from 1 */
    char *errmsg;        /* message buffer, may be NULL */
    size_t errmsg_len;   /* its size */
};

/* need checks that @n more bytes are there for @what. */
static int need(struct reader *r, uint64_t n, const char *what)
{
    if (n > r->len - r->pos) {
        sql_errmsgf(r->errmsg, r->errmsg_len,
                    "truncated changeset: record %u: %s needs %" PRIu64
                    " bytes at offset %zu, %zu left",
                    r->record, what, n, r->pos, r->len - r->pos);
        return SQL_ERR_CORRUPT;
    }
    return 0;
}

/* bad reports a malformed field of the current record. */
static int bad(struct reader *r, const char *what, unsigned v)
{
    sql_errmsgf(r->errmsg, r->errmsg_len,
                "bad changeset: record %u: %s %u at offset %zu", r->record,
                what, v, r->pos);
    return SQL_ERR_CORRUPT;
}

/* read_row reads @n_cols values at the cursor into @out (NULL: only
 * checked), @which naming the row image in messages. */
static int read_row(struct reader *r, unsigned n_cols, struct sql_value *out,
                    const char *which)
{
    struct sql_value v;
    unsigned i;
    uint64_t used;
    uint8_t type;
    int rc;

    for (i = 0; i < n_cols; i++) {
        rc = need(r, 1, which);
        if (rc != 0) {
            return rc;
        }
        type = r->base[r->pos];
        if (type < SQL_INTEGER || type > SQL_NULL) {
            return bad(r, "value type", type);
        }
        r->pos++;
        if (codec_value_get(r->base + r->pos, r->len - r->pos, type, &v,
                            &used) != 0) {
            return need(r, used, which);
        }
        r->pos += (size_t)used;
        if (out != NULL) {
            out[i] = v;
        }
    }
    return 0;
}

/* read_record reads the record at the cursor, into @out and @values
 * unless they are NULL (the first pass, which only checks and counts the
 * values in *@n_values). */
static int read_record(struct reader *r, struct sql_change *out,
                       struct sql_value *values, uint64_t *n_values)
{
    struct sql_change ch;
    uint8_t kind;
    uint32_t sql_len;
    int rc;

    memset(&ch, 0, sizeof ch);
    rc = need(r, 1, "kind");
    if (rc != 0) {
        return rc;
    }
    kind = r->base[r->pos];
    if (kind < SQL_CHANGE_INSERT || kind > SQL_CHANGE_SCHEMA_IN_TXN) {
        return bad(r, "kind", kind);
    }
    r->pos++;
    ch.kind = kind;
    if (kind == SQL_CHANGE_SCHEMA_IN_TXN) {
        /* Decoded as a schema record that knows its writer's settings. */
        ch.kind = SQL_CHANGE_SCHEMA;
        ch.in_txn = 1;
        rc = need(r, 1, "settings");
        if (rc != 0) {
            return rc;
        }
        ch.settings = r->base[r->pos];
        if ((ch.settings & ~SQL_SCHEMA_SETTINGS_ALL) != 0) {
            return bad(r, "settings", ch.settings);
        }
        r->pos++;
    }
    if (ch.kind == SQL_CHANGE_SCHEMA) {
        rc = need(r, 4, "SQL length");
        if (rc != 0) {
            return rc;
        }
        sql_len = codec_get_u32(r->base + r->pos);
        if (sql_len == 0) {
            return bad(r, "SQL length", 0);
        }
        r->pos += 4;
        rc = need(r, sql_len, "SQL text");
        if (rc != 0) {
            return rc;
        }
        if (memchr(r->base + r->pos, 0, sql_len) != NULL) {
            sql_errmsgf(r->errmsg, r->errmsg_len,
                        "bad changeset: record %u: SQL text contains a NUL "
                        "byte",
                        r->record);
            return SQL_ERR_CORRUPT;
        }
        ch.sql = (const char *)(r->base + r->pos);
        ch.sql_len = sql_len;
        r->pos += sql_len;
    } else {
        rc = need(r, 2, "table name length");
        if (rc != 0) {
            return rc;
        }
        ch.table_len = codec_get_u16(r->base + r->pos);
        if (ch.table_len == 0) {
            return bad(r, "table name length", 0);
        }
        r->pos += 2;
        rc = need(r, ch.table_len + 18, "table name and rowids");
        if (rc != 0) {
            return rc;
        }
        ch.table = (const char *)(r->base + r->pos);
        r->pos += ch.table_len;
        ch.old_rowid = (int64_t)codec_get_u64(r->base + r->pos);
        ch.new_rowid = (int64_t)codec_get_u64(r->base + r->pos + 8);
        ch.n_cols = codec_get_u16(r->base + r->pos + 16);
        if (ch.n_cols == 0) {
            return bad(r, "column count", 0);
        }
        r->pos += 18;
        if (kind != SQL_CHANGE_INSERT) {
            if (values != NULL) {
                ch.old_row = values + *n_values;
            }
            rc = read_row(r, ch.n_cols, ch.old_row, "old row");
            if (rc != 0) {
                return rc;
            }
            *n_values += ch.n_cols;
        }
        if (kind != SQL_CHANGE_DELETE) {
            if (values != NULL) {
                ch.new_row = values + *n_values;
            }
            rc = read_row(r, ch.n_cols, ch.new_row, "new row");
            if (rc != 0) {
                return rc;
            }
            *n_values += ch.n_cols;
        }
    }
    if (out != NULL) {
        *out = ch;
    }
    return 0;
}

/* read_records reads the @n records after the header: checks them and
 * counts their values in *@n_values when @changes is NULL, else fills
 * @changes and @values. */
static int read_records(struct reader *r, uint32_t n,
                        struct sql_change *changes, struct sql_value *values,
                        uint64_t *n_values)
{
    uint32_t i;
    int rc;

    r->pos = SQL_CHANGESET_HEADER;
    *n_values = 0;
    for (i = 0; i < n; i++) {
        r->record = i + 1;
        rc = read_record(r, changes != NULL ? &changes[i] : NULL, values,
                         n_values);
        if (rc != 0) {
            return rc;
        }
    }
    if (r->pos != r->len) {
        sql_errmsgf(r->errmsg, r->errmsg_len,
                    "bad changeset: %zu trailing bytes after record %" PRIu32,
                    r->len - r->pos, n);
        return SQL_ERR_CORRUPT;
    }
    return 0;
}

/* check_header validates the fixed header and gives the record count. */
static int check_header(const uint8_t *b, size_t len, uint32_t *out_n,
                        char *errmsg, size_t errmsg_len)
{
    uint32_t n;

    if (!sql_changeset_is(b, len)) {
        sql_errmsgf(errmsg, errmsg_len,
                    "not a changeset payload (too short or bad magic)");
        return SQL_ERR_CORRUPT;
    }
    if (len <= SQL__CHANGESET_OFF_VERSION) {
        sql_errmsgf(errmsg, errmsg_len,
                    "truncated changeset: %zu bytes, header needs %d", len,
                    SQL_CHANGESET_HEADER);
        return SQL_ERR_CORRUPT;
    }
    if (b[SQL__CHANGESET_OFF_VERSION] != SQL__CHANGESET_VERSION) {
        sql_errmsgf(errmsg, errmsg_len,
                    "changeset format version %u is not supported "
                    "(expected %d)",
                    (unsigned)b[SQL__CHANGESET_OFF_VERSION],
                    SQL__CHANGESET_VERSION);
        return SQL_ERR_FORMAT;
    }
    if (len < SQL_CHANGESET_HEADER) {
        sql_errmsgf(errmsg, errmsg_len,
                    "truncated changeset: %zu bytes, header needs %d", len,
                    SQL_CHANGESET_HEADER);
        return SQL_ERR_CORRUPT;
    }
    if (b[SQL__CHANGESET_OFF_FLAGS] != 0) {
        sql_errmsgf(errmsg, errmsg_len, "changeset flags 0x%02x are not known",
                    (unsigned)b[SQL__CHANGESET_OFF_FLAGS]);
        return SQL_ERR_CORRUPT;
    }
    n = codec_get_u32(b + SQL__CHANGESET_OFF_N_RECORDS);
    /* Refuse a count the payload cannot hold before allocating for it. */
    if ((uint64_t)n * SQL__CHANGE_MIN > len - SQL_CHANGESET_HEADER) {
        sql_errmsgf(errmsg, errmsg_len,
                    "truncated changeset: %" PRIu32
                    " records cannot fit in the %zu bytes left",
                    n, len - SQL_CHANGESET_HEADER);
        return SQL_ERR_CORRUPT;
    }
    *out_n = n;
    return 0;
}

int sql_changeset_decode(const void *p, size_t len, struct sql_changeset *out,
                         char *errmsg, size_t errmsg_len)
{
    struct reader r = {p, len, 0, 0, errmsg, errmsg_len};
    struct sql_changeset cs;
    uint64_t n_values = 0;
    uint32_t n;
    int rc;

    rc = check_header(p, len, &n, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    rc = read_records(&r, n, NULL, NULL, &n_values);
    if (rc != 0) {
        return rc;
    }
    memset(&cs, 0, sizeof cs);
    cs.id[0] = codec_get_u64(r.base + SQL__CHANGESET_OFF_ID);
    cs.id[1] = codec_get_u64(r.base + SQL__CHANGESET_OFF_ID + 8);
    cs.lease = codec_get_u64(r.base + SQL__CHANGESET_OFF_LEASE);
    cs.n = n;
    cs.changes = calloc(n + 1, sizeof *cs.changes); /* n may be 0 */
    if (n_values > 0) {
        cs.values = calloc((size_t)n_values, sizeof *cs.values);
    }
    if (cs.changes == NULL || (n_values > 0 && cs.values == NULL)) {
        sql_errmsgf(errmsg, errmsg_len,
                    "out of memory (%" PRIu32 " records, %" PRIu64 " values)",
                    n, n_values);
        sql_changeset_free(&cs);
        return SQL_ERR_NOMEM;
    }
    /* Checked above: this pass only fills. */
    rc = read_records(&r, n, cs.changes, cs.values, &n_values);
    if (rc != 0) {
        sql_changeset_free(&cs);
        return rc;
    }
    *out = cs;
    return 0;
}

void sql_changeset_free(struct sql_changeset *cs)
{
    if (cs == NULL) {
        return;
    }
    free(cs->changes);
    free(cs->values);
    memset(cs, 0, sizeof *cs);
}
