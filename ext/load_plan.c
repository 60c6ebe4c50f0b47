/* The plan of raft_load_sql (load_plan.h): statements, chunks, ids.
 *
 * One pass over the script: a small lexer skips whitespace and comments
 * between statements and, inside one, quoted text and comments, so that
 * only a ';' that may end it is offered to sqlite3_complete (which keeps
 * a trigger's body whole). Linear in the script but for triggers, whose
 * every inner ';' costs one sqlite3_complete of the statement so far. */

#include "load_plan.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include <sqlite3ext.h>

#include "../raft/err.h"

SQLITE_EXTENSION_INIT3

/* The lexer's state over one script. */
struct lexer {
    const char *text; /* the script */
    size_t len;       /* its bytes */
    size_t pos;       /* next byte */
    unsigned line;    /* line of @pos, from 1 */
    char *buf;        /* NUL-terminated copy for sqlite3_complete */
    size_t buf_cap;   /* its size */
};

/* advance moves @lx one byte on, counting lines. */
static void advance(struct lexer *lx)
{
    if (lx->text[lx->pos] == '\n') {
        lx->line++;
    }
    lx->pos++;
}

/* skip_comment skips the comment at @lx->pos, if one starts there, and
 * returns whether it did. An unterminated C-style one runs to the end. */
static bool skip_comment(struct lexer *lx)
{
    const char *t = lx->text;
    if (lx->pos + 1 < lx->len && t[lx->pos] == '-' && t[lx->pos + 1] == '-') {
        while (lx->pos < lx->len && t[lx->pos] != '\n') {
            advance(lx);
        }
        return true;
    }
    if (lx->pos + 1 < lx->len && t[lx->pos] == '/' && t[lx->pos + 1] == '*') {
        advance(lx);
        advance(lx);
        while (lx->pos < lx->len &&
               !(t[lx->pos] == '*' && lx->pos + 1 < lx->len &&
                 t[lx->pos + 1] == '/')) {
            advance(lx);
        }
        if (lx->pos < lx->len) {
            advance(lx);
            advance(lx);
        }
        return true;
    }
    return false;
}

/* skip_gap skips whitespace, comments and empty statements (';'). */
static void skip_gap(struct lexer *lx)
{
    while (lx->pos < lx->len) {
        char c = lx->text[lx->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
            c == '\v' || c == ';') {
            advance(lx);
        } else if (!skip_comment(lx)) {
            return;
        }
    }
}

/* complete tells whether text[@start, @end) plus @suffix is complete SQL
 * (sqlite3_complete). Returns -1 when out of memory. */
static int complete(struct lexer *lx, size_t start, size_t end,
                    const char *suffix)
{
    size_t n = end - start, extra = strlen(suffix);
    if (n + extra + 1 > lx->buf_cap) {
        size_t cap = (n + extra + 1) * 2;
        char *b = realloc(lx->buf, cap);
        if (b == NULL) {
            return -1;
        }
        lx->buf = b;
        lx->buf_cap = cap;
    }
    memcpy(lx->buf, lx->text + start, n);
    memcpy(lx->buf + n, suffix, extra + 1);
    return sqlite3_complete(lx->buf) ? 1 : 0;
}

/* Outcomes of scan_statement. */
enum { SCAN_END = 1, SCAN_OPEN_END = 2, SCAN_INCOMPLETE = 3, SCAN_NUL = 4 };

/* scan_statement moves @lx past the statement that starts at its
 * position: to just after its ';' (SCAN_END), or to the end of a last
 * statement completed by a ";" (SCAN_OPEN_END); else SCAN_INCOMPLETE,
 * SCAN_NUL (at @lx->pos), or -1 when out of memory. */
static int scan_statement(struct lexer *lx, size_t start)
{
    const char *t = lx->text;
    while (lx->pos < lx->len) {
        char c = t[lx->pos];
        if (c == '\0') {
            return SCAN_NUL;
        }
        if (c == '\'' || c == '"' || c == '`' || c == '[') {
            char close = c == '[' ? ']' : c;
            advance(lx);
            while (lx->pos < lx->len && t[lx->pos] != close) {
                if (t[lx->pos] == '\0') {
                    return SCAN_NUL;
                }
                advance(lx);
            }
            if (lx->pos < lx->len) {
                advance(lx);
            }
            continue;
        }
        if (skip_comment(lx)) {
            continue;
        }
        advance(lx);
        if (c == ';') {
            int k = complete(lx, start, lx->pos, "");
            if (k != 0) {
                return k < 0 ? -1 : SCAN_END;
            }
        }
    }
    switch (complete(lx, start, lx->len, "\n;")) {
        case 1:
            return SCAN_OPEN_END;
        case 0:
            return SCAN_INCOMPLETE;
        default:
            return -1;
    }
}

