/* Determinism shims of the apply connection: seeded random()/randomblob()
 * and a VFS whose "now" is the applied entry's timestamp (determinism.h).
 *
 * The VFS forwards every method to the default VFS (vfs_forward.h), and
 * files are the default VFS's own: only the two clock methods differ. SQLite
 * reads "now" for date(), time(), datetime(), julianday(), unixepoch(),
 * strftime() and CURRENT_TIME/DATE/TIMESTAMP through xCurrentTimeInt64 of
 * the connection's VFS, once per statement step. */

#include "determinism.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "err.h"
#include "sql.h"
#include "vfs_forward.h"

SQLITE_EXTENSION_INIT3

/* Julian day number of the Unix epoch, in ms (2440587.5 days). */
#define SQL__DETERMINISM_EPOCH_JD_MS 210866760000000LL

/* det_of is the context of the shim @v (its pAppData is &d->base). */
static struct sql_determinism *det_of(sqlite3_vfs *v)
{
    return (struct sql_determinism *)((char *)v->pAppData -
                                      offsetof(struct sql_determinism, base));
}

static int shim_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    struct sql_determinism *d = det_of(v);

    if (d->active) {
        *out = SQL__DETERMINISM_EPOCH_JD_MS + d->time_ms;
        return SQLITE_OK;
    }
    return vfs_forward_current_time_int64(v, out);
}

static int shim_current_time(sqlite3_vfs *v, double *out)
{
    sqlite3_int64 ms;
    int rc = shim_current_time_int64(v, &ms);

    *out = (double)ms / 86400000.0;
    return rc;
}

int determinism_init(struct sql_determinism *d, char *errmsg, size_t errmsg_len)
{
    sqlite3_vfs *base;
    int rc;

    memset(d, 0, sizeof *d);
    base = sqlite3_vfs_find(NULL);
    if (base == NULL) {
        snprintf(errmsg, errmsg_len, "no default SQLite VFS");
        return SQL_ERR_IOERR;
    }
    snprintf(d->name, sizeof d->name, SQL__APPLY_VFS_PREFIX "%p", (void *)d);
    d->base = base;
    vfs_forward_fill(&d->vfs, &d->base, d->name);
    d->vfs.xCurrentTime = shim_current_time;
    d->vfs.xCurrentTimeInt64 = shim_current_time_int64;
    rc = sqlite3_vfs_register(&d->vfs, 0);
    if (rc != SQLITE_OK) {
        snprintf(errmsg, errmsg_len, "sqlite3_vfs_register: %s",
                 sqlite3_errstr(rc));
        return SQL_ERR_IOERR;
    }
    d->registered = 1;
    return 0;
}

