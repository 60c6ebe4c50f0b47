/* The authorizer policy of the apply connection: what a request may not
 * do, because its effect or its answer would differ between nodes or it
 * would break the apply transaction. */

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

/* deny refuses the action being authorized, keeping the first reason. */
static int deny(struct sql_fsm *f, const char *fmt, ...)
{
    va_list ap;

    if (f->deny[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(f->deny, sizeof f->deny, fmt, ap);
        va_end(ap);
    }
    return SQLITE_DENY;
}

static int deny_internal(struct sql_fsm *f, const char *name)
{
    return deny(f,
                "%s is an internal raftsql table: raft_exec cannot change "
                "it",
                name);
}

/* authorize_pragma applies the PRAGMA policy of pragma.c. */
static int authorize_pragma(struct sql_fsm *f, const char *name,
                            const char *value, const char *schema)
{
    int setting = -1;

    switch (pragma_classify(name, value, schema, &setting)) {
        case SQL__PRAGMA_RUN:
            return SQLITE_OK;
        case SQL__PRAGMA_SETTING:
            /* Not run here (foreign_keys is a no-op in a transaction):
             * IGNORE makes the statement a no-op, and the request stores
             * the setting. */
            f->pragma_setting = setting;
            f->pragma_value = -1;
            pragma_bool(value, &f->pragma_value);
            snprintf(f->pragma_text, sizeof f->pragma_text, "%s", value);
            return SQLITE_IGNORE;
        default:
            if (strcasecmp(name, "optimize") == 0) {
                return deny(f,
                            "PRAGMA optimize cannot be used in raft_exec: "
                            "its effect depends on the node's query "
                            "history");
            }
            if (value == NULL) {
                return deny(f,
                            "PRAGMA %s cannot be used in raft_exec: only "
                            "read-only PRAGMA queries answered alike on "
                            "every node run there (its answer or effect "
                            "would differ per node or break the apply "
                            "transaction)",
                            name);
            }
            return deny(f,
                        "PRAGMA %s cannot be set through raft_exec: it is "
                        "connection-scoped or local to a node",
                        name);
    }
}

/* authorize is the apply connection's authorizer: user SQL may neither
 * write raftsql_* tables nor control transactions, attach databases,
 * create temporary objects (they would live on one node's connection
 * only) or run non-replicable pragmas, nor read raftsql_applied or
 * raftsql_requests (their contents depend on where each node's apply
 * batches end, so a request reading them would differ between nodes) or
 * raftsql_config (the Raft core's encoding, which may change with its
 * version). Our own statements pass. */
static int authorize(void *arg, int action, const char *a1, const char *a2,
                     const char *db_name, const char *trigger)
{
    struct sql_fsm *f = arg;

    (void)trigger;
    if (f->internal) {
        return SQLITE_OK;
    }
    switch (action) {
        case SQLITE_READ:
            /* a1 is the table; called with an empty column name for a
             * table read without its columns (count(*)). */
            if (a1 != NULL && (strcasecmp(a1, "raftsql_applied") == 0 ||
                               strcasecmp(a1, "raftsql_requests") == 0)) {
                return deny(f,
                            "%s cannot be read in raft_exec: it depends on "
                            "how each node batches its applies (read it "
                            "outside raft_exec)",
                            a1);
            }
            if (a1 != NULL && strcasecmp(a1, "raftsql_config") == 0) {
                return deny(f,
                            "raftsql_config cannot be read in raft_exec: it "
                            "holds the Raft core's encoding of the "
                            "configuration, which may change between "
                            "versions");
            }
            if (is_node_local_table(a1)) {
                return deny(f,
                            "%s cannot be read in raft_exec: it shows what "
                            "is local to one node (its connection, file "
                            "layout or build)",
                            a1);
            }
            return SQLITE_OK;
        case SQLITE_FUNCTION:
            /* a2 is the function's name. */
            if (a2 != NULL && strcasecmp(a2, "load_extension") == 0) {
                return deny(f,
                            "load_extension cannot be used in raft_exec: "
                            "extensions are loaded per node");
            }
            if (a2 != NULL && is_build_function(a2)) {
                return deny(f,
                            "%s() cannot be used in raft_exec: the SQLite "
                            "build may differ between nodes (during a "
                            "rolling upgrade), so its answer would too",
                            a2);
            }
            return SQLITE_OK;
        case SQLITE_INSERT:
        case SQLITE_UPDATE:
        case SQLITE_DELETE:
        case SQLITE_CREATE_TABLE:
        case SQLITE_DROP_TABLE:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_VIEW:
        case SQLITE_CREATE_VTABLE:
        case SQLITE_DROP_VTABLE:
            if (is_internal_name(a1)) {
                return deny_internal(f, a1);
            }
            return SQLITE_OK;
        case SQLITE_ALTER_TABLE:
            if (is_internal_name(a2)) {
                return deny_internal(f, a2);
            }
            /* The new name of a RENAME is not given here: run_request
             * checks the schema after the request (check_renamed). */
            f->altered = 1;
            checksum_altered(f, a2);
            return SQLITE_OK;
        case SQLITE_CREATE_INDEX:
        case SQLITE_DROP_INDEX:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_DROP_TRIGGER:
            if (is_internal_name(a2)) {
                return deny_internal(f, a2);
            }
            if (is_internal_name(a1)) {
                return deny_internal(f, a1);
            }
            return SQLITE_OK;
        case SQLITE_CREATE_TEMP_TABLE:
        case SQLITE_CREATE_TEMP_INDEX:
        case SQLITE_CREATE_TEMP_TRIGGER:
        case SQLITE_CREATE_TEMP_VIEW:
            return deny(f,
                        "temporary objects cannot be created through "
                        "raft_exec: they would exist on one node's "
                        "connection only");
        case SQLITE_TRANSACTION:
            return deny(f,
                        "%s cannot be used in raft_exec: each request "
                        "already runs as one transaction",
                        a1 != NULL ? a1 : "transaction control");
        case SQLITE_SAVEPOINT:
            return deny(f,
                        "%s cannot be used in raft_exec: each request "
                        "already runs as one transaction",
                        a1 == NULL                   ? "SAVEPOINT"
                        : strcmp(a1, "BEGIN") == 0   ? "SAVEPOINT"
                        : strcmp(a1, "RELEASE") == 0 ? "RELEASE"
                                                     : "ROLLBACK TO");
        case SQLITE_ATTACH:
        case SQLITE_DETACH:
            return deny(f,
                        "%s cannot be used in raft_exec: attached "
                        "databases are local to a node",
                        action == SQLITE_ATTACH ? "ATTACH" : "DETACH");
        case SQLITE_PRAGMA:
            return authorize_pragma(f, a1, a2, db_name);
        default:
            return SQLITE_OK;
    }
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
