/*
** members.c - the SQL surface of membership.
**
**     .load ./build/raftsql
**     SELECT raft_start('id=1 cluster=1@127.0.0.1:7001,...');
**     SELECT raft_add(4, '127.0.0.1:7004');   -- learner, then voter
**     SELECT raft_add(5, '127.0.0.1:7005', 'learner'); -- stays a learner
**     SELECT raft_promote(5);  SELECT raft_demote(5);
**     SELECT raft_update(4, '127.0.0.1:7014');
**     SELECT raft_remove(5);
**     SELECT raft_transfer();  SELECT raft_transfer(2);
**     SELECT * FROM raft_members;
**
** Each function returns a text saying what was done once it is done: a
** change once its configuration entry is committed (not merely appended),
** a transfer once another server leads. On a follower the request is
** forwarded to the leader. Each refuses at once while another change is
** pending, and names the bad argument.
**
** raft_members(id, address, role, leader, match_index, lag,
** last_contact_ms, connected, auto_promote, checksum_differs) is the
** configuration in force
** as this node sees it: on the leader every column; on a follower NULL
** where it does not know (match_index and lag of every row,
** last_contact_ms of every row but its leader's, its own included). auto_promote is 1 for a learner that the leader (any leader:
** the mark is in the configuration entry) promotes to voter once caught
** up, else 0. checksum_differs is the first index at which this node
** found its replica checksum differs from that member's (NULL: none
** found; docs/divergence.md).
**
** LIMITATIONS: a node of an older build cannot read a configuration that
** holds an auto_promote mark (a version 2 entry, raft/configuration.h):
** upgrade every node before adding one without 'learner'.
*/

#include "members.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/address.h"
#include "../../raft/err.h"
#include "../raftsql.h"
#include "../runtime/change.h"
#include "attach_client.h"
#include "attach_server.h"
#include "func_acquire.h"
#include "func_call.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

/* ---- The functions ------------------------------------------------------ */

/* fail reports the error @fmt of a function's arguments through @ctx
 * (RAFTSQL_INVALID). */
