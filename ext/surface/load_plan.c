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

#include "../../raft/err.h"
#include "shadow.h"

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

/* push appends @s to the array *@a of *@n statements (capacity *@cap). */
static int push(struct ext_load_stmt **a, unsigned *n, unsigned *cap,
                const struct ext_load_stmt *s)
{
    if (*n == *cap) {
        unsigned c = *cap != 0 ? *cap * 2 : 64;
        struct ext_load_stmt *b = realloc(*a, c * sizeof *b);
        if (b == NULL) {
            return RAFT_NOMEM;
        }
        *a = b;
        *cap = c;
    }
    (*a)[(*n)++] = *s;
    return 0;
}

/* ---- A statement's first words -------------------------------------- */

/* A word read by next_word: a name or keyword with its quotes taken off
 * ('' "" `` [] and their doubled quotes), or one other character. */
struct word {
    char text[128]; /* NUL-terminated; longer names are cut */
    bool quoted;    /* it was quoted */
    bool string;    /* quoted with '' */
    char *whole;    /* a '' string longer than text, malloc'd (else NULL) */
};

/* next_word reads the word at *@pos of @p (@len bytes) into @w, skipping
 * whitespace and comments before it; returns false at the end. With
 * @keep_string, a '' string of any length is kept whole in w->whole. */
