/* The replica checksum's canonical row encoding and hash (checksum.h),
 * shared by the pre-update hook and the full scan, the listing of the
 * tables it covers, and the scan of one table. Any connection. */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>
#include <xxhash.h>

#include "checksum.h"

SQLITE_EXTENSION_INIT3

/* The sqlite_* tables the hook never sees but that hold replicated
 * content: recomputed by a scan after a request that may write them. */
static const char *const scanned_system[] = {"sqlite_sequence", "sqlite_stat1",
                                             "sqlite_stat4"};

uint64_t checksum_seed(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

/* reserve makes room for @n more bytes in @b. */
static bool reserve(struct checksum_buf *b, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap == 0 ? 256 : b->cap;
        unsigned char *p;
        while (cap < b->len + n) {
            cap *= 2;
        }
        p = realloc(b->p, cap);
        if (p == NULL) {
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    return true;
}

static void put_u64(struct checksum_buf *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        b->p[b->len++] = (unsigned char)(v >> (8 * i));
    }
}

static void put_u32(struct checksum_buf *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        b->p[b->len++] = (unsigned char)(v >> (8 * i));
    }
}

/* whole_i64 says whether @d is a whole number in the range of an i64
 * (then it is encoded as that INTEGER: SQLite hands a REAL column's
 * whole values to the hook as integers or reals, depending on the
 * path). */
static bool whole_i64(double d, int64_t *out)
{
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) ||
        floor(d) != d) {
        return false;
    }
    *out = (int64_t)d;
    return true;
}

/* put_parts appends the encoding of a value of SQLite type @type
 * (SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, else NULL):
 * @i, @d, or the @n bytes at @p. */
static bool put_parts(struct checksum_buf *b, int type, int64_t i, double d,
                      const void *p, size_t n)
{
    int64_t w;

    switch (type) {
        case SQLITE_INTEGER:
            if (!reserve(b, 9)) {
                return false;
            }
            b->p[b->len++] = 1;
            put_u64(b, (uint64_t)i);
            return true;
        case SQLITE_FLOAT:
            if (!reserve(b, 9)) {
                return false;
            }
            if (whole_i64(d, &w)) {
                b->p[b->len++] = 1;
                put_u64(b, (uint64_t)w);
            } else {
                uint64_t bits;
                memcpy(&bits, &d, sizeof bits);
                b->p[b->len++] = 2;
                put_u64(b, bits);
            }
            return true;
        case SQLITE_TEXT:
        case SQLITE_BLOB:
            if ((p == NULL && n > 0) || n > UINT32_MAX || !reserve(b, 5 + n)) {
                return false;
            }
            b->p[b->len++] = type == SQLITE_TEXT ? 3 : 4;
            put_u32(b, (uint32_t)n);
            if (n > 0) {
                memcpy(b->p + b->len, p, n);
                b->len += n;
            }
            return true;
        default:
            if (!reserve(b, 1)) {
                return false;
            }
            b->p[b->len++] = 5;
            return true;
    }
}

/* put_value appends the encoding of @v. */
static bool put_value(struct checksum_buf *b, sqlite3_value *v)
{
    int type = v == NULL ? SQLITE_NULL : sqlite3_value_type(v);
    const void *p = NULL;
    int n = 0;

    if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
        p = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(v)
                                : sqlite3_value_blob(v);
        n = sqlite3_value_bytes(v);
    }
    return put_parts(
        b, type, type == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0,
        type == SQLITE_FLOAT ? sqlite3_value_double(v) : 0.0, p, (size_t)n);
}

/* put_sql_value appends the encoding of @v, a decoded value (sql.h). */
static bool put_sql_value(struct checksum_buf *b, const struct sql_value *v)
{
    switch (v->type) {
        case SQL_INTEGER:
            return put_parts(b, SQLITE_INTEGER, v->integer, 0.0, NULL, 0);
        case SQL_FLOAT:
            return put_parts(b, SQLITE_FLOAT, 0, v->real, NULL, 0);
        case SQL_TEXT:
            return put_parts(b, SQLITE_TEXT, 0, 0.0, v->bytes.p, v->bytes.len);
        case SQL_BLOB:
            return put_parts(b, SQLITE_BLOB, 0, 0.0, v->bytes.p, v->bytes.len);
        default:
            return put_parts(b, SQLITE_NULL, 0, 0.0, NULL, 0);
    }
}

uint64_t checksum_row_hash_values(struct checksum_buf *b, uint64_t seed,
                                  int64_t rowid, const struct sql_value *values,
                                  unsigned n, bool *ok)
{
    b->len = 0;
    if (!reserve(b, 12)) {
        *ok = false;
        return 0;
    }
    put_u64(b, (uint64_t)rowid);
    put_u32(b, (uint32_t)n);
    for (unsigned i = 0; i < n; i++) {
        if (!put_sql_value(b, &values[i])) {
            *ok = false;
            return 0;
        }
    }
    return XXH3_64bits_withSeed(b->p, b->len, seed);
}

uint64_t checksum_row_hash(struct checksum_buf *b, uint64_t seed,
                           sqlite3_int64 rowid, sqlite3_value **values, int n,
                           bool *ok)
{
    b->len = 0;
    if (!reserve(b, 12)) {
        *ok = false;
        return 0;
    }
    put_u64(b, (uint64_t)rowid);
    put_u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        if (!put_value(b, values[i])) {
            *ok = false;
            return 0;
        }
    }
    return XXH3_64bits_withSeed(b->p, b->len, seed);
}