/* Kinds of statement, by their first keyword. */
enum { KIND_OTHER = 0, KIND_SKIP = 1, KIND_REFUSE = 2, KIND_ALONE = 3 };

/* kind_of classifies the statement at @p (@len bytes) by its first word:
 * BEGIN, COMMIT, END (left out); ROLLBACK, SAVEPOINT, RELEASE (refused);
 * PRAGMA (a chunk of its own); anything else. *@out_word gets the word
 * (up to 15 letters). */
static int kind_of(const char *p, size_t len, char out_word[16])
{
    static const char *const skip[] = {"BEGIN", "COMMIT", "END"};
    static const char *const refuse[] = {"ROLLBACK", "SAVEPOINT", "RELEASE"};
    size_t n = 0;
    while (n < len && n < 15 &&
           ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z'))) {
        out_word[n] = p[n];
        n++;
    }
    out_word[n] = '\0';
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(out_word, skip[i]) == 0) {
            return KIND_SKIP;
        }
        if (strcasecmp(out_word, refuse[i]) == 0) {
            return KIND_REFUSE;
        }
    }
    return strcasecmp(out_word, "PRAGMA") == 0 ? KIND_ALONE : KIND_OTHER;
}

/* stmt_bytes is the length of statement @s in a chunk's SQL: an open
 * last statement gets "\n;". */
static size_t stmt_bytes(const struct ext_load_stmt *s)
{
    return s->len + (s->open_end ? 2 : 0);
}

/* add_stmt appends @s to @p's statements. */
static int add_stmt(struct ext_load_plan *p, unsigned *cap,
                    const struct ext_load_stmt *s)
{
    if (p->n_stmts == *cap) {
        unsigned n = *cap != 0 ? *cap * 2 : 64;
        struct ext_load_stmt *a = realloc(p->stmts, n * sizeof *a);
        if (a == NULL) {
            return RAFT_NOMEM;
        }
        p->stmts = a;
        *cap = n;
    }
    p->stmts[p->n_stmts++] = *s;
    return 0;
}

/* split fills @p's statements from @lx. */
static int split(struct lexer *lx, struct ext_load_plan *p, char *errmsg,
                 size_t errmsg_len)
{
    unsigned cap = 0;
    for (;;) {
        struct ext_load_stmt s;
        char word[16];
        int r, kind;
        skip_gap(lx);
        if (lx->pos >= lx->len) {
            return 0;
        }
        s.offset = lx->pos;
        s.line = lx->line;
        s.open_end = false;
        s.alone = false;
        r = scan_statement(lx, s.offset);
        if (r < 0) {
            snprintf(errmsg, errmsg_len, "out of memory");
            return RAFT_NOMEM;
        }
        if (r == SCAN_NUL) {
            snprintf(errmsg, errmsg_len,
                     "line %u: a NUL byte (is it a text file?)", lx->line);
            return RAFT_INVALID;
        }
        if (r == SCAN_INCOMPLETE) {
            snprintf(errmsg, errmsg_len,
                     "line %u: the last statement is incomplete (an open "
                     "quote, comment or CREATE TRIGGER without its END;)",
                     s.line);
            return RAFT_INVALID;
        }
        s.len = lx->pos - s.offset;
        s.open_end = r == SCAN_OPEN_END;
        kind = kind_of(lx->text + s.offset, s.len, word);
        if (kind == KIND_REFUSE) {
            snprintf(errmsg, errmsg_len,
                     "line %u: %s: a script's own savepoints and rollbacks "
                     "cannot hold across its chunks (each chunk is one "
                     "transaction); remove them",
                     s.line, word);
            return RAFT_INVALID;
        }
        if (kind == KIND_SKIP) {
            p->n_skipped++;
            continue;
        }
        s.alone = kind == KIND_ALONE;
        if (add_stmt(p, &cap, &s) != 0) {
            snprintf(errmsg, errmsg_len, "out of memory");
            return RAFT_NOMEM;
        }
    }
}