static bool fail(sqlite3_context *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static bool fail(sqlite3_context *ctx, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    func_call_error(ctx, RAFTSQL_INVALID, msg);
    return false;
}

/* arg_id reads argument @v as a server id, or reports what is wrong. */
static bool arg_id(sqlite3_context *ctx, const char *fn, sqlite3_value *v,
                   raft_id *out)
{
    if (sqlite3_value_type(v) != SQLITE_INTEGER ||
        sqlite3_value_int64(v) <= 0) {
        return fail(ctx, "%s: the server id must be a positive integer", fn);
    }
    *out = (raft_id)sqlite3_value_int64(v);
    return true;
}

/* arg_address reads argument @v as "host:port" (raft/address.h: an IPv4
 * or [IPv6] literal or a hostname, no wildcard) into @out, formatted, or
 * reports what is wrong. */
static bool arg_address(sqlite3_context *ctx, const char *fn, sqlite3_value *v,
                        char *out, size_t len)
{
    const char *text = (const char *)sqlite3_value_text(v);
    struct raft_address a;
    char why[160];

    if (sqlite3_value_type(v) != SQLITE_TEXT || text == NULL) {
        return fail(ctx,
                    "%s: the address must be text 'host:port', e.g. "
                    "'127.0.0.1:7004'",
                    fn);
    }
    if (raft_address_parse(text, &a, why, sizeof why) != 0) {
        return fail(ctx, "%s: bad address '%.200s': %s, e.g. '127.0.0.1:7004'",
                    fn, text, why);
    }
    if (raft_address_wildcard(&a)) {
        return fail(ctx,
                    "%s: bad address '%.200s': a wildcard, which no peer "
                    "can dial",
                    fn, text);
    }
    raft_address_format(&a, out, len);
    return true;
}

/* done_text writes what request @q did, given its result @r (index 0:
 * done by an earlier copy whose answer was lost). */
static void done_text(const struct ext_change_request *q,
                      const struct ext_change_result *r, char *buf, size_t len)
{
    unsigned long long id = (unsigned long long)q->id;
    unsigned long long at = (unsigned long long)r->index;
    if (at == 0 && q->op != EXT_CHANGE_TRANSFER) {
        snprintf(buf, len,
                 "done: server %llu was changed already (the answer to an "
                 "earlier copy of this request was lost)",
                 id);
        return;
    }
    switch (q->op) {
        case EXT_CHANGE_ADD:
            snprintf(buf, len,
                     "server %llu added as a learner at %s (entry %llu "
                     "committed); %s",
                     id, q->address, at,
                     q->manual ? "it stays a learner"
                               : "promoted to voter once caught up");
            break;
        case EXT_CHANGE_REMOVE:
            snprintf(buf, len, "server %llu removed (entry %llu committed)", id,
                     at);
            break;
        case EXT_CHANGE_PROMOTE:
            snprintf(buf, len,
                     "server %llu promoted to voter (entry %llu committed)", id,
                     at);
            break;
        case EXT_CHANGE_DEMOTE:
            snprintf(buf, len,
                     "server %llu demoted to learner (entry %llu committed)",
                     id, at);
            break;
        case EXT_CHANGE_UPDATE:
            snprintf(buf, len, "server %llu now at %s (entry %llu committed)",
                     id, q->address, at);
            break;
        default:
            if (r->leader != 0) {
                snprintf(buf, len, "leadership transferred to server %llu",
                         (unsigned long long)r->leader);
            } else {
                snprintf(buf, len,
                         "leadership transferred; the new leader is not "
                         "known here yet");
            }
            break;
    }
}

/* change_code returns the result code of the failed change @r
 * (raftsql.h). */
static int change_code(const struct ext_change_result *r)
{
    if (r->rc == RAFT_CANCELED) {
        return r->unknown ? RAFTSQL_INTERRUPTED_UNKNOWN : RAFTSQL_INTERRUPTED;
    }
    if (r->unknown) {
        return RAFTSQL_UNKNOWN;
    }
    switch (r->rc) {
        case RAFT_BUSY:
            return RAFTSQL_BUSY;
        case RAFT_INVALID:  /* already a member, an address in use, ... */
        case RAFT_NOTFOUND: /* no such server */
            return RAFTSQL_INVALID;
        case RAFT_NOMEM:
            return SQLITE_NOMEM;
        default: /* no leader, shutting down, refused by the leader */
            return RAFTSQL_NOT_APPLIED;
    }
}

/* run submits @q for function @fn (called with @argc arguments @argv,
 * forwarded as they are to another process's node) and sets the
 * function's result. */
static void run(sqlite3_context *ctx, const char *fn,
                const struct ext_change_request *q, int argc,
                sqlite3_value **argv)
{
    struct ext_exec_probe probe = {func_call_interrupted,
                                   sqlite3_context_db_handle(ctx)};
    struct ext_change_result *r;
    struct ext_node *n = func_acquire(ctx, fn, argc, argv, NULL);
    char msg[1024];

    if (n == NULL) {
        return;
    }
    r = malloc(sizeof *r);
    if (r == NULL) {
        ext_registry_release(n);
        sqlite3_result_error_nomem(ctx);
        return;
    }
    ext_node_change(n, q, &probe, r);
    ext_registry_release(n);
    if (r->rc == 0) {
        done_text(q, r, msg, sizeof msg);
        sqlite3_result_text(ctx, msg, -1, SQLITE_TRANSIENT);
    } else {
        bool worded = strncmp(r->errmsg, "not done", 8) == 0 ||
                      strncmp(r->errmsg, "outcome unknown", 15) == 0 ||
                      strncmp(r->errmsg, "interrupted", 11) == 0;
        snprintf(msg, sizeof msg, "%s: %s%s", fn,
                 worded ? "" : "not done: ", r->errmsg);
        func_call_error(ctx, change_code(r), msg);
    }
    free(r);
}

static void fn_add(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_change_request q = {.op = EXT_CHANGE_ADD};

    if (argc < 2 || argc > 3) {
        fail(ctx,
             "raft_add: takes (id, address) or (id, "
             "address, 'learner')");
        return;
    }
    if (!arg_id(ctx, "raft_add", argv[0], &q.id) ||
        !arg_address(ctx, "raft_add", argv[1], q.address, sizeof q.address)) {
        return;
    }
    if (argc == 3) {
        const char *role = (const char *)sqlite3_value_text(argv[2]);
        if (sqlite3_value_type(argv[2]) != SQLITE_TEXT ||
            strcmp(role, "learner") != 0) {
            fail(ctx,
                 "raft_add: the third argument must be "
                 "'learner' (it stays a learner), or left "
                 "out (promoted to voter once caught up)");
            return;
        }
        q.manual = true;
    }
    run(ctx, "raft_add", &q, argc, argv);
}

/* fn_one is raft_remove, raft_promote and raft_demote: (id). */
static void fn_one(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_change_request q;
    const char *fn;

    (void)argc;
    memset(&q, 0, sizeof q);
    q.op = (uint8_t)(uintptr_t)sqlite3_user_data(ctx);
    fn = q.op == EXT_CHANGE_REMOVE    ? "raft_remove"
         : q.op == EXT_CHANGE_PROMOTE ? "raft_promote"
                                      : "raft_demote";
    if (arg_id(ctx, fn, argv[0], &q.id)) {
        run(ctx, fn, &q, argc, argv);
    }
}

static void fn_update(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_change_request q = {.op = EXT_CHANGE_UPDATE};

    (void)argc;
    if (arg_id(ctx, "raft_update", argv[0], &q.id) &&
        arg_address(ctx, "raft_update", argv[1], q.address, sizeof q.address)) {
        run(ctx, "raft_update", &q, argc, argv);
    }
}

static void fn_transfer(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct ext_change_request q = {.op = EXT_CHANGE_TRANSFER};

    if (argc > 1) {
        fail(ctx,
             "raft_transfer: takes () for a voter the leader picks, or "
             "(id)");
        return;
    }
    /* NULL is no id: raft_transfer((SELECT id ... )) that matched no row
     * must not move the leadership anywhere. */
    if (argc == 1 && sqlite3_value_type(argv[0]) == SQLITE_NULL) {
        fail(ctx,
             "raft_transfer: the server id is NULL (call "
             "raft_transfer() to let the leader pick a voter)");
        return;
    }
    if (argc == 1 && !arg_id(ctx, "raft_transfer", argv[0], &q.id)) {
        return;
    }
    run(ctx, "raft_transfer", &q, argc, argv);
}

/* ---- raft_members ------------------------------------------------------- */

/* The columns, in declaration order. */
enum {
    COL_ID,
    COL_ADDRESS,
    COL_ROLE,
    COL_LEADER,
    COL_MATCH,
    COL_LAG,
    COL_CONTACT,
    COL_CONNECTED,
    COL_AUTO_PROMOTE,
    COL_CHECKSUM,
    COL_COUNT /* the number of columns */
};

/* The table of one connection. */
struct members_vtab {
    sqlite3_vtab base; /* SQLite's part, first */
    sqlite3 *db;       /* the connection, for its database file */
};

/* A scan: a copy of the member view taken by xFilter. */
struct members_cursor {
    sqlite3_vtab_cursor base;                     /* SQLite's part, first */
    struct ext_member_row rows[RAFT_MAX_SERVERS]; /* the view */
    unsigned n;                                   /* rows in it */
    unsigned at;                                  /* current row */
};

static int vt_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **out, char **err)
{
    struct members_vtab *t;
    int rc;
    (void)aux;
    (void)argc;
    (void)argv;
    (void)err;
    rc = sqlite3_declare_vtab(db,
                              "CREATE TABLE x(id INTEGER, address TEXT, role "
                              "TEXT, leader INTEGER, match_index INTEGER, "
                              "lag INTEGER, last_contact_ms INTEGER, "
                              "connected INTEGER, auto_promote INTEGER, "
                              "checksum_differs INTEGER)");
    if (rc != SQLITE_OK) {
        return rc;
    }
    t = sqlite3_malloc(sizeof *t);
    if (t == NULL) {
        return SQLITE_NOMEM;
    }
    memset(t, 0, sizeof *t);
    t->db = db;
    *out = &t->base;
    return SQLITE_OK;
}

