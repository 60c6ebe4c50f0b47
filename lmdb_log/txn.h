/* The transaction layer of the LMDB log, private to lmdb_log/: the log's
 * state, sticky transactions over it, LMDB's codes translated once, and the
 * write loop that grows the map. The other files of lmdb_log/ build on it. */

#ifndef LMDB_LOG_TXN_H
#define LMDB_LOG_TXN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lmdb.h>

#include "lmdb_log.h"

#define LMDB_LOG__ERRMSG_LEN 512

/* The named databases of a log's environment: "entries" and "meta"
 * (format.h). */
#define LMDB_LOG__DBS 2

/* The log. env.c creates and frees it; the fields are written by open,
 * by the writer (the map size) and by txn_set_errmsg, as each says. */
struct lmdb_log {
    MDB_env *env;                      /* the environment of the directory */
    MDB_dbi entries;                   /* "entries" database handle */
    MDB_dbi meta;                      /* "meta" database handle */
    uint64_t map_bytes;                /* current map size (writer only) */
    uint64_t max_bytes;                /* map ceiling, a page multiple */
    uint64_t entries_budget;           /* most bytes entries may occupy */
    pthread_rwlock_t map_lock;         /* shared: a read txn is open;
                                          exclusive: the map is resized */
    pthread_mutex_t errmsg_lock;       /* serializes writes of @errmsg */
    char dir[4096];                    /* the log's directory (open) */
    char errmsg[LMDB_LOG__ERRMSG_LEN]; /* last failure, "" when none */
};

/* A transaction in progress and its first error. Helpers taking a struct
 * txn do nothing once @rc is set (sticky errors).
 * Invariant: @mdb_rc != 0 implies @rc == txn_to_raft(@mdb_rc); when @rc
 * != 0 and @mdb_rc == 0 the message is already in log->errmsg. */
struct txn {
    struct lmdb_log *log; /* the log */
    const char *op;       /* public operation, first word of messages */
    MDB_txn *txn;         /* the LMDB transaction, NULL when ended */
    bool read_locked;     /* map_lock held shared (read transactions) */
    int rc;               /* project code of the first error, 0 if none */
    int mdb_rc;           /* LMDB or errno code behind @rc, 0 if none */
    const char *what;     /* the LMDB call that returned @mdb_rc */
};

/* The body of a write transaction: does its writes through @t. */
typedef void (*lmdb_log_body_cb)(struct txn *t, void *arg);

/* txn_to_raft translates an LMDB return code or errno value @rc into a
 * project code (0 stays 0; an unknown code gives RAFT_IOERR). Pure. */
int txn_to_raft(int rc);

/* txn_code_name names the LMDB return code @rc ("MDB_MAP_FULL") or
 * describes the errno value @rc, using @buf (@len bytes) when needed; the
 * result is a static string or @buf. Any thread. */
const char *txn_code_name(int rc, char *buf, size_t len);

/* txn_set_errmsg formats the message of @l's last failure (truncated to
 * LMDB_LOG__ERRMSG_LEN - 1 bytes). Any thread: the write is serialized by
 * errmsg_lock. */
void txn_set_errmsg(struct lmdb_log *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* txn_check records the LMDB result @mdb_rc of the call @what (a static
 * string) as @t's first error; 0 or an earlier error changes nothing. */
void txn_check(struct txn *t, int mdb_rc, const char *what);

/* txn_fail records the project code @rc as @t's first error, with the
 * message "<op>: <fmt...>" in the log; no-op once @t has failed. */
void txn_fail(struct txn *t, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* txn_report writes the message of an LMDB failure recorded in @t by
 * txn_check ("<op>: <what>: <code name>"); nothing otherwise. */
void txn_report(struct txn *t);

/* txn_entries_cursor opens a cursor on the entries database in @t, which
 * the caller closes with mdb_cursor_close; or records the failure in @t and
 * returns NULL. Returns NULL at once when @t has failed already. */
MDB_cursor *txn_entries_cursor(struct txn *t);

/* txn_read_begin initializes @t and begins a short read transaction on @l
 * for the public operation @op (a static string), holding map_lock shared
 * until txn_read_end. A failure is recorded in @t; call txn_read_end in
 * any case. Any thread. */
void txn_read_begin(struct txn *t, struct lmdb_log *l, const char *op);

/* txn_read_end ends the read transaction of @t, releases map_lock, writes
 * the message of any recorded failure and returns @t's result: 0 or the
 * project code of its first error. */
int txn_read_end(struct txn *t);

/* txn_meta_get reads the u64 meta record @name (a format.h name) into
 * *@out. Errors recorded in @t: RAFT_CORRUPT (missing or corrupt record),
 * or an LMDB failure. */
void txn_meta_get(struct txn *t, const char *name, uint64_t *out);

/* txn_meta_find is txn_meta_get for a record that may be absent:
 * *@out_found says whether it is stored (*@out is left alone when not).
 * Errors recorded in @t: RAFT_CORRUPT (a corrupt record), or an LMDB
 * failure. */
void txn_meta_find(struct txn *t, const char *name, uint64_t *out,
                   bool *out_found);

/* txn_read_meta reads the u64 meta records @name_a and @name_b (format.h
 * names) of @l in one read transaction for the public operation @op (a
 * static string) into *@out_a and *@out_b, which are written only on
 * success. Any thread. Errors: RAFT_CORRUPT (a record is missing or
 * corrupt), or an LMDB failure translated by txn_to_raft (RAFT_IOERR). */
int txn_read_meta(struct lmdb_log *l, const char *op, const char *name_a,
                  uint64_t *out_a, const char *name_b, uint64_t *out_b);

/* txn_meta_put writes @value as the u64 meta record @name (a format.h
 * name). Errors recorded in @t: an LMDB failure (MDB_MAP_FULL among
 * them). */
void txn_meta_put(struct txn *t, const char *name, uint64_t value);

/* txn_key_get decodes the entry key @key into *@out. Errors recorded in
 * @t: RAFT_CORRUPT (not an 8-byte key). */
void txn_key_get(struct txn *t, const MDB_val *key, raft_index *out);

/* txn_bounds reads the first and last stored index, with the same meaning
 * as lmdb_log_bounds; the outputs are written only on success. Errors
 * recorded in @t: RAFT_CORRUPT, an LMDB failure. */
void txn_bounds(struct txn *t, raft_index *out_first, raft_index *out_last);

/* txn_delete_from deletes every entry with index >= @index in the write
 * transaction @t. Errors recorded in @t: an LMDB failure. */
void txn_delete_from(struct txn *t, raft_index index);

/* txn_run_write runs @body with @arg in a write transaction on @l for the
 * public operation @op (a static string) and commits it durably, growing
 * the map and running @body again whenever LMDB reports MDB_MAP_FULL, and
 * adopting a map grown by another process (MDB_MAP_RESIZED). Returns 0, or
 * a project code with the message in l->errmsg; on failure nothing of
 * @body's writes is stored. Writer thread only, no other transaction of
 * the thread open.
 * Errors: what @body records, RAFT_NOSPACE (the map is at its ceiling:
 * "log full"), or an LMDB failure translated by txn_to_raft. */
int txn_run_write(struct lmdb_log *l, const char *op, lmdb_log_body_cb body,
                  void *arg);

#endif /* LMDB_LOG_TXN_H */
