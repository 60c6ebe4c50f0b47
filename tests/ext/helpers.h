/* Helpers shared by the tests of ext/ (header-only, static inline), on top
 * of tests/sql/helpers.h: request payloads in raft_bufs, as the runtime
 * carries them, and the apply connection opened as the runtime opens it.
 * Include after <cmocka.h>. */

#ifndef TESTS_EXT_HELPERS_H
#define TESTS_EXT_HELPERS_H

#include "ext/sqlbridge.h"
#include "tests/sql/helpers.h"

/* request_buf returns request (@origin, @seq) of @sql, stamped, in a new
 * raft_buf owned by the caller (raft_buf_unref). */
static inline struct raft_buf *request_buf(uint64_t origin, uint64_t seq,
                                           const char *sql)
{
    struct buf *b =
        make_request_ex(origin, seq, sql, NULL, 0, 1700000000000LL, seq);
    struct raft_buf *r = raft_buf_copy(b->data, b->len);
    assert_non_null(r);
    buf_free(b);
    return r;
}

/* open_fsm opens the apply connection to @path as the runtime does
 * (sqlbridge_open), failing the test on error. */
static inline struct sql_fsm *open_fsm(const char *path)
{
    struct sql_fsm *fsm = NULL;
    char msg[256] = "";
    if (sqlbridge_open(path, &fsm, msg, sizeof msg) != 0) {
        fail_msg("sqlbridge_open %s: %s", path, msg);
    }
    return fsm;
}

#endif /* TESTS_EXT_HELPERS_H */