static int vt_disconnect(sqlite3_vtab *v)
{
    sqlite3_free(v);
    return SQLITE_OK;
}

static int vt_best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
    (void)v;
    info->estimatedCost = RAFT_MAX_SERVERS;
    info->estimatedRows = RAFT_MAX_SERVERS;
    return SQLITE_OK;
}

static int vt_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
    struct members_cursor *c = sqlite3_malloc(sizeof *c);
    (void)v;
    if (c == NULL) {
        return SQLITE_NOMEM;
    }
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int vt_close(sqlite3_vtab_cursor *cur)
{
    sqlite3_free(cur);
    return SQLITE_OK;
}

/* cell_int reads integer cell @v into *@out; false when it is NULL. */
static bool cell_int(const struct sql_value *v, int64_t *out)
{
    *out = v->type == SQL_INTEGER ? v->integer : 0;
    return v->type == SQL_INTEGER;
}

/* row_from_cells fills @r from the COL_COUNT cells @v of a row of the table
 * another process's node answered. */
static void row_from_cells(const struct sql_value *v, struct ext_member_row *r)
{
    int64_t x;
    memset(r, 0, sizeof *r);
    (void)cell_int(&v[COL_ID], &x);
    r->id = (raft_id)x;
    if (v[COL_ADDRESS].type == SQL_TEXT) {
        snprintf(r->address, sizeof r->address, "%.*s",
                 (int)v[COL_ADDRESS].bytes.len,
                 (const char *)v[COL_ADDRESS].bytes.p);
    }
    r->role = v[COL_ROLE].type == SQL_TEXT &&
                      strncmp(v[COL_ROLE].bytes.p, "voter", 5) == 0
                  ? RAFT_VOTER
                  : RAFT_LEARNER;
    r->leader = cell_int(&v[COL_LEADER], &x) && x != 0;
    r->has_match = cell_int(&v[COL_MATCH], &x);
    r->match = (raft_index)x;
    (void)cell_int(&v[COL_LAG], &x);
    r->lag = (uint64_t)x;
    r->has_contact = cell_int(&v[COL_CONTACT], &x);
    r->last_contact_ms = (uint64_t)x;
    r->connected = cell_int(&v[COL_CONNECTED], &x) ? (int)x : -1;
    r->auto_promote = cell_int(&v[COL_AUTO_PROMOTE], &x) && x != 0;
    (void)cell_int(&v[COL_CHECKSUM], &x);
    r->checksum_differs = (raft_index)x;
}

