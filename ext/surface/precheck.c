/* The caller's check of a request before it enters the log (precheck.h).
 * The statements are prepared on the caller's own connection with the
 * write guard set aside for this thread (guard.h), and never stepped. */

#include "precheck.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "../../raft/err.h"
#include "../../sql/sql.h"
#include "guard_check.h"

SQLITE_EXTENSION_INIT3

/* is_syntax_error says whether SQLite's message @msg of a failed prepare
 * is the parser's (the same whatever the schema). */
static bool is_syntax_error(const char *msg)
{
    return strstr(msg, "syntax error") != NULL ||
           strcmp(msg, "incomplete input") == 0 ||
           strncmp(msg, "unrecognized token", 18) == 0;
}

/* cached says whether @cache holds (@hash, @len, @n_values). */
static bool cached(const struct ext_precheck_cache *c, uint64_t hash,
                   size_t len, unsigned n_values)
{
    for (unsigned i = 0; c != NULL && i < EXT_PRECHECK_CACHE; i++) {
        if (c->hash[i] == hash && c->len[i] == len &&
            c->n_values[i] == n_values) {
            return true;
        }
    }
    return false;
}

/* check_statement checks prepared statement @s given @n_values values;
 * *@max_params takes its parameter count in. */
static int check_statement(sqlite3_stmt *s, unsigned n_values, int *max_params,
                           char *errmsg, size_t errmsg_len)
{
    int n = sqlite3_bind_parameter_count(s);
    if (n > *max_params) {
        *max_params = n;
    }
    /* raft_exec's values are positional: the i-th binds index i of every
     * statement (sql/apply.c). */
    for (int k = (int)n_values + 1; k <= n; k++) {
        const char *name = sqlite3_bind_parameter_name(s, k);
        snprintf(errmsg, errmsg_len, "missing value for parameter %d (%s)", k,
                 name != NULL ? name : "?");
        return RAFT_INVALID;
    }
    return 0;
}

int precheck_statement(sqlite3_stmt *s, const struct guard_check *seen,
                       const char *setting, bool beside, unsigned n_values,
                       int *max_params, bool *out_refused, char *errmsg,
                       size_t errmsg_len)
{
    *out_refused = false;
    if (seen->refused[0] != '\0') {
        /* Refused for what the statement does, whatever the schema: an
         * action seen before a failed prepare counts. */
        snprintf(errmsg, errmsg_len, "%s", seen->refused);
        *out_refused = true;
        return RAFT_INVALID;
    }
    if (s == NULL) {
        return 0;
    }
    if (sql_refusal_statement(sqlite3_sql(s), errmsg, errmsg_len) ||
        (setting != NULL && beside &&
         sql_refusal_setting_alone(setting, errmsg, errmsg_len))) {
        *out_refused = true;
        return RAFT_INVALID;
    }
    return check_statement(s, n_values, max_params, errmsg, errmsg_len);
}

int precheck_request(sqlite3 *db, const char *sql, size_t len,
                     unsigned n_values, struct ext_precheck_cache *cache,
                     bool *out_refused, char *errmsg, size_t errmsg_len)
{
    uint64_t hash = XXH64(sql, len, 0);
    const char *tail = sql, *end = sql + len;
    struct guard_check seen;
    const char *setting = NULL;
    unsigned n_statements = 0;
    int max_params = 0;
    bool complete = true;
    int rc = 0;

    *out_refused = false;
    if (cached(cache, hash, len, n_values) || len >= (size_t)INT32_MAX) {
        return 0;
    }
    guard_check_begin(&seen);
    while (tail < end && rc == 0) {
        sqlite3_stmt *s = NULL;
        const char *next = NULL;
        int prc;
        /* The length includes the NUL after the text. */
        prc = sqlite3_prepare_v2(db, tail, (int)(end - tail) + 1, &s, &next);
        if (prc == SQLITE_OK && s != NULL) {
            n_statements++;
            if (seen.setting != NULL) {
                setting = seen.setting;
            }
        }
        rc = precheck_statement(prc == SQLITE_OK ? s : NULL, &seen, setting,
                                n_statements > 1, n_values, &max_params,
                                out_refused, errmsg, errmsg_len);
        if (rc == 0 && prc != SQLITE_OK) {
            const char *msg = sqlite3_errmsg(db);
            if (is_syntax_error(msg)) {
                snprintf(errmsg, errmsg_len, "%s", msg);
                rc = RAFT_INVALID;
            } else {
                complete = false; /* may depend on the schema: the entry's */
            }
        }
        sqlite3_finalize(s);
        if (rc != 0 || prc != SQLITE_OK || next == NULL || next <= tail) {
            break;
        }
        tail = next;
    }
    guard_check_end();
    if (rc == 0 && complete && n_values > (unsigned)max_params) {
        sql_request_surplus_msg(errmsg, errmsg_len, n_values, max_params,
                                n_statements);
        rc = RAFT_INVALID;
    }
    if (rc == 0 && complete && cache != NULL) {
        unsigned i = cache->next++ % EXT_PRECHECK_CACHE;
        cache->hash[i] = hash;
        cache->len[i] = (uint32_t)len;
        cache->n_values[i] = n_values;
    }
    return rc;
}
