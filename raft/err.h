/* Project-wide error codes: one enum shared by every module, with strings.
 *
 * Every fallible function in raftsql returns 0 on success or one of these
 * positive codes. Foreign codes (libuv, LMDB, SQLite) are translated once, at
 * the module boundary that calls the foreign library (canonical raft err.h). */

#ifndef RAFT_ERR_H
#define RAFT_ERR_H

#include <stddef.h>

/* X(name, number, text): the list of project error codes. */
#define RAFT_ERRORS(X)                                                         \
    X(NOMEM, 1, "out of memory")                                               \
    X(INVALID, 2, "invalid argument")                                          \
    X(IOERR, 3, "I/O error")                                                   \
    X(NOSPACE, 4, "no space left")                                             \
    X(CORRUPT, 5, "corrupt data")                                              \
    X(NOTLEADER, 6, "not the leader")                                          \
    X(SHUTDOWN, 7, "shutting down")                                            \
    X(CANCELED, 8, "canceled")                                                 \
    X(TIMEOUT, 9, "timed out")                                                 \
    X(BUSY, 10, "busy")                                                        \
    X(NOTFOUND, 11, "not found")                                               \
    X(COMPACTED, 12, "entry compacted")                                        \
    X(TOOBIG, 13, "too big")                                                   \
    X(PROTO, 14, "protocol error")                                             \
    X(FORMAT, 15, "unsupported format version")                                \
    X(NOCONN, 16, "not connected")                                             \
    X(UNKNOWN, 17, "outcome unknown")                                          \
    X(DIVERGED, 18, "diverged replica")

enum raft_err {
#define RAFT__ERR_ENUM(name, num, text) RAFT_##name = num,
    RAFT_ERRORS(RAFT__ERR_ENUM)
#undef RAFT__ERR_ENUM
};

/* raft_strerror returns a static, human-readable text for @rc (0 gives
 * "ok"; an unknown code gives "unknown error"). Never NULL. Any thread. */
const char *raft_strerror(int rc);

/* raft_errmsgf formats an error message into @buf (@len bytes, always
 * NUL-terminated, truncated if longer); does nothing when @buf is NULL or
 * @len is 0, so callers may pass an optional buffer straight through.
 * Any thread. */
void raft_errmsgf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* RAFT_ERR_H */