/* remote_rows fills @c from the node another process runs for @file.
 * Returns SQLITE_NOTFOUND when none does, else SQLITE_OK or an error
 * with @t's message set. */
static int remote_rows(struct members_vtab *t, const char *file,
                       struct members_cursor *c)
{
    struct ext_attach_answer a;
    char *err = NULL;
    int rc = attach_client_table(t->db, file, "raft_members", &a, &err);
    if (rc == RAFT_NOTFOUND) {
        return SQLITE_NOTFOUND;
    }
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = NULL;
    if (rc != 0) {
        t->base.zErrMsg = err;
        return SQLITE_ERROR;
    }
    if (!a.ok || a.n_cols != COL_COUNT) {
        t->base.zErrMsg = sqlite3_mprintf(
            "%s", a.ok ? "raft_members: a malformed answer" : a.errmsg);
        attach_codec_answer_free(&a);
        return SQLITE_ERROR;
    }
    c->n = a.n_rows < RAFT_MAX_SERVERS ? a.n_rows : RAFT_MAX_SERVERS;
    for (unsigned i = 0; i < c->n; i++) {
        row_from_cells(&a.cells[i * COL_COUNT], &c->rows[i]);
    }
    attach_codec_answer_free(&a);
    return SQLITE_OK;
}

static int vt_filter(sqlite3_vtab_cursor *cur, int idx, const char *idx_str,
                     int argc, sqlite3_value **argv)
{
    struct members_cursor *c = (struct members_cursor *)cur;
    struct members_vtab *t = (struct members_vtab *)cur->pVtab;
    const char *file = sqlite3_db_filename(t->db, "main");
    struct ext_node *n;
    (void)idx;
    (void)idx_str;
    (void)argc;
    (void)argv;

    n = file != NULL && file[0] != '\0' ? ext_registry_acquire(file) : NULL;
    c->at = 0;
    if (n == NULL && file != NULL && file[0] != '\0' &&
        !attach_server_serving()) {
        int rc = remote_rows(t, file, c);
        if (rc != SQLITE_NOTFOUND) {
            return rc;
        }
    }
    if (n == NULL) {
        sqlite3_free(t->base.zErrMsg);
        t->base.zErrMsg = sqlite3_mprintf(
            "raft_members: no raftsql node runs for %s in this process; "
            "call raft_start(config) first",
            file != NULL && file[0] != '\0' ? file : "this database");
        return SQLITE_ERROR;
    }
    c->n = ext_node_members(n, c->rows, RAFT_MAX_SERVERS);
    ext_registry_release(n);
    return SQLITE_OK;
}

