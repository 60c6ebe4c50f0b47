/* The attach socket's codec (attach_codec.h): calls and answers as JSON
 * texts, every value typed so that integers stay integers and blobs
 * round-trip. */

#include "attach_codec.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/err.h"

/* fail writes a message into @errmsg and returns RAFT_PROTO. */
static int fail(char *errmsg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *errmsg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, len, fmt, ap);
    va_end(ap);
    return RAFT_PROTO;
}

/* hex_new returns @len bytes @p in hex as a JSON string, or NULL. */
static json_t *hex_new(const void *p, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = p;
    char *s = malloc(len * 2 + 1);
    json_t *j;
    if (s == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = digits[b[i] >> 4];
        s[2 * i + 1] = digits[b[i] & 15];
    }
    j = json_stringn(s, len * 2);
    free(s);
    return j;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

/* tagged_new returns {@tag: @inner}, or NULL (taking @inner). */
static json_t *tagged_new(const char *tag, json_t *inner)
{
    json_t *o = inner != NULL ? json_object() : NULL;
    if (o == NULL || json_object_set_new(o, tag, inner) != 0) {
        json_decref(inner);
        json_decref(o);
        return NULL;
    }
    return o;
}

/* value_new encodes @v; NULL when out of memory or of no known type. */
static json_t *value_new(const struct sql_value *v)
{
    json_t *j;
    switch (v->type) {
        case SQL_NULL:
            return json_null();
        case SQL_INTEGER:
            return json_integer((json_int_t)v->integer);
        case SQL_FLOAT:
            if (isfinite(v->real)) {
                return json_real(v->real);
            }
            return tagged_new("r", json_string(v->real > 0 ? "inf" : "-inf"));
        case SQL_TEXT:
            j = json_stringn(v->bytes.len > 0 ? v->bytes.p : "", v->bytes.len);
            if (j != NULL) {
                return j;
            }
            return tagged_new("t", hex_new(v->bytes.p, v->bytes.len));
        case SQL_BLOB:
            return tagged_new("b", hex_new(v->bytes.p, v->bytes.len));
        default:
            return NULL;
    }
}

/* bytes_dup copies @len bytes of @p into @v's bytes (NUL-terminated). */
static int bytes_dup(struct sql_value *v, const char *p, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return RAFT_NOMEM;
    }
    memcpy(copy, p, len);
    copy[len] = '\0';
    v->bytes.p = copy;
    v->bytes.len = len;
    return 0;
}

/* hex_dup decodes the hex string @j into @v's bytes. */
static int hex_dup(struct sql_value *v, json_t *j, char *errmsg, size_t len)
{
    const char *s = json_string_value(j);
    size_t n = json_string_length(j);
    unsigned char *out;
    if (s == NULL || n % 2 != 0) {
        return fail(errmsg, len, "a blob or text value is not hex");
    }
    out = malloc(n / 2 + 1);
    if (out == NULL) {
        return RAFT_NOMEM;
    }
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return fail(errmsg, len, "a blob or text value is not hex");
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    out[n / 2] = '\0';
    v->bytes.p = out;
    v->bytes.len = n / 2;
    return 0;
}

/* value_decode decodes @j into @v (its bytes malloc'd). */
static int value_decode(json_t *j, struct sql_value *v, char *errmsg,
                        size_t len)
{
    json_t *inner;
    const char *tag;
    void *it;
    memset(v, 0, sizeof *v);
    if (json_is_null(j)) {
        v->type = SQL_NULL;
        return 0;
    }
    if (json_is_integer(j)) {
        v->type = SQL_INTEGER;
        v->integer = (int64_t)json_integer_value(j);
        return 0;
    }
    if (json_is_real(j)) {
        v->type = SQL_FLOAT;
        v->real = json_real_value(j);
        return 0;
    }
    if (json_is_string(j)) {
        v->type = SQL_TEXT;
        return bytes_dup(v, json_string_value(j), json_string_length(j));
    }
    if (!json_is_object(j) || json_object_size(j) != 1) {
        return fail(errmsg, len, "a value is of no known type");
    }
    it = json_object_iter(j);
    tag = json_object_iter_key(it);
    inner = json_object_iter_value(it);
    if (strcmp(tag, "b") == 0 || strcmp(tag, "t") == 0) {
        v->type = tag[0] == 'b' ? SQL_BLOB : SQL_TEXT;
        return hex_dup(v, inner, errmsg, len);
    }
    if (strcmp(tag, "r") == 0 && json_is_string(inner)) {
        const char *s = json_string_value(inner);
        if (strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0) {
            v->type = SQL_FLOAT;
            v->real = s[0] == '-' ? -INFINITY : INFINITY;
            return 0;
        }
    }
    return fail(errmsg, len, "a value is of no known type");
}