int checksum_kind_of(const char *name, const char *type)
{
    if (name == NULL || strncasecmp(name, "raftsql_", 8) == 0) {
        return CHECKSUM_IGNORED;
    }
    for (size_t i = 0; i < sizeof scanned_system / sizeof *scanned_system;
         i++) {
        if (strcasecmp(name, scanned_system[i]) == 0) {
            return CHECKSUM_SCAN;
        }
    }
    if (strncasecmp(name, "sqlite_", 7) == 0) {
        return CHECKSUM_IGNORED; /* sqlite_schema and the like */
    }
    if (type == NULL) {
        return CHECKSUM_UNRESOLVED;
    }
    return strcmp(type, "table") == 0 ? CHECKSUM_ROWS : CHECKSUM_IGNORED;
}

int checksum_list(sqlite3 *db,
                  int (*cb)(void *data, const struct checksum_listed *t),
                  void *data)
{
    static const char sql[] =
        "SELECT l.name, l.type, l.wr,"
        " (SELECT count(*) FROM pragma_table_xinfo(l.name, 'main') x"
        "   WHERE x.hidden IN (2, 3)),"
        " (SELECT s.sql LIKE '%AUTOINCREMENT%' FROM main.sqlite_schema s"
        "   WHERE s.type = 'table' AND s.name = l.name)"
        " FROM pragma_table_list l WHERE l.schema = 'main'"
        " AND l.type = 'table'";
    sqlite3_stmt *s = NULL;
    int rc;

    rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct checksum_listed t;
        t.name = (const char *)sqlite3_column_text(s, 0);
        if (t.name == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        t.kind =
            checksum_kind_of(t.name, (const char *)sqlite3_column_text(s, 1));
        if (t.kind == CHECKSUM_IGNORED) {
            rc = SQLITE_OK;
            continue;
        }
        t.rowid = sqlite3_column_int(s, 2) == 0;
        if (t.kind == CHECKSUM_ROWS && sqlite3_column_int(s, 3) > 0) {
            t.kind = CHECKSUM_SCAN; /* the hook misreads generated columns */
        }
        t.autoinc = sqlite3_column_int(s, 4) != 0;
        rc = cb(data, &t);
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

int checksum_scan(sqlite3 *db, struct checksum_buf *b, const char *name,
                  bool rowid, uint64_t *out)
{
    uint64_t seed = checksum_seed(name), sum = 0;
    sqlite3_value *stack[16], **values = stack;
    sqlite3_stmt *s = NULL;
    char *sql;
    int rc, n;

    sql = sqlite3_mprintf("SELECT %s, * FROM main.\"%w\"",
                          rowid ? "rowid" : "0", name);
    if (sql == NULL) {
        return SQLITE_NOMEM;
    }
    rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) {
        /* A table that is gone sums to 0. */
        int gone = sqlite3_errcode(db) == SQLITE_ERROR &&
                   strstr(sqlite3_errmsg(db), "no such table") != NULL;
        sqlite3_finalize(s);
        if (gone) {
            *out = 0;
            return SQLITE_OK;
        }
        return rc;
    }
    n = sqlite3_column_count(s) - 1;
    if (n > (int)(sizeof stack / sizeof *stack)) {
        values = malloc((size_t)n * sizeof *values);
        if (values == NULL) {
            sqlite3_finalize(s);
            return SQLITE_NOMEM;
        }
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bool ok = true;
        for (int i = 0; i < n; i++) {
            values[i] = sqlite3_column_value(s, i + 1);
        }
        sum += checksum_row_hash(b, seed, sqlite3_column_int64(s, 0), values, n,
                                 &ok);
        if (!ok) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        *out = sum;
    }
    if (values != stack) {
        free(values);
    }
    sqlite3_finalize(s);
    return rc;
}

bool checksum_sums_put(struct checksum_buf *b, const char *name, uint64_t sum,
                       bool pinned)
{
    size_t n = name != NULL ? strlen(name) : 0;

    if (name == NULL) {
        if (!reserve(b, 1)) {
            return false;
        }
        b->p[b->len++] = 1;
        return true;
    }
    if (n > UINT16_MAX || !reserve(b, 2 + n + 9)) {
        return false;
    }
    b->p[b->len++] = (unsigned char)n;
    b->p[b->len++] = (unsigned char)(n >> 8);
    memcpy(b->p + b->len, name, n);
    b->len += n;
    put_u64(b, sum);
    b->p[b->len++] = pinned ? 1 : 0;
    return true;
}

int checksum_sums_each(const void *p, size_t len,
                       int (*cb)(void *data, const char *name, uint64_t sum,
                                 bool pinned),
                       void *data)
{
    const unsigned char *s = p, *end = s + len;
    char name[UINT16_MAX + 1];

    if (len < 1 || s[0] != 1) {
        return -1;
    }
    s++;
    while (s < end) {
        size_t n;
        uint64_t sum = 0;
        int rc;
        if (end - s < 2) {
            return -1;
        }
        n = (size_t)s[0] | (size_t)s[1] << 8;
        s += 2;
        if ((size_t)(end - s) < n + 9 || s[n + 8] > 1) {
            return -1;
        }
        memcpy(name, s, n);
        name[n] = '\0';
        s += n;
        for (int i = 0; i < 8; i++) {
            sum |= (uint64_t)s[i] << (8 * i);
        }
        rc = cb(data, name, sum, s[8] == 1);
        s += 9;
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}
