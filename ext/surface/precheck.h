/* The caller's check of a raft_exec request before it enters the log:
 * what cannot succeed whatever the schema or the data is refused as "not
 * applied", instead of taking a log index and failing on every node: a
 * syntax error, a parameter count that does not match (a bad call), and
 * everything raft_exec's policy refuses for what the SQL text does
 * (sql_refusal_action and sql_refusal_statement, the apply connection's
 * own rules: transaction control, VACUUM, ATTACH, TEMP objects,
 * node-local functions and tables, 'localtime', PRAGMAs that cannot be
 * replicated, raftsql_* tables). Errors that may depend on the schema
 * ("no such table", which a later statement of the same request, or a
 * lagging follower, may explain) stay results of the entry. */

#ifndef EXT_PRECHECK_H
#define EXT_PRECHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

/* Most requests a connection remembers as checked. */
#define EXT_PRECHECK_CACHE 8

/* The requests a connection checked and found fine, by the hash of their
 * text and their number of values: an application repeats the same few
 * statements, which are then checked once. Zero it to start. */
struct ext_precheck_cache {
    uint64_t hash[EXT_PRECHECK_CACHE];     /* XXH64 of the SQL text */
    uint32_t len[EXT_PRECHECK_CACHE];      /* its length, bytes */
    uint32_t n_values[EXT_PRECHECK_CACHE]; /* values given with it */
    unsigned next;                         /* slot to fill next */
};

/* precheck_request prepares (never runs) each statement of the SQL text
 * @sql (@len bytes, NUL-terminated) on the caller's connection @db, with
 * the guard set aside (guard_check_begin: a host's authorizer never sees
 * these statements), and checks it against the @n_values values the
 * caller gives. Returns 0 when nothing is wrong or what is wrong may
 * depend on the schema (left to the entry), or RAFT_INVALID with @errmsg
 * (@errmsg_len bytes) saying why, in the words the apply connection
 * would use, and *@out_refused (always written) telling the kind:
 *   - false, a bad call: SQLite's syntax error, too many values
 *     (sql_request_surplus_msg's text), "missing value for parameter %d
 *     (%s)";
 *   - true, what raft_exec refuses to run: the reason
 *     sql_refusal_action or sql_refusal_statement gives ("BEGIN cannot
 *     be used in raft_exec: each request already runs as one
 *     transaction", "VACUUM cannot be used in raft_exec: ...").
 * @cache (may be NULL) remembers requests found fine. Thread: the
 * caller's, inside a SQL function on @db. */
int precheck_request(sqlite3 *db, const char *sql, size_t len,
                     unsigned n_values, struct ext_precheck_cache *cache,
                     bool *out_refused, char *errmsg, size_t errmsg_len);

struct guard_check; /* guard_check.h */

/* precheck_statement is precheck_request's check of one statement, which
 * raft_load_sql's check of a script (load_check.c) applies to every
 * statement it sends, so that both refuse the same statements with the
 * same words. It takes:
 *   - @s, the statement prepared (never stepped) on a connection whose
 *     authorizer noted raft_exec's policy in @seen meanwhile
 *     (guard_check_note), or NULL when the prepare failed or found no
 *     statement (then only a refusal @seen noted counts);
 *   - @setting, the cluster-wide setting set by the request so far (a
 *     PRAGMA: guard_check.setting), or NULL, and @beside, whether the
 *     statement shares its request with others;
 *   - @n_values, the values given with the request; *@max_params takes
 *     the statement's parameter count in (the request's most).
 * Returns 0, or RAFT_INVALID with @errmsg (@errmsg_len bytes) and
 * *@out_refused (always written), as precheck_request:
 *   - true: what @seen noted (sql_refusal_action), or the statement's
 *     text refused (sql_refusal_statement: VACUUM, a 'localtime'
 *     literal), or a setting beside other statements
 *     (sql_refusal_setting_alone);
 *   - false: "missing value for parameter %d (%s)".
 * Thread: any (it reads @s, which the caller holds). */
int precheck_statement(sqlite3_stmt *s, const struct guard_check *seen,
                       const char *setting, bool beside, unsigned n_values,
                       int *max_params, bool *out_refused, char *errmsg,
                       size_t errmsg_len);

#endif /* EXT_PRECHECK_H */
