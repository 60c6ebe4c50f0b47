/* ext/'s side of the boundary to the state machine (sql/): sql/'s error
 * codes become project codes, request payloads are built in raft_bufs, and
 * the apply connection is opened without ext/'s SQL functions. */

#ifndef EXT_SQLBRIDGE_H
#define EXT_SQLBRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "../../raft/buf.h"
#include "../../sql/sql.h"

/* sqlbridge_rc returns the project code (raft/err.h) of sql/ code @rc: 0
 * stays 0, and each SQL_ERR_<name> becomes RAFT_<name>. Pure; any
 * thread. */
int sqlbridge_rc(int rc);

/* sqlbridge_open is sql_fsm_open of @path with ext/'s SQL functions
 * (func.c) removed from the apply connection: a request calling raft_exec
 * there would wait on the apply thread from inside it, and raft_stop would
 * join it. Returns 0 with *@out set, or a project code with @errmsg
 * (@errmsg_len bytes) saying why: RAFT_NOTFOUND, RAFT_CORRUPT,
 * RAFT_INVALID, RAFT_IOERR, RAFT_NOMEM (see sql_fsm_open). Thread: the one
 * that then uses the connection. */
int sqlbridge_open(const char *path, struct sql_fsm **out, char *errmsg,
                   size_t errmsg_len);

/* sqlbridge_encode builds the payload of a write request
 * (sql_request_size_opts and sql_request_encode_opts: @id, @sql of
 * @sql_len bytes, @n_params @params, options @opts, may be NULL for a
 * plain request) in a new raft_buf, written once, that the caller owns
 * (*@out, one reference). Any thread.
 * Errors: RAFT_TOOBIG (over @max_bytes or the format's limits),
 * RAFT_INVALID (empty SQL, a bad value or parameter name, a bad client
 * id), RAFT_NOMEM; @errmsg (@errmsg_len bytes) says which. */
int sqlbridge_encode(const uint64_t id[2], const char *sql, size_t sql_len,
                     const struct sql_param *params, unsigned n_params,
                     const struct sql_request_opts *opts, uint64_t max_bytes,
                     struct raft_buf **out, char *errmsg, size_t errmsg_len);

/* sqlbridge_stamp returns in *@out a new raft_buf (one reference, the
 * caller's) holding the request payload @in with the leader's @stamp
 * (sql_request_stamp). @in is not changed: it may be shared. Any thread.
 * Errors: RAFT_CORRUPT (not a request payload), RAFT_FORMAT (an old
 * format version), RAFT_NOMEM. */
int sqlbridge_stamp(const struct raft_buf *in, const struct sql_stamp *stamp,
                    struct raft_buf **out);

#endif /* EXT_SQLBRIDGE_H */