void determinism_close(struct sql_determinism *d)
{
    if (d->clock_db != NULL) {
        sqlite3_close(d->clock_db);
        d->clock_db = NULL;
    }
    if (d->registered) {
        sqlite3_vfs_unregister(&d->vfs);
        d->registered = 0;
    }
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t determinism_next(struct sql_determinism *d)
{
    uint64_t *s = d->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

void determinism_begin(struct sql_determinism *d, uint64_t seed,
                       int64_t time_ms)
{
    uint64_t x = seed;
    int i;

    /* splitmix64 never yields an all-zero xoshiro state from 4 draws. */
    for (i = 0; i < 4; i++) {
        d->s[i] = splitmix64(&x);
    }
    d->time_ms = time_ms;
    d->active = 1;
}

void determinism_end(struct sql_determinism *d)
{
    d->active = 0;
}

/* random(): like SQLite's, a signed 64-bit value, never INT64_MIN (so that
 * abs(random()) is always defined). */
static void fn_random(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct sql_determinism *d = sqlite3_user_data(ctx);
    uint64_t u = determinism_next(d);
    int64_t r;

    (void)argc;
    (void)argv;
    memcpy(&r, &u, sizeof r);
    if (r < 0) {
        r = -(r & INT64_MAX);
    }
    sqlite3_result_int64(ctx, r);
}

/* randomblob(N): like SQLite's, N random bytes, N < 1 taken as 1, and a
 * "too big" error past SQLITE_LIMIT_LENGTH. */
static void fn_randomblob(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct sql_determinism *d = sqlite3_user_data(ctx);
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    sqlite3_int64 n = sqlite3_value_int64(argv[0]);
    unsigned char *p;
    sqlite3_int64 i;

    (void)argc;
    if (n < 1) {
        n = 1;
    }
    if (n > sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1)) {
        sqlite3_result_error_toobig(ctx);
        return;
    }
    p = sqlite3_malloc64((sqlite3_uint64)n);
    if (p == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    for (i = 0; i < n; i += 8) {
        uint64_t u = determinism_next(d);
        sqlite3_int64 k;

        for (k = 0; k < 8 && i + k < n; k++) {
            p[i + k] = (unsigned char)(u >> (8 * k));
        }
    }
    sqlite3_result_blob64(ctx, p, (sqlite3_uint64)n, sqlite3_free);
}

/* is_zone_modifier says whether @v is the text 'localtime' or 'utc' (any
 * case, surrounding blanks ignored): modifiers whose result depends on the
 * node's time zone. */
static int is_zone_modifier(sqlite3_value *v)
{
    const char *t;
    size_t len;
    if (sqlite3_value_type(v) != SQLITE_TEXT) {
        return 0;
    }
    t = (const char *)sqlite3_value_text(v);
    while (*t == ' ' || *t == '\t') {
        t++;
    }
    len = strlen(t);
    while (len > 0 && (t[len - 1] == ' ' || t[len - 1] == '\t')) {
        len--;
    }
    return (len == 9 && strncasecmp(t, "localtime", 9) == 0) ||
           (len == 3 && strncasecmp(t, "utc", 3) == 0);
}

/* fn_date wraps one of SQLite's date and time functions: it refuses the
 * time-zone modifiers (each node may run in another zone) and evaluates
 * the builtin on the shim's in-memory connection, where "now" is the
 * entry's time. https://sqlite.org/lang_datefunc.html */
static void fn_date(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const struct sql_date_fn *fn = sqlite3_user_data(ctx);
    const char *name = fn->name;
    struct sql_determinism *d = fn->d;
    sqlite3_stmt *stmt = NULL;
    char sql[64 + 4 * 100];
    size_t off;
    int rc;

    if (argc > 100) {
        sqlite3_result_error(ctx, "too many arguments", -1);
        return;
    }
    for (int i = 0; i < argc; i++) {
        if (is_zone_modifier(argv[i])) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "%s(): the '%s' modifier depends on each node's time "
                     "zone and cannot be used in raft_exec; store UTC and "
                     "convert when reading",
                     name, sqlite3_value_text(argv[i]));
            sqlite3_result_error(ctx, msg, -1);
            /* A refusal of raft_exec's policy, as the authorizer's. */
            sqlite3_result_error_code(ctx, SQLITE_AUTH);
            return;
        }
    }
    off = (size_t)snprintf(sql, sizeof sql, "SELECT %s(", name);
    for (int i = 0; i < argc; i++) {
        off += (size_t)snprintf(sql + off, sizeof sql - off, "%s?%d",
                                i ? "," : "", i + 1);
    }
    snprintf(sql + off, sizeof sql - off, ")");
    rc = sqlite3_prepare_v2(d->clock_db, sql, -1, &stmt, NULL);
    for (int i = 0; rc == SQLITE_OK && i < argc; i++) {
        rc = sqlite3_bind_value(stmt, i + 1, argv[i]);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(stmt);
    }
    if (rc == SQLITE_ROW) {
        sqlite3_result_value(ctx, sqlite3_column_value(stmt, 0));
    } else {
        sqlite3_result_error(ctx, sqlite3_errmsg(d->clock_db), -1);
        sqlite3_result_error_code(ctx, rc == SQLITE_DONE ? SQLITE_ERROR : rc);
    }
    sqlite3_finalize(stmt);
}

/* fn_total_changes refuses total_changes(): it counts this connection's
 * own history, which differs between nodes. */
static void fn_total_changes(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_error(ctx,
                         "total_changes() counts each node's own history "
                         "and cannot be used in raft_exec; use changes()",
                         -1);
}

int determinism_install(struct sql_determinism *d, sqlite3 *db)
{
    static const char *const names[] = {"date",      "time",      "datetime",
                                        "julianday", "unixepoch", "strftime"};
    int flags = SQLITE_UTF8 | SQLITE_INNOCUOUS;
    int rc;

    rc = sqlite3_create_function_v2(db, "random", 0, flags, d, fn_random, NULL,
                                    NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function_v2(db, "randomblob", 1, flags, d,
                                        fn_randomblob, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function_v2(db, "total_changes", 0, flags, d,
                                        fn_total_changes, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK && d->clock_db == NULL) {
        rc = sqlite3_open_v2(":memory:", &d->clock_db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                             d->name);
        if (rc != SQLITE_OK) {
            sqlite3_close(d->clock_db);
            d->clock_db = NULL;
        }
    }
    for (size_t i = 0; rc == SQLITE_OK && i < 6; i++) {
        d->date_fns[i].d = d;
        d->date_fns[i].name = names[i];
        rc =
            sqlite3_create_function_v2(db, names[i], -1, flags, &d->date_fns[i],
                                       fn_date, NULL, NULL, NULL);
    }
    return rc;
}

bool sql_is_apply_vfs(const char *name)
{
    return name != NULL && strncmp(name, SQL__APPLY_VFS_PREFIX,
                                   sizeof SQL__APPLY_VFS_PREFIX - 1) == 0;
}
