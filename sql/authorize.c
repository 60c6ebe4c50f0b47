/* raft_exec's policy: what a request may not do, because its effect or
 * its answer would differ between nodes or it would break the apply
 * transaction. One list of rules, applied by the apply connection's
 * authorizer and by the caller's check before the request enters the
 * log (ext/surface/precheck.c, through the guard's check mode), so that both
 * refuse the same statements with the same words. */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"
#include "pragma.h"

SQLITE_EXTENSION_INIT3

/* is_internal_name tells whether @name is reserved for raftsql. */
static int is_internal_name(const char *name)
{
    return name != NULL && strncasecmp(name, "raftsql_", 8) == 0;
}

/* name_in tells whether @name is one of the @n names of @list (case
 * insensitive). */
static int name_in(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; name != NULL && i < n; i++) {
        if (strcasecmp(name, list[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* is_node_local_table tells whether @name is one of SQLite's eponymous
 * virtual tables whose rows differ per node: the connection's prepared
 * statements, the file's page layout, a statement's bytecode, raftsql's
 * own view of the cluster. */
static int is_node_local_table(const char *name)
{
    static const char *const local[] = {
        "sqlite_stmt", "dbstat",      "sqlite_dbpage",
        "bytecode",    "tables_used", "raft_members",
    };
    return name_in(name, local, sizeof local / sizeof local[0]);
}

/* is_build_function tells whether @name is a function that describes the
 * SQLite build itself, which may differ between nodes. */
static int is_build_function(const char *name)
{
    static const char *const build[] = {
        "sqlite_version",
        "sqlite_source_id",
        "sqlite_compileoption_get",
        "sqlite_compileoption_used",
    };
    return name_in(name, build, sizeof build / sizeof build[0]);
}

/* refuse writes the reason why a statement is refused into @why
 * (@why_len bytes) and returns 1: raft_exec refuses it. */
static int refuse(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return 1;
}

static int refuse_internal(char *why, size_t why_len, const char *name)
{
    return refuse(why, why_len,
                  "%s is an internal raftsql table: raft_exec cannot change "
                  "it",
                  name);
}

/* refuse_pragma applies the PRAGMA policy of pragma.c: a setting or a
 * query answered alike everywhere passes. */
static int refuse_pragma(const char *name, const char *value,
                         const char *schema, char *why, size_t why_len)
{
    int setting = -1;

    if (pragma_classify(name, value, schema, &setting) != SQL__PRAGMA_REFUSE) {
        return 0;
    }
    if (strcasecmp(name, "optimize") == 0) {
        return refuse(why, why_len,
                      "PRAGMA optimize cannot be used in raft_exec: its "
                      "effect depends on the node's query history");
    }
    if (value == NULL) {
        return refuse(why, why_len,
                      "PRAGMA %s cannot be used in raft_exec: only read-only "
                      "PRAGMA queries answered alike on every node run there "
                      "(its answer or effect would differ per node or break "
                      "the apply transaction)",
                      name);
    }
    return refuse(why, why_len,
                  "PRAGMA %s cannot be set through raft_exec: it is "
                  "connection-scoped or local to a node",
                  name);
}

/* refuse_read: user SQL may not read raftsql_applied or raftsql_requests
 * (their contents depend on where each node's apply batches end, so a
 * request reading them would differ between nodes), raftsql_config (the
 * Raft core's encoding, which may change with its version) nor the
 * node-local virtual tables. @table may be NULL. */
static int refuse_read(const char *table, char *why, size_t why_len)
{
    if (table != NULL && (strcasecmp(table, "raftsql_applied") == 0 ||
                          strcasecmp(table, "raftsql_requests") == 0)) {
        return refuse(why, why_len,
                      "%s cannot be read in raft_exec: it depends on how each "
                      "node batches its applies (read it outside raft_exec)",
                      table);
    }
    if (table != NULL && strcasecmp(table, "raftsql_config") == 0) {
        return refuse(why, why_len,
                      "raftsql_config cannot be read in raft_exec: it holds "
                      "the Raft core's encoding of the configuration, which "
                      "may change between versions");
    }
    if (is_node_local_table(table)) {
        return refuse(why, why_len,
                      "%s cannot be read in raft_exec: it shows what is local "
                      "to one node (its connection, file layout or build)",
                      table);
    }
    return 0;
}

/* refuse_function: functions whose answer or effect is the node's own. */
static int refuse_function(const char *name, char *why, size_t why_len)
{
    if (name != NULL && strcasecmp(name, "load_extension") == 0) {
        return refuse(why, why_len,
                      "load_extension cannot be used in raft_exec: "
                      "extensions are loaded per node");
    }
    if (name != NULL && strcasecmp(name, "total_changes") == 0) {
        return refuse(why, why_len,
                      "total_changes() counts each node's own history and "
                      "cannot be used in raft_exec; use changes()");
    }
    if (name != NULL && is_build_function(name)) {
        return refuse(why, why_len,
                      "%s() cannot be used in raft_exec: the SQLite build may "
                      "differ between nodes (during a rolling upgrade), so "
                      "its answer would too",
                      name);
    }
    return 0;
}

int sql_refusal_action(int action, const char *a1, const char *a2,
                       const char *db_name, char *why, size_t why_len)
{
    switch (action) {
        case SQLITE_READ:
            /* a1 is the table; called with an empty column name for a
             * table read without its columns (count(*)). */
            return refuse_read(a1, why, why_len);
        case SQLITE_FUNCTION:
            /* a2 is the function's name. */
            return refuse_function(a2, why, why_len);
        case SQLITE_INSERT:
        case SQLITE_UPDATE:
        case SQLITE_DELETE:
        case SQLITE_CREATE_TABLE:
        case SQLITE_DROP_TABLE:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_VIEW:
        case SQLITE_CREATE_VTABLE:
        case SQLITE_DROP_VTABLE:
            return is_internal_name(a1) ? refuse_internal(why, why_len, a1) : 0;
        case SQLITE_ALTER_TABLE:
            /* The new name of a RENAME is not given here: run_request
             * checks the schema after the request (check_renamed). */
            return is_internal_name(a2) ? refuse_internal(why, why_len, a2) : 0;
        case SQLITE_CREATE_INDEX:
        case SQLITE_DROP_INDEX:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_DROP_TRIGGER:
            if (is_internal_name(a2)) {
                return refuse_internal(why, why_len, a2);
            }
            return is_internal_name(a1) ? refuse_internal(why, why_len, a1) : 0;
        case SQLITE_CREATE_TEMP_TABLE:
        case SQLITE_CREATE_TEMP_INDEX:
        case SQLITE_CREATE_TEMP_TRIGGER:
        case SQLITE_CREATE_TEMP_VIEW:
            return refuse(why, why_len,
                          "temporary objects cannot be created through "
                          "raft_exec: they would exist on one node's "
                          "connection only");
        case SQLITE_TRANSACTION:
            return refuse(why, why_len,
                          "%s cannot be used in raft_exec: each request "
                          "already runs as one transaction",
                          a1 != NULL ? a1 : "transaction control");
        case SQLITE_SAVEPOINT:
            return refuse(why, why_len,
                          "%s cannot be used in raft_exec: each request "
                          "already runs as one transaction",
                          a1 == NULL                       ? "SAVEPOINT"
                          : strcasecmp(a1, "BEGIN") == 0   ? "SAVEPOINT"
                          : strcasecmp(a1, "RELEASE") == 0 ? "RELEASE"
                                                           : "ROLLBACK TO");
        case SQLITE_ATTACH:
        case SQLITE_DETACH:
            return refuse(why, why_len,
                          "%s cannot be used in raft_exec: attached databases "
                          "are local to a node",
                          action == SQLITE_ATTACH ? "ATTACH" : "DETACH");
        case SQLITE_PRAGMA:
            return refuse_pragma(a1, a2, db_name, why, why_len);
        default:
            return 0;
    }
}

/* authorize is the apply connection's authorizer: what
 * sql_refusal_action refuses is denied (the first reason kept for the
 * request's error); a PRAGMA setting is stored by the request instead of
 * run; ALTER TABLE is noted for the schema check and the checksum. Our
 * own statements pass. */
static int authorize(void *arg, int action, const char *a1, const char *a2,
                     const char *db_name, const char *trigger)
{
    struct sql_fsm *f = arg;
    char why[sizeof f->deny];
    int setting = -1;

    (void)trigger;
    if (f->internal) {
        return SQLITE_OK;
    }
    if (sql_refusal_action(action, a1, a2, db_name, why, sizeof why)) {
        if (f->deny[0] == '\0') {
            memcpy(f->deny, why, sizeof f->deny);
        }
        return SQLITE_DENY;
    }
    if (action == SQLITE_ALTER_TABLE) {
        f->altered = 1;
        checksum_altered(f, a2);
    } else if (action == SQLITE_PRAGMA &&
               pragma_classify(a1, a2, db_name, &setting) ==
                   SQL__PRAGMA_SETTING) {
        /* Not run here (foreign_keys is a no-op in a transaction): IGNORE
         * makes the statement a no-op, and the request stores the
         * setting. */
        f->pragma_setting = setting;
        f->pragma_value = -1;
        pragma_bool(a2, &f->pragma_value);
        snprintf(f->pragma_text, sizeof f->pragma_text, "%s", a2);
        return SQLITE_IGNORE;
    }
    return SQLITE_OK;
}

void authorize_install(struct sql_fsm *f)
{
    sqlite3_set_authorizer(f->db, authorize, f);
}

/* skip_space_comments returns @p past whitespace and SQL comments. */
static const char *skip_space_comments(const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' ||
               *p == '\f' || *p == '\v') {
            p++;
        }
        if (p[0] == '-' && p[1] == '-') {
            while (*p != '\0' && *p != '\n') {
                p++;
            }
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end != NULL ? end + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

int authorize_is_vacuum(const char *sql)
{
    const char *p;
    char c;

    if (sql == NULL) {
        return 0;
    }
    p = skip_space_comments(sql);
    if (strncasecmp(p, "vacuum", 6) != 0) {
        return 0;
    }
    c = p[6];
    return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             (c >= '0' && c <= '9') || c == '_' || c == '$' ||
             (unsigned char)c >= 0x80);
}

/* The date and time functions whose 'localtime' and 'utc' modifiers
 * determinism.c refuses when it evaluates them. */
static int is_date_function(const char *name, size_t len)
{
    static const char *const dates[] = {"date",      "time",      "datetime",
                                        "julianday", "unixepoch", "strftime",
                                        "timediff"};
    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
        if (strlen(dates[i]) == len && strncasecmp(name, dates[i], len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* is_zone_literal says whether the SQL string literal @p of @len bytes
 * (quotes included) is 'localtime' or 'utc' (any case, blanks around
 * ignored), as determinism.c compares an argument's value. */
static int is_zone_literal(const char *p, size_t len)
{
    const char *b = p + 1, *e = p + len - 1;
    while (b < e && (*b == ' ' || *b == '\t')) {
        b++;
    }
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) {
        e--;
    }
    return (e - b == 9 && strncasecmp(b, "localtime", 9) == 0) ||
           (e - b == 3 && strncasecmp(b, "utc", 3) == 0);
}

/* is_ident_char says whether @c may continue an unquoted identifier. */
static int is_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

/* quoted_end returns the end of the quoted token at @p (closing quote
 * @close, doubled to escape it except for ']'), or the text's end. */
static const char *quoted_end(const char *p, char close)
{
    for (p++; *p != '\0'; p++) {
        if (*p == close) {
            if (close != ']' && p[1] == close) {
                p++;
                continue;
            }
            return p + 1;
        }
    }
    return p;
}

/* The parentheses a zone scan is inside, deepest last. */
#define SQL__ZONE_DEPTH 64

/* refuse_zone_literal finds a 'localtime' or 'utc' literal written as an
 * argument of a date function in statement text @sql (date('now',
 * 'localtime')): each node may run in another time zone. Arguments that
 * are no literal (a column, a bound value, an expression) are refused
 * when the apply connection evaluates them (determinism.c). */
static int refuse_zone_literal(const char *sql, char *why, size_t why_len)
{
    /* For each open parenthesis: 1 + the index of its date function's
     * name in @sql, or 0 when it opens no date function's arguments. */
    size_t fn_at[SQL__ZONE_DEPTH];
    const char *p = sql, *prev_ident = NULL;
    size_t prev_len = 0;
    char prev = '(';
    int depth = 0;

    while (*p != '\0') {
        const char *q = skip_space_comments(p);
        const char *start;
        if (q != p) {
            p = q;
            continue;
        }
        start = p;
        if (*p == '\'') {
            p = quoted_end(p, '\'');
            q = skip_space_comments(p);
            if (depth > 0 && depth <= SQL__ZONE_DEPTH &&
                fn_at[depth - 1] != 0 && (prev == '(' || prev == ',') &&
                (*q == ',' || *q == ')') &&
                is_zone_literal(start, (size_t)(p - start))) {
                const char *fn = sql + fn_at[depth - 1] - 1;
                size_t fn_len = 0;
                while (is_ident_char(fn[fn_len])) {
                    fn_len++;
                }
                return refuse(why, why_len,
                              "%.*s(): the %.*s modifier depends on each "
                              "node's time zone and cannot be used in "
                              "raft_exec; store UTC and convert when reading",
                              (int)fn_len, fn, (int)(p - start), start);
            }
            prev = 's';
            continue;
        }
        if (*p == '"' || *p == '`' || *p == '[') {
            /* A quoted name: "date"('now', 'utc') calls date() too. */
            p = quoted_end(p, *p == '[' ? ']' : *p);
            prev_ident = start + 1;
            prev_len = p > start + 1 ? (size_t)(p - start) - 2 : 0;
            prev = 'i';
            continue;
        }
        if (is_ident_char(*p) && !(*p >= '0' && *p <= '9')) {
            while (is_ident_char(*p)) {
                p++;
            }
            prev_ident = start;
            prev_len = (size_t)(p - start);
            prev = 'i';
            continue;
        }
        if (*p == '(') {
            if (depth < SQL__ZONE_DEPTH) {
                fn_at[depth] = prev == 'i' && prev_ident != NULL &&
                                       is_date_function(prev_ident, prev_len)
                                   ? (size_t)(prev_ident - sql) + 1
                                   : 0;
            }
            depth++;
        } else if (*p == ')' && depth > 0) {
            depth--;
        }
        prev = *p == '(' || *p == ',' ? *p : 'o';
        prev_ident = NULL;
        p++;
    }
    return 0;
}

int sql_refusal_statement(const char *sql, char *why, size_t why_len)
{
    if (sql == NULL) {
        return 0;
    }
    if (authorize_is_vacuum(sql)) {
        return refuse(why, why_len,
                      "VACUUM cannot be used in raft_exec: each request runs "
                      "inside a transaction");
    }
    return refuse_zone_literal(sql, why, why_len);
}

const char *sql_refusal_setting(int action, const char *a1, const char *a2,
                                const char *db_name)
{
    int setting = -1;
    if (action != SQLITE_PRAGMA ||
        pragma_classify(a1, a2, db_name, &setting) != SQL__PRAGMA_SETTING) {
        return NULL;
    }
    return pragma_setting_name(setting);
}

int sql_refusal_setting_alone(const char *name, char *why, size_t why_len)
{
    return refuse(why, why_len,
                  "PRAGMA %s must be a raft_exec request of its own: a "
                  "cluster-wide setting takes effect from the next request "
                  "on",
                  name);
}