static int vt_next(sqlite3_vtab_cursor *cur)
{
    ((struct members_cursor *)cur)->at++;
    return SQLITE_OK;
}

static int vt_eof(sqlite3_vtab_cursor *cur)
{
    struct members_cursor *c = (struct members_cursor *)cur;
    return c->at >= c->n;
}

static int vt_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    struct members_cursor *c = (struct members_cursor *)cur;
    const struct ext_member_row *r = &c->rows[c->at];

    switch (col) {
        case COL_ID:
            sqlite3_result_int64(ctx, (sqlite3_int64)r->id);
            break;
        case COL_ADDRESS:
            if (r->address[0] != '\0') {
                sqlite3_result_text(ctx, r->address, -1, SQLITE_TRANSIENT);
            }
            break;
        case COL_ROLE:
            sqlite3_result_text(ctx,
                                r->role == RAFT_VOTER ? "voter" : "learner", -1,
                                SQLITE_STATIC);
            break;
        case COL_LEADER:
            sqlite3_result_int(ctx, r->leader ? 1 : 0);
            break;
        case COL_MATCH:
        case COL_LAG:
            if (r->has_match) {
                sqlite3_result_int64(
                    ctx, (sqlite3_int64)(col == COL_MATCH ? r->match : r->lag));
            }
            break;
        case COL_CONTACT:
            if (r->has_contact) {
                sqlite3_result_int64(ctx, (sqlite3_int64)r->last_contact_ms);
            }
            break;
        case COL_CONNECTED:
            if (r->connected >= 0) {
                sqlite3_result_int(ctx, r->connected);
            }
            break;
        case COL_CHECKSUM:
            if (r->checksum_differs != 0) {
                sqlite3_result_int64(ctx, (sqlite3_int64)r->checksum_differs);
            }
            break;
        default:
            sqlite3_result_int(ctx, r->auto_promote ? 1 : 0);
            break;
    }
    return SQLITE_OK;
}

static int vt_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *out)
{
    *out = ((struct members_cursor *)cur)->at + 1;
    return SQLITE_OK;
}

/* Eponymous only (xCreate NULL): SELECT * FROM raft_members. */
static sqlite3_module members_module = {
    .iVersion = 0,
    .xCreate = NULL,
    .xConnect = vt_connect,
    .xBestIndex = vt_best_index,
    .xDisconnect = vt_disconnect,
    .xDestroy = vt_disconnect,
    .xOpen = vt_open,
    .xClose = vt_close,
    .xFilter = vt_filter,
    .xNext = vt_next,
    .xEof = vt_eof,
    .xColumn = vt_column,
    .xRowid = vt_rowid,
};

int members_register(sqlite3 *db)
{
    const int admin = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    static const struct {
        const char *name;
        int n_arg;
        uint8_t op;
        void (*fn)(sqlite3_context *, int, sqlite3_value **);
    } fns[] = {
        {"raft_add", -1, EXT_CHANGE_ADD, fn_add},
        {"raft_remove", 1, EXT_CHANGE_REMOVE, fn_one},
        {"raft_promote", 1, EXT_CHANGE_PROMOTE, fn_one},
        {"raft_demote", 1, EXT_CHANGE_DEMOTE, fn_one},
        {"raft_update", 2, EXT_CHANGE_UPDATE, fn_update},
        {"raft_transfer", -1, EXT_CHANGE_TRANSFER, fn_transfer},
    };
    int rc = SQLITE_OK;

    for (size_t i = 0; rc == SQLITE_OK && i < sizeof fns / sizeof fns[0]; i++) {
        rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].n_arg, admin,
                                        (void *)(uintptr_t)fns[i].op, fns[i].fn,
                                        NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_module(db, "raft_members", &members_module, NULL);
    }
    return rc;
}