/* group makes @p's chunks from its statements. */
static int group(struct ext_load_plan *p)
{
    unsigned cap = 0;
    for (unsigned i = 0; i < p->n_stmts; i++) {
        size_t b = stmt_bytes(&p->stmts[i]);
        struct ext_load_chunk *c =
            p->n_chunks > 0 ? &p->chunks[p->n_chunks - 1] : NULL;
        if (c != NULL && c->n < p->chunk_stmts &&
            c->bytes + 1 + b <= p->chunk_bytes && !p->stmts[i].alone &&
            !p->stmts[c->first].alone) {
            c->n++;
            c->bytes += 1 + b;
            continue;
        }
        if (p->n_chunks == cap) {
            unsigned n = cap != 0 ? cap * 2 : 16;
            struct ext_load_chunk *a = realloc(p->chunks, n * sizeof *a);
            if (a == NULL) {
                return RAFT_NOMEM;
            }
            p->chunks = a;
            cap = n;
        }
        p->chunks[p->n_chunks++] =
            (struct ext_load_chunk){.first = i, .n = 1, .bytes = b};
    }
    return 0;
}

/* chain computes each chunk's link of the id chain (ext_load_chunk). */
static int chain(struct ext_load_plan *p, const char *text)
{
    XXH3_state_t *st = XXH3_createState();
    XXH128_canonical_t prev;

    if (st == NULL) {
        return RAFT_NOMEM;
    }
    memset(&prev, 0, sizeof prev);
    for (unsigned k = 0; k < p->n_chunks; k++) {
        struct ext_load_chunk *c = &p->chunks[k];
        unsigned char ordinal[8];
        for (unsigned b = 0; b < 8; b++) {
            ordinal[b] = (unsigned char)((uint64_t)k >> (8 * b));
        }
        XXH3_128bits_reset(st);
        XXH3_128bits_update(st, &prev, sizeof prev);
        XXH3_128bits_update(st, ordinal, sizeof ordinal);
        for (unsigned i = c->first; i < c->first + c->n; i++) {
            const struct ext_load_stmt *s = &p->stmts[i];
            if (i > c->first) {
                XXH3_128bits_update(st, "\n", 1);
            }
            XXH3_128bits_update(st, text + s->offset, s->len);
            if (s->open_end) {
                XXH3_128bits_update(st, "\n;", 2);
            }
        }
        XXH128_canonicalFromHash(&prev, XXH3_128bits_digest(st));
        for (unsigned b = 0; b < 16; b++) {
            snprintf(c->chain + 2 * b, 3, "%02x", prev.digest[b]);
        }
    }
    XXH3_freeState(st);
    return 0;
}

int load_plan_make(const char *text, size_t len, size_t chunk_bytes,
                   unsigned chunk_stmts, struct ext_load_plan *out,
                   char *errmsg, size_t errmsg_len)
{
    struct lexer lx = {.text = text, .len = len, .line = 1};
    struct ext_load_plan p;
    int rc;

    memset(&p, 0, sizeof p);
    p.chunk_bytes = chunk_bytes;
    p.chunk_stmts = chunk_stmts > 0 ? chunk_stmts : 1;
    rc = split(&lx, &p, errmsg, errmsg_len);
    free(lx.buf);
    if (rc == 0 && p.n_stmts == 0) {
        snprintf(errmsg, errmsg_len, "the script holds no statement to load%s",
                 p.n_skipped > 0 ? " (only transaction control)" : "");
        rc = RAFT_INVALID;
    }
    if (rc == 0 && (group(&p) != 0 || chain(&p, text) != 0)) {
        snprintf(errmsg, errmsg_len, "out of memory");
        rc = RAFT_NOMEM;
    }
    if (rc != 0) {
        load_plan_free(&p);
        return rc;
    }
    *out = p;
    return 0;
}

void load_plan_free(struct ext_load_plan *p)
{
    free(p->stmts);
    free(p->chunks);
    memset(p, 0, sizeof *p);
}

char *load_plan_chunk_sql(const struct ext_load_plan *p, const char *text,
                          unsigned k)
{
    const struct ext_load_chunk *c = &p->chunks[k];
    char *sql = malloc(c->bytes + 1);
    size_t used = 0;
    if (sql == NULL) {
        return NULL;
    }
    for (unsigned i = c->first; i < c->first + c->n; i++) {
        const struct ext_load_stmt *s = &p->stmts[i];
        if (i > c->first) {
            sql[used++] = '\n';
        }
        memcpy(sql + used, text + s->offset, s->len);
        used += s->len;
        if (s->open_end) {
            memcpy(sql + used, "\n;", 2);
            used += 2;
        }
    }
    sql[used] = '\0';
    return sql;
}

size_t load_plan_request_id(const struct ext_load_plan *p, unsigned k,
                            char out[EXT_LOAD_ID_MAX])
{
    int n =
        snprintf(out, EXT_LOAD_ID_MAX, "load2:%u:%s", k, p->chunks[k].chain);
    return n > 0 ? (size_t)n : 0;
}