static bool next_word(const char *p, size_t len, size_t *pos, struct word *w,
                      bool keep_string)
{
    size_t i = *pos, n = 0, cap = 0;
    free(w->whole);
    memset(w, 0, sizeof *w);
    for (;;) {
        while (i < len && strchr(" \t\n\r\f\v", p[i]) != NULL) {
            i++;
        }
        if (i + 1 < len && p[i] == '-' && p[i + 1] == '-') {
            while (i < len && p[i] != '\n') {
                i++;
            }
        } else if (i + 1 < len && p[i] == '/' && p[i + 1] == '*') {
            i += 2;
            while (i + 1 < len && !(p[i] == '*' && p[i + 1] == '/')) {
                i++;
            }
            i = i + 2 < len ? i + 2 : len;
        } else {
            break;
        }
    }
    if (i >= len) {
        *pos = i;
        return false;
    }
    if (strchr("'\"`[", p[i]) != NULL) {
        char close = p[i] == '[' ? ']' : p[i];
        w->quoted = true;
        w->string = p[i] == '\'';
        for (i++; i < len; i++) {
            char c = p[i];
            if (c == close) {
                if (close != ']' && i + 1 < len && p[i + 1] == close) {
                    i++;
                } else {
                    i++;
                    break;
                }
            }
            if (n + 1 < sizeof w->text) {
                w->text[n] = c;
            }
            if (keep_string && w->string) {
                if (n + 2 > cap) {
                    char *b;
                    cap = cap != 0 ? cap * 2 : 256;
                    b = realloc(w->whole, cap);
                    if (b == NULL) {
                        free(w->whole);
                        w->whole = NULL;
                        keep_string = false;
                        continue;
                    }
                    w->whole = b;
                }
                w->whole[n] = c;
                w->whole[n + 1] = '\0';
            }
            n++;
        }
        w->text[n < sizeof w->text ? n : sizeof w->text - 1] = '\0';
    } else if ((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
               (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '$' ||
               (unsigned char)p[i] >= 0x80) {
        while (i < len &&
               ((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
                (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '$' ||
                (unsigned char)p[i] >= 0x80)) {
            if (n + 1 < sizeof w->text) {
                w->text[n++] = p[i];
            }
            i++;
        }
        w->text[n] = '\0';
    } else {
        w->text[0] = p[i++];
    }
    *pos = i;
    return true;
}

/* is tells whether @w is the bare keyword @kw (any case). */
static bool is(const struct word *w, const char *kw)
{
    return !w->quoted && strcasecmp(w->text, kw) == 0;
}

/* next_name reads a possibly schema-qualified name at *@pos into @w (the
 * name without its schema). */
static bool next_name(const char *p, size_t len, size_t *pos, struct word *w)
{
    struct word dot = {0};
    size_t at;
    if (!next_word(p, len, pos, w, false)) {
        return false;
    }
    at = *pos;
    if (next_word(p, len, &at, &dot, false) && !dot.quoted &&
        strcmp(dot.text, ".") == 0) {
        *pos = at;
        return next_word(p, len, pos, w, false);
    }
    return true;
}

/* What a statement writes, by its first words. */
struct target {
    char name[128];  /* the table, index, view or trigger it creates, or
                        the table it inserts into; "" when neither */
    char table[128]; /* CREATE INDEX/TRIGGER: the table it is on */
    bool insert;     /* an INSERT (or REPLACE) INTO */
    bool create;     /* a CREATE TABLE */
};

/* target_of reads what statement @p (@len bytes) creates or inserts
 * into. */
static void target_of(const char *p, size_t len, struct target *t)
{
    struct word w = {0};
    size_t pos = 0;
    memset(t, 0, sizeof *t);
    if (!next_word(p, len, &pos, &w, false)) {
        return;
    }
    if (is(&w, "INSERT") || is(&w, "REPLACE")) {
        while (next_word(p, len, &pos, &w, false) && !is(&w, "INTO")) {
        }
        if (next_name(p, len, &pos, &w)) {
            snprintf(t->name, sizeof t->name, "%s", w.text);
            t->insert = true;
        }
    } else if (is(&w, "CREATE")) {
        bool index = false, trigger = false;
        while (next_word(p, len, &pos, &w, false) &&
               (is(&w, "TEMP") || is(&w, "TEMPORARY") || is(&w, "UNIQUE") ||
                is(&w, "VIRTUAL"))) {
        }
        t->create = is(&w, "TABLE");
        index = is(&w, "INDEX");
        trigger = is(&w, "TRIGGER");
        if (!t->create && !index && !trigger && !is(&w, "VIEW")) {
            free(w.whole);
            return;
        }
        {
            size_t at = pos;
            struct word a = {0};
            if (next_word(p, len, &at, &a, false) && is(&a, "IF")) {
                (void)next_word(p, len, &at, &a, false); /* NOT */
                (void)next_word(p, len, &at, &a, false); /* EXISTS */
                pos = at;
            }
        }
        if (next_name(p, len, &pos, &w)) {
            snprintf(t->name, sizeof t->name, "%s", w.text);
        }
        while ((index || trigger) && next_word(p, len, &pos, &w, false)) {
            if (is(&w, "ON") && next_name(p, len, &pos, &w)) {
                snprintf(t->table, sizeof t->table, "%s", w.text);
                break;
            }
        }
    }
    free(w.whole);
}

/* internal_name tells whether @name is raftsql's. */
static bool internal_name(const char *name)
{
    return strncasecmp(name, "raftsql_", 8) == 0;
}

/* A .dump's declaration of a virtual table, read by vtab_decl. */
struct decl {
    char name[128]; /* the virtual table */
    char *sql;      /* its CREATE VIRTUAL TABLE, malloc'd */
};

/* vtab_decl reads statement @p (@len bytes), an INSERT INTO sqlite_schema
 * or sqlite_master, as the shell's .dump writes a virtual table:
 * (type,name,tbl_name,rootpage,sql) VALUES('table','X','X',0,'CREATE
 * VIRTUAL TABLE ...'). Returns 1 with @d filled, 0 when it is another
 * write to the schema, -1 when out of memory. */
static int vtab_decl(const char *p, size_t len, struct decl *d)
{
    static const char *const cols[] = {"type", "name", "tbl_name", "rootpage",
                                       "sql"};
    struct word w = {0};
    size_t pos = 0;
    int ok = 0;
    memset(d, 0, sizeof *d);
    while (next_word(p, len, &pos, &w, false) && !is(&w, "INTO")) {
    }
    (void)next_name(p, len, &pos, &w);
    if (!next_word(p, len, &pos, &w, false) || strcmp(w.text, "(") != 0) {
        goto out;
    }
    for (size_t i = 0; i < 5; i++) {
        if (!next_word(p, len, &pos, &w, false) ||
            strcasecmp(w.text, cols[i]) != 0 ||
            !next_word(p, len, &pos, &w, false) ||
            strcmp(w.text, i < 4 ? "," : ")") != 0) {
            goto out;
        }
    }
    if (!next_word(p, len, &pos, &w, false) || !is(&w, "VALUES") ||
        !next_word(p, len, &pos, &w, false) || strcmp(w.text, "(") != 0 ||
        !next_word(p, len, &pos, &w, false) || !w.string ||
        strcmp(w.text, "table") != 0 || !next_word(p, len, &pos, &w, false) ||
        !next_word(p, len, &pos, &w, false) || !w.string) {
        goto out;
    }
    snprintf(d->name, sizeof d->name, "%s", w.text);
    for (int i = 0; i < 5; i++) { /* , 'X' , 0 , */
        if (!next_word(p, len, &pos, &w, false)) {
            goto out;
        }
    }
    if (!next_word(p, len, &pos, &w, true) || !w.string || w.whole == NULL ||
        strncasecmp(w.whole, "CREATE VIRTUAL TABLE", 20) != 0) {
        goto out;
    }
    d->sql = w.whole;
    w.whole = NULL;
    ok = 1;
out:
    free(w.whole);
    return ok;
}

/* contentless tells whether CREATE VIRTUAL TABLE text @sql has the option
 * content='' (or content="" or content=): an FTS4/FTS5 table that keeps
 * no text of its rows. */
static bool contentless(const char *sql)
{
    size_t len = strlen(sql), pos = 0;
    struct word w = {0}, eq = {0}, v = {0};
    bool found = false;
    while (!found && next_word(sql, len, &pos, &w, false)) {
        size_t at = pos;
        if (strcasecmp(w.text, "content") != 0 ||
            !next_word(sql, len, &at, &eq, false) ||
            strcmp(eq.text, "=") != 0) {
            continue;
        }
        found = !next_word(sql, len, &at, &v, false) ||
                (v.quoted && v.text[0] == '\0') ||
                (!v.quoted &&
                 (strcmp(v.text, ",") == 0 || strcmp(v.text, ")") == 0));
    }
    free(w.whole);
    free(eq.whole);
    free(v.whole);
    return found;
}

/* A virtual table's shadow table: the name of a virtual table @p lists,
 * of a module with shadow tables, then '_' and one of its suffixes. */
static bool is_shadow(const struct ext_load_plan *p, const char *name)
{
    const char *tail = strrchr(name, '_');
    if (tail == NULL) {
        return false;
    }
    for (unsigned i = 0; i < p->n_vtabs; i++) {
        const struct ext_load_vtab *v = &p->vtabs[i];
        if (strlen(v->name) == (size_t)(tail - name) &&
            strncasecmp(v->name, name, (size_t)(tail - name)) == 0 &&
            shadow_suffix(v->module, tail + 1)) {
            return true;
        }
    }
    return false;
}

/* add_vtab lists virtual table @name of module @module (declared on
 * @line) in @p. */
static int add_vtab(struct ext_load_plan *p, const char *name,
                    const char *module, unsigned line)
{
    struct ext_load_vtab *a = realloc(p->vtabs, (p->n_vtabs + 1) * sizeof *a);
    if (a == NULL) {
        return RAFT_NOMEM;
    }
    p->vtabs = a;
    a[p->n_vtabs].name = strdup(name);
    if (a[p->n_vtabs].name == NULL) {
        return RAFT_NOMEM;
    }
    snprintf(a[p->n_vtabs].module, sizeof a[p->n_vtabs].module, "%s", module);
    a[p->n_vtabs].line = line;
    p->n_vtabs++;
    return 0;
}

/* classify sets the role of statement @s (word @word first) of @p, or
 * says to leave it out (1: a raftsql_* one). Returns 0, 1, RAFT_INVALID
 * with @errmsg, or RAFT_NOMEM. */
static int classify(struct ext_load_plan *p, const char *text,
                    struct ext_load_stmt *s, const char *word, char *errmsg,
                    size_t errmsg_len)
{
    const char *q = text + s->offset;
    struct target t;
    struct decl d;
    target_of(q, s->len, &t);
    if (internal_name(t.name) || internal_name(t.table)) {
        return 1;
    }
    if (strcasecmp(word, "PRAGMA") == 0) {
        struct word w = {0};
        size_t pos = 0;
        (void)next_word(q, s->len, &pos, &w, false);
        if (next_name(q, s->len, &pos, &w) &&
            strcasecmp(w.text, "writable_schema") == 0) {
            s->role = EXT_LOAD_CHECK;
            p->gen_at = p->n_script; /* the last one: =OFF */
        }
        free(w.whole);
        return 0;
    }
    if (t.insert && (strcasecmp(t.name, "sqlite_schema") == 0 ||
                     strcasecmp(t.name, "sqlite_master") == 0)) {
        char module[32];
        int rc = vtab_decl(q, s->len, &d);
        if (rc < 0) {
            return RAFT_NOMEM;
        }
        if (rc == 0) {
            snprintf(errmsg, errmsg_len,
                     "line %u: a write to %s cannot be loaded (of the "
                     "schema table, only a .dump's declaration of a virtual "
                     "table is understood)",
                     s->line, t.name);
            return RAFT_INVALID;
        }
        shadow_module(d.sql, strlen(d.sql), module, sizeof module);
        if ((strcasecmp(module, "fts4") == 0 ||
             strcasecmp(module, "fts5") == 0) &&
            contentless(d.sql)) {
            snprintf(errmsg, errmsg_len,
                     "line %u: the virtual table %s is contentless "
                     "(content=''): a dump holds its index only, which "
                     "cannot be loaded (its rows can: insert them into a "
                     "table created anew)",
                     s->line, d.name);
            free(d.sql);
            return RAFT_INVALID;
        }
        {
            /* Sent as a statement of a chunk: with its ';'. */
            size_t n = strlen(d.sql);
            char *grown = realloc(d.sql, n + 2);
            if (grown == NULL) {
                free(d.sql);
                return RAFT_NOMEM;
            }
            memcpy(grown + n, ";", 2);
            d.sql = grown;
        }
        s->role = EXT_LOAD_VTAB;
        s->sql = d.sql;
        s->len = strlen(d.sql);
        s->open_end = false;
        if (shadow_known(module) && add_vtab(p, d.name, module, s->line) != 0) {
            return RAFT_NOMEM;
        }
        return 0;
    }
    if ((t.insert || t.create) && is_shadow(p, t.name)) {
        s->role = EXT_LOAD_CHECK;
    }
    return 0;
}

/* split fills @p's script from @lx. */
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
        memset(&s, 0, sizeof s);
        s.offset = lx->pos;
        s.line = lx->line;
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
        s.script_len = s.len;
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
        r = classify(p, lx->text, &s, word, errmsg, errmsg_len);
        if (r == 1) {
            p->n_internal++;
            continue;
        }
        if (r == 0 && push(&p->script, &p->n_script, &cap, &s) != 0) {
            free(s.sql);
            r = RAFT_NOMEM;
        }
        if (r == RAFT_NOMEM) {
            snprintf(errmsg, errmsg_len, "out of memory");
        }
        if (r != 0) {
            return r;
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
            size_t n = 0;
            const char *t = load_plan_stmt_text(s, text, &n);
            if (i > c->first) {
                XXH3_128bits_update(st, "\n", 1);
            }
            XXH3_128bits_update(st, t, n);
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

const char *load_plan_stmt_text(const struct ext_load_stmt *s, const char *text,
                                size_t *out_len)
{
    *out_len = s->len;
    return s->sql != NULL ? s->sql : text + s->offset;
}

int load_plan_split(const char *text, size_t len, struct ext_load_plan *out,
                    char *errmsg, size_t errmsg_len)
{
    struct lexer lx = {.text = text, .len = len, .line = 1};
    struct ext_load_plan p;
    int rc;

    memset(&p, 0, sizeof p);
    p.gen_at = UINT32_MAX;
    rc = split(&lx, &p, errmsg, errmsg_len);
    free(lx.buf);
    if (rc != 0) {
        load_plan_free(&p);
        return rc;
    }
    if (p.gen_at == UINT32_MAX) {
        p.gen_at = p.n_script;
    }
    *out = p;
    return 0;
}

int load_plan_add(struct ext_load_plan *p, char *sql, unsigned line)
{
    struct ext_load_stmt s = {.line = line, .sql = sql, .len = strlen(sql)};
    if (push(&p->gen, &p->n_gen, &p->gen_cap, &s) != 0) {
        free(sql);
        return RAFT_NOMEM;
    }
    return 0;
}

int load_plan_finish(struct ext_load_plan *p, const char *text,
                     size_t chunk_bytes, unsigned chunk_stmts, char *errmsg,
                     size_t errmsg_len)
{
    unsigned cap = 0;
    free(p->stmts);
    free(p->chunks);
    p->stmts = NULL;
    p->chunks = NULL;
    p->n_stmts = 0;
    p->n_chunks = 0;
    p->chunk_bytes = chunk_bytes;
    p->chunk_stmts = chunk_stmts > 0 ? chunk_stmts : 1;
    for (unsigned i = 0; i <= p->n_script; i++) {
        if (i == p->gen_at) {
            for (unsigned k = 0; k < p->n_gen; k++) {
                if (push(&p->stmts, &p->n_stmts, &cap, &p->gen[k]) != 0) {
                    goto nomem;
                }
            }
        }
        if (i < p->n_script && p->script[i].role != EXT_LOAD_CHECK &&
            push(&p->stmts, &p->n_stmts, &cap, &p->script[i]) != 0) {
            goto nomem;
        }
    }
    if (p->n_stmts == 0) {
        snprintf(errmsg, errmsg_len, "the script holds no statement to load%s",
                 p->n_internal > 0  ? " (only raftsql's internal tables)"
                 : p->n_skipped > 0 ? " (only transaction control)"
                                    : "");
        return RAFT_INVALID;
    }
    if (group(p) != 0 || chain(p, text) != 0) {
        goto nomem;
    }
    return 0;
nomem:
    snprintf(errmsg, errmsg_len, "out of memory");
    return RAFT_NOMEM;
}

int load_plan_make(const char *text, size_t len, size_t chunk_bytes,
                   unsigned chunk_stmts, struct ext_load_plan *out,
                   char *errmsg, size_t errmsg_len)
{
    struct ext_load_plan p;
    int rc = load_plan_split(text, len, &p, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    rc = load_plan_finish(&p, text, chunk_bytes, chunk_stmts, errmsg,
                          errmsg_len);
    if (rc != 0) {
        load_plan_free(&p);
        return rc;
    }
    *out = p;
    return 0;
}

void load_plan_free(struct ext_load_plan *p)
{
    for (unsigned i = 0; i < p->n_script; i++) {
        free(p->script[i].sql);
    }
    for (unsigned i = 0; i < p->n_gen; i++) {
        free(p->gen[i].sql);
    }
    for (unsigned i = 0; i < p->n_vtabs; i++) {
        free(p->vtabs[i].name);
    }
    free(p->script);
    free(p->gen);
    free(p->vtabs);
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
        size_t n;
        const char *t = load_plan_stmt_text(s, text, &n);
        memcpy(sql + used, t, n);
        used += n;
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
