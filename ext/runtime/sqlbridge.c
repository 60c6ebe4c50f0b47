/* ext/'s side of the boundary to sql/ (see sqlbridge.h): code translation,
 * request payloads in raft_bufs, and the functions the apply connection
 * must not have. */

#include "sqlbridge.h"

#include <inttypes.h>

#include "../../raft/err.h"

/* ext/'s SQL functions (name, argument count, as func.c registers them):
 * removed from the apply connection when an auto-extension registered
 * them there. A function added to func.c is added here too. */
static const struct sql_function ext_functions[] = {
    {"raft_start", 1},
    {"raft_exec", -1},
    {"raft_query", -1},
    {"raft_exec_id", -1},
    {"raft_query_id", -1},
    {"raft_last_insert_rowid", 0},
    {"raft_last_error", 0},
    {"raft_status", 0},
    {"raft_metrics", 0},
    {"raft_leader", 0},
    {"raft_stop", 0},
    {"raft_add", -1},
    {"raft_remove", 1},
    {"raft_promote", 1},
    {"raft_demote", 1},
    {"raft_transfer", -1},
    {"raft_update", 2},
    {"raft_tls_reload", 0},
    {"raft_cluster_id", 0},
    {"raft_verify", 0},
    {"raft_repair", 0},
    {"raft_lease_end", 0},
    {"raft_backup", -1},
    {"raft_load_sql", -1},
    {"raft_barrier", 0},
    /* The guard's tracker (guard.c): removing it forgets the connection,
     * whose statements no other thread then expires. */
    {"raftsql_guarded_connection", 0},
};

int sqlbridge_rc(int rc)
{
    switch (rc) {
        case 0:
            return 0;
#define EXT__SQL_ERR_CASE(name, text)                                          \
    case SQL_ERR_##name:                                                       \
        return RAFT_##name;
            SQL_ERRORS(EXT__SQL_ERR_CASE)
#undef EXT__SQL_ERR_CASE
        default:
            /* Not a code of sql/err.h: cannot happen. */
            return RAFT_IOERR;
    }
}

int sqlbridge_open(const char *path, struct sql_fsm **out, char *errmsg,
                   size_t errmsg_len)
{
    return sqlbridge_rc(sql_fsm_open(
        path, ext_functions, sizeof ext_functions / sizeof ext_functions[0],
        out, errmsg, errmsg_len));
}

int sqlbridge_encode(const uint64_t id[2], const char *sql, size_t sql_len,
                     const struct sql_param *params, unsigned n_params,
                     const struct sql_request_opts *opts, uint64_t max_bytes,
                     struct raft_buf **out, char *errmsg, size_t errmsg_len)
{
    struct raft_buf *b;
    size_t len = 0;
    int rc;

    rc = sql_request_size_opts(sql, sql_len, params, n_params, opts, max_bytes,
                               &len, errmsg, errmsg_len);
    if (rc != 0) {
        return sqlbridge_rc(rc);
    }
    b = raft_buf_new(len);
    if (b == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory (%" PRIu64 " bytes)",
                     (uint64_t)len);
        return RAFT_NOMEM;
    }
    rc = sql_request_encode_opts(id, sql, sql_len, params, n_params, opts,
                                 b->data, len);
    if (rc != 0) {
        raft_errmsgf(errmsg, errmsg_len, "encode: %s", sql_strerror(rc));
        raft_buf_unref(b);
        return sqlbridge_rc(rc);
    }
    *out = b;
    return 0;
}

int sqlbridge_stamp(const struct raft_buf *in, const struct sql_stamp *stamp,
                    struct raft_buf **out)
{
    struct raft_buf *b = raft_buf_new(in->len);
    int rc;

    if (b == NULL) {
        return RAFT_NOMEM;
    }
    rc = sql_request_stamp(in->data, in->len, stamp, b->data);
    if (rc != 0) {
        raft_buf_unref(b);
        return sqlbridge_rc(rc);
    }
    *out = b;
    return 0;
}
