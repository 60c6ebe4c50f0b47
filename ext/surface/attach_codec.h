/* The codec of the attach socket (attach_server.c, attach_client.c): a
 * call of a raftsql SQL function from another process and its answer, as
 * JSON texts (jansson). Pure: no I/O, no SQLite. */

#ifndef EXT_ATTACH_CODEC_H
#define EXT_ATTACH_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../sql/sql.h"

/* Longest function name a call carries, with its NUL. */
#define EXT_ATTACH_FN_MAX 32

/* Most arguments of one call (raft_exec's parameters and its SQL). */
#define EXT_ATTACH_ARGS_MAX 32767

/* Most cells of a table answer (raft_members: 10 columns). */
#define EXT_ATTACH_CELLS_MAX 4096

/* The attach protocol this build speaks, as the node's pointer file says
 * it (attach_sock.h; a file without it: 1). Version 1: calls of raftsql's
 * SQL functions. Version 2: also the lease requests below. Version 3:
 * EXT_ATTACH_LEASE_RELEASE may carry the writer's WAL marks. Version 4:
 * EXT_ATTACH_LEASE_ACQUIRE may carry flags. A node of
 * version 1 takes a lease request for a malformed call and closes the
 * connection, so a client sends one only to a node of version 2 or
 * later; likewise the marks only to a node of version 3 or later, and
 * the flags only to one of version 4 or later. */
#define EXT_ATTACH_VERSION 4

/* The lease requests (version 2): calls whose function is one of these
 * names, served by the node's process itself (attach_server.c), not by a
 * SQL function, on one connection kept for the lease's life (its close
 * ends the lease: lease_client.h):
 *   EXT_ATTACH_LEASE_ACQUIRE (the client's holder token, an integer,
 *     and from version 4 an optional integer: ext_node_lease_acquire's
 *     flags, EXT_LEASE_ONE_TRY): the lease id;
 *   EXT_ATTACH_LEASE_COMMIT (the lease id, the changeset as a blob): 0;
 *   EXT_ATTACH_LEASE_RELEASE (the lease id, and from version 3 an
 *     optional blob: what the writer's connection read of the file's
 *     WAL-index header under its write lock, a struct sql_wal_marks,
 *     its two headers in order; another length is taken for none): 0,
 *     once released.
 * Lease ids are unsigned 64-bit values, carried as the integer with the
 * same bits. An error answer carries the project's code (raft/err.h:
 * RAFT_BUSY, RAFT_UNKNOWN...) rather than a SQLite one, and the node's
 * words (ext_node_lease_acquire, _commit: node.h). */
#define EXT_ATTACH_LEASE_ACQUIRE "lease_acquire"
#define EXT_ATTACH_LEASE_COMMIT "lease_commit"
#define EXT_ATTACH_LEASE_RELEASE "lease_release"

/* An answer. Values decoded own their bytes (attach_codec_answer_free).
 * Invariant: ok, or errmsg is set. */
struct ext_attach_answer {
    bool ok;                 /* the function returned a value */
    struct sql_value value;  /* that value, when ok and no table */
    int64_t rowid;           /* raft_last_insert_rowid() after the call */
    int code;                /* SQLite (extended) result code, when !ok */
    char errmsg[1024];       /* the function's error text, when !ok */
    struct sql_value *cells; /* a table answer, row after row, or NULL */
    unsigned n_rows;         /* rows of the table answer */
    unsigned n_cols;         /* columns of the table answer */
};

/* Values: NULL is null, an integer a JSON integer, a finite float a JSON
 * real, text a JSON string (or {"t": hex} when it is no valid UTF-8), a
 * blob {"b": hex}, an infinite float {"r": "inf"} or {"r": "-inf"}. */

/* attach_codec_call_encode encodes a call of function @fn with @n_args
 * values @args into *@out (malloc'd JSON text, the caller frees it) of
 * *@out_len bytes. Errors: RAFT_INVALID (@fn empty or too long, too many
 * arguments, a value of no known type), RAFT_NOMEM. Pure. */
int attach_codec_call_encode(const char *fn, const struct sql_value *args,
                             unsigned n_args, char **out, size_t *out_len);

/* attach_codec_call_decode decodes a call from @data (@len bytes) into
 * @out_fn and *@out_args (malloc'd; free with attach_codec_values_free)
 * and *@out_n. Writes the outputs only on success. Errors: RAFT_PROTO
 * with @errmsg (@errmsg_len bytes) saying what is wrong (not JSON, no or
 * a bad function name, a bad value), RAFT_NOMEM. Pure. */
int attach_codec_call_decode(const char *data, size_t len,
                             char out_fn[EXT_ATTACH_FN_MAX],
                             struct sql_value **out_args, unsigned *out_n,
                             char *errmsg, size_t errmsg_len);

/* attach_codec_answer_encode encodes @a into *@out (malloc'd JSON text)
 * of *@out_len bytes. Errors: RAFT_INVALID (a value of no known type, a
 * table over EXT_ATTACH_CELLS_MAX cells), RAFT_NOMEM. Pure. */
int attach_codec_answer_encode(const struct ext_attach_answer *a, char **out,
                               size_t *out_len);

/* attach_codec_answer_decode decodes an answer from @data (@len bytes)
 * into @out (its values own their bytes: attach_codec_answer_free).
 * Errors: RAFT_PROTO with @errmsg saying what is wrong, RAFT_NOMEM;
 * @out is then left empty (nothing to free). Pure. */
int attach_codec_answer_decode(const char *data, size_t len,
                               struct ext_attach_answer *out, char *errmsg,
                               size_t errmsg_len);

/* attach_codec_answer_free frees the values @a owns (decoded answers). */
void attach_codec_answer_free(struct ext_attach_answer *a);

/* attach_codec_values_free frees @n decoded values @v and their bytes. */
void attach_codec_values_free(struct sql_value *v, unsigned n);

#endif /* EXT_ATTACH_CODEC_H */