void attach_codec_values_free(struct sql_value *v, unsigned n)
{
    for (unsigned i = 0; v != NULL && i < n; i++) {
        if (v[i].type == SQL_TEXT || v[i].type == SQL_BLOB) {
            free((void *)v[i].bytes.p);
        }
    }
    free(v);
}

/* values_new encodes @n values @v as a JSON array, or NULL. */
static json_t *values_new(const struct sql_value *v, unsigned n)
{
    json_t *a = json_array();
    for (unsigned i = 0; a != NULL && i < n; i++) {
        if (json_array_append_new(a, value_new(&v[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* values_decode decodes the JSON array @a (at most @max values) into
 * *@out (malloc'd) and *@out_n. */
static int values_decode(json_t *a, unsigned max, struct sql_value **out,
                         unsigned *out_n, char *errmsg, size_t len)
{
    size_t n = json_array_size(a);
    struct sql_value *v;
    int rc = 0;
    if (!json_is_array(a) || n > max) {
        return fail(errmsg, len, "the values are no array of at most %u", max);
    }
    v = calloc(n > 0 ? n : 1, sizeof *v);
    if (v == NULL) {
        return RAFT_NOMEM;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = value_decode(json_array_get(a, i), &v[i], errmsg, len);
    }
    if (rc != 0) {
        attach_codec_values_free(v, (unsigned)n);
        return rc;
    }
    *out = v;
    *out_n = (unsigned)n;
    return 0;
}

/* dump writes @root (taken) as compact JSON into *@out, *@out_len. */
static int dump(json_t *root, char **out, size_t *out_len)
{
    char *s =
        root != NULL ? json_dumps(root, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(root);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    *out = s;
    *out_len = strlen(s);
    return 0;
}

/* load parses @data (@len bytes) as one JSON object. */
static json_t *load(const char *data, size_t len, char *errmsg, size_t n)
{
    json_error_t e;
    json_t *root = json_loadb(data, len, JSON_ALLOW_NUL, &e);
    if (root == NULL) {
        fail(errmsg, n, "not JSON: %s", e.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        fail(errmsg, n, "not a JSON object");
        return NULL;
    }
    return root;
}

int attach_codec_call_encode(const char *fn, const struct sql_value *args,
                             unsigned n_args, char **out, size_t *out_len)
{
    json_t *root, *a;
    size_t fn_len = strlen(fn);
    if (fn_len == 0 || fn_len >= EXT_ATTACH_FN_MAX ||
        n_args > EXT_ATTACH_ARGS_MAX) {
        return RAFT_INVALID;
    }
    for (unsigned i = 0; i < n_args; i++) {
        if (args[i].type < SQL_INTEGER || args[i].type > SQL_NULL) {
            return RAFT_INVALID;
        }
    }
    a = values_new(args, n_args);
    root = a != NULL ? json_pack("{s:s, s:o}", "fn", fn, "args", a) : NULL;
    return dump(root, out, out_len);
}

int attach_codec_call_decode(const char *data, size_t len,
                             char out_fn[EXT_ATTACH_FN_MAX],
                             struct sql_value **out_args, unsigned *out_n,
                             char *errmsg, size_t errmsg_len)
{
    json_t *root = load(data, len, errmsg, errmsg_len);
    json_t *fn;
    int rc;
    if (root == NULL) {
        return RAFT_PROTO;
    }
    fn = json_object_get(root, "fn");
    if (!json_is_string(fn) || json_string_length(fn) == 0 ||
        json_string_length(fn) >= EXT_ATTACH_FN_MAX ||
        strlen(json_string_value(fn)) != json_string_length(fn)) {
        rc = fail(errmsg, errmsg_len, "no function name, or a bad one");
    } else {
        rc = values_decode(json_object_get(root, "args"), EXT_ATTACH_ARGS_MAX,
                           out_args, out_n, errmsg, errmsg_len);
        if (rc == 0) {
            memcpy(out_fn, json_string_value(fn), json_string_length(fn) + 1);
        }
    }
    json_decref(root);
    return rc;
}

int attach_codec_answer_encode(const struct ext_attach_answer *a, char **out,
                               size_t *out_len)
{
    json_t *root;
    if (!a->ok) {
        root = json_pack("{s:b, s:i, s:s}", "ok", 0, "code", a->code, "err",
                         a->errmsg);
        return dump(root, out, out_len);
    }
    if (a->cells != NULL) {
        size_t n = (size_t)a->n_rows * a->n_cols;
        json_t *cells;
        if (n > EXT_ATTACH_CELLS_MAX) {
            return RAFT_INVALID;
        }
        cells = values_new(a->cells, (unsigned)n);
        root = cells != NULL ? json_pack("{s:b, s:I, s:i, s:o}", "ok", 1,
                                         "rowid", (json_int_t)a->rowid, "cols",
                                         (int)a->n_cols, "cells", cells)
                             : NULL;
        return dump(root, out, out_len);
    }
    if (a->value.type < SQL_INTEGER || a->value.type > SQL_NULL) {
        return RAFT_INVALID;
    }
    root = json_pack("{s:b, s:I, s:o}", "ok", 1, "rowid", (json_int_t)a->rowid,
                     "v", value_new(&a->value));
    return dump(root, out, out_len);
}

/* answer_fill decodes the fields of @root into @out. */
static int answer_fill(json_t *root, struct ext_attach_answer *out,
                       char *errmsg, size_t len)
{
    json_t *ok = json_object_get(root, "ok");
    json_t *j;
    if (!json_is_boolean(ok)) {
        return fail(errmsg, len, "no ok field");
    }
    out->ok = json_is_true(ok);
    if (!out->ok) {
        json_t *code = json_object_get(root, "code");
        j = json_object_get(root, "err");
        if (!json_is_integer(code) || !json_is_string(j)) {
            return fail(errmsg, len, "an error without code or text");
        }
        out->code = (int)json_integer_value(code);
        snprintf(out->errmsg, sizeof out->errmsg, "%s", json_string_value(j));
        return 0;
    }
    j = json_object_get(root, "rowid");
    if (!json_is_integer(j)) {
        return fail(errmsg, len, "no rowid");
    }
    out->rowid = (int64_t)json_integer_value(j);
    j = json_object_get(root, "cells");
    if (j != NULL) {
        json_t *cols = json_object_get(root, "cols");
        unsigned n = 0;
        int rc;
        if (!json_is_integer(cols) || json_integer_value(cols) <= 0 ||
            json_integer_value(cols) > EXT_ATTACH_CELLS_MAX) {
            return fail(errmsg, len, "a table without its column count");
        }
        struct sql_value *cells = NULL;
        rc = values_decode(j, EXT_ATTACH_CELLS_MAX, &cells, &n, errmsg, len);
        if (rc != 0) {
            return rc;
        }
        if (n % (unsigned)json_integer_value(cols) != 0) {
            attach_codec_values_free(cells, n);
            return fail(errmsg, len, "a table with a partial row");
        }
        out->cells = cells;
        out->n_cols = (unsigned)json_integer_value(cols);
        out->n_rows = n / out->n_cols;
        return 0;
    }
    j = json_object_get(root, "v");
    if (j == NULL) {
        return fail(errmsg, len, "no value");
    }
    return value_decode(j, &out->value, errmsg, len);
}

int attach_codec_answer_decode(const char *data, size_t len,
                               struct ext_attach_answer *out, char *errmsg,
                               size_t errmsg_len)
{
    json_t *root = load(data, len, errmsg, errmsg_len);
    int rc;
    memset(out, 0, sizeof *out);
    out->value.type = SQL_NULL;
    if (root == NULL) {
        return RAFT_PROTO;
    }
    rc = answer_fill(root, out, errmsg, errmsg_len);
    json_decref(root);
    if (rc != 0) {
        attach_codec_answer_free(out);
    }
    return rc;
}

void attach_codec_answer_free(struct ext_attach_answer *a)
{
    attach_codec_values_free(a->cells, a->n_rows * a->n_cols);
    if (a->value.type == SQL_TEXT || a->value.type == SQL_BLOB) {
        free((void *)a->value.bytes.p);
    }
    a->cells = NULL;
    a->n_rows = a->n_cols = 0;
    a->value.type = SQL_NULL;
}
