/* The error codes of sql/: every fallible function of sql/ returns 0 or one
 * of these positive codes, with a message. ext/ translates them into the
 * project's codes at its boundary (ext/runtime/sqlbridge.c), as it does for
 * LMDB's and SQLite's. */

#ifndef SQL_ERR_H
#define SQL_ERR_H

#include <stddef.h>

/* X(name, text): the codes, numbered from 1 in this order. They are never
 * stored or sent, so the numbers may change; ext/ maps each by name to
 * the project code of the same meaning, RAFT_<name> (raft/err.h). */
#define SQL_ERRORS(X)                                                          \
    X(NOMEM, "out of memory")                                                  \
    X(INVALID, "invalid argument")                                             \
    X(IOERR, "I/O error")                                                      \
    X(NOSPACE, "no space left")                                                \
    X(CORRUPT, "corrupt data")                                                 \
    X(BUSY, "busy")                                                            \
    X(NOTFOUND, "not found")                                                   \
    X(TOOBIG, "too big")                                                       \
    X(FORMAT, "unsupported format version")                                    \
    X(DIVERGED, "diverged replica")

enum sql_err {
    SQL_ERR__NONE, /* 0: success, not an error */
#define SQL__ERR_ENUM(name, text) SQL_ERR_##name,
    SQL_ERRORS(SQL__ERR_ENUM)
#undef SQL__ERR_ENUM
};

/* sql_errmsgf is snprintf into the message buffer @buf of @len bytes that
 * tolerates an absent buffer (NULL or @len 0: nothing is written), so the
 * files of sql/ pass an optional errmsg argument straight through. The
 * text is truncated to fit and always NUL-terminated. Any thread. */
void sql_errmsgf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* sql_strerror gives the text of code @rc ("ok" for 0, "unknown error"
 * for a number that is no code): static storage, never NULL. Any
 * thread. */
const char *sql_strerror(int rc);

#endif /* SQL_ERR_H */
