/* The replica checksum of the state machine, private to sql/ (sql.h has
 * the API): the canonical row hash shared by the pre-update hook and the
 * full scan, the per-table sums and their life through requests and
 * batches, and the stored copy in raftsql_applied.sums.
 *
 * The checksum of a replica is the sum modulo 2^64 of the row hashes of
 * every row of every table of the main database but the raftsql_*
 * internals, sqlite_schema, views, virtual tables and their shadow
 * tables. A row hash is XXH3_64bits, seeded with the XXH3_64bits of its
 * table's name, of the canonical row encoding (checksum_scan.c):
 *
 *   rowid:i64 (0 for a WITHOUT ROWID table) n_columns:u32 value*
 *   value := 1 i64                  INTEGER, and a REAL that is a whole
 *                                   number in the range of an i64
 *          | 2 f64                  other REAL (IEEE 754 bits)
 *          | 3 len:u32 bytes[len]   TEXT, UTF-8
 *          | 4 len:u32 bytes[len]   BLOB
 *          | 5                      NULL
 *
 * all little-endian. A sum, not a XOR: equal rows do not cancel. */

#ifndef SQL_CHECKSUM_H
#define SQL_CHECKSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "preupdate.h"
#include "sql.h"

struct sql_fsm;

/* What a table of the main database is to the checksum. */
enum checksum_kind {
    CHECKSUM_IGNORED = 0,    /* not replicated content (see above) */
    CHECKSUM_ROWS = 1,       /* a table whose rows the hook follows */
    CHECKSUM_SCAN = 2,       /* recomputed by a scan after a request that
                                wrote it (the hook misses its changes:
                                sqlite_sequence, sqlite_stat*, generated
                                columns, columns added with a DEFAULT) */
    CHECKSUM_UNRESOLVED = 3, /* seen by the hook, not yet listed */
};

/* One table's sums. */
struct checksum_table {
    char *name;     /* as in the schema (malloc'd) */
    uint64_t seed;  /* XXH3_64bits of the name */
    uint64_t sum;   /* committed */
    uint64_t batch; /* delta of the running batch's released requests */
    uint64_t req;   /* delta of the running request */
    uint8_t kind;   /* enum checksum_kind */
    bool rowid;     /* a rowid table (its rows hash their rowid) */
    bool exists;    /* in the schema, as last listed */
    bool dirty;     /* rescanned at the end of the running request */
    bool in_req;    /* listed in sql_checksum.req_list */
    bool touched;   /* its stored row is written at the batch's end */
    bool autoinc;   /* AUTOINCREMENT: its inserts move sqlite_sequence */
    bool pinned;    /* CHECKSUM_SCAN for good (an ALTER added a column
                       with a DEFAULT: the hook reads NULL for the rows
                       written before it; stored) */
    bool altered;   /* the running request altered it */
};

/* A growable byte buffer for row encodings. */
struct checksum_buf {
    unsigned char *p; /* bytes (malloc'd) */
    size_t len;       /* used */
    size_t cap;       /* allocated */
};

/* The statements schema_sum_cookie reads the header's numbers with. */
#define SCHEMA_COOKIE_STMTS 3

/* The header's numbers a schema change or a user's PRAGMA moves
 * (schema_sum_cookie). */
struct schema_cookie {
    int64_t schema_version; /* the schema cookie */
    int64_t user_version;   /* PRAGMA user_version */
    int64_t application_id; /* PRAGMA application_id */
};

/* The checksum state of one apply connection. */
struct sql_checksum {
    bool on;                       /* maintained (hook installed) */
    char why[256];                 /* why not, when !on */
    struct sql_preupdate pu;       /* the hook's functions */
    struct checksum_table *tables; /* every table listed or seen */
    unsigned n_tables;             /* used */
    unsigned cap_tables;           /* allocated */
    unsigned last;                 /* the table of the last hook call */
    unsigned *req_list;            /* tables with in_req set */
    unsigned n_req;                /* used */
    unsigned cap_req;              /* allocated */
    unsigned *batch_list;          /* tables with touched set */
    unsigned n_batch;              /* used */
    unsigned cap_batch;            /* allocated */
    uint64_t committed;            /* the sum of the committed sums */
    uint64_t batch_total;          /* the sum of the batch deltas */
    bool resync;                   /* the running request changed the
                                      schema: list the tables again */
    bool alter_default;            /* ... with an ALTER naming a DEFAULT */
    bool stats;                    /* ... it may have written sqlite_* */
    bool broken;                   /* the hook ran out of memory: the
                                      request fails (environmental) */
    bool reload;                   /* the batch rolled back: reload the
                                      tables before the next one */
    struct checksum_buf enc;       /* the hook's row encoding */
    sqlite3_value **vals;          /* the hook's values of one row */
    int cap_vals;                  /* allocated at vals */
    unsigned skew_table;           /* test fault: the table of the last
                                      row written, and that row */
    sqlite3_int64 skew_rowid;      /* (RAFTSQL_TEST_FAULTS builds) */
    struct checksum_buf store;     /* the stored sums being written */
    /* The schema sum (schema_sum.c), beside the sums. */
    sqlite3_stmt *cookie_stmts[SCHEMA_COOKIE_STMTS]; /* schema_sum_cookie's */
    bool schema_known;               /* schema_sum is stored (not NULL) */
    uint64_t schema_sum;             /* raftsql_applied.schema_sum */
    struct schema_cookie schema_at;  /* the header's numbers when it was
                                           computed or loaded */
    bool schema_force;               /* compute it at the batch's end (a
                                           changeset with schema statements:
                                           checksum_schema_changed) */
    bool schema_pending;             /* the batch stores pending_sum */
    uint64_t pending_sum;            /* (checksum_batch_end keeps it) */
    struct schema_cookie pending_at; /* its header's numbers */
};

/* ---- checksum_scan.c: encoding, listing, scanning (any connection) ---- */

/* checksum_seed returns the seed of the rows of table @name. Pure. */
uint64_t checksum_seed(const char *name);

/* checksum_row_hash encodes the row @rowid with the @n values @values
 * (canonical encoding above) into @b and returns its hash seeded with
 * @seed. Returns 0 and sets *@ok false when out of memory. */
uint64_t checksum_row_hash(struct checksum_buf *b, uint64_t seed,
                           sqlite3_int64 rowid, sqlite3_value **values, int n,
                           bool *ok);

/* checksum_row_hash_values is checksum_row_hash for a decoded row image
 * (@n values, sql.h, as a changeset carries it): the same encoding, the
 * same hash. *@ok is set false when out of memory. Pure. */
uint64_t checksum_row_hash_values(struct checksum_buf *b, uint64_t seed,
                                  int64_t rowid, const struct sql_value *values,
                                  unsigned n, bool *ok);

/* checksum_landed_row counts in the running request a row change that
 * its writer's own commit put in the file (changeset_apply's landed
 * path: the apply connection's hook never saw it), as the hook would
 * have counted it, from the changeset's whole rows: @op SQLITE_INSERT,
 * SQLITE_UPDATE or SQLITE_DELETE of table @table (NUL-terminated), the
 * old row (@old_rowid, @old: NULL for an insert) and the new (@new_rowid,
 * @new_: NULL for a delete), @n values each. So a plain commit costs no
 * scan of its tables; a table the hook cannot follow (not listed yet,
 * generated columns, sqlite_sequence after an AUTOINCREMENT insert) is
 * rescanned at the request's end, as after the hook. Apply thread. */
void checksum_landed_row(struct sql_fsm *f, const char *table, int op,
                         int64_t old_rowid, const struct sql_value *old,
                         int64_t new_rowid, const struct sql_value *new_,
                         unsigned n);

/* checksum_kind_of classifies table @name of pragma table_list type
 * @type (NULL for a name not listed). Pure. */
int checksum_kind_of(const char *name, const char *type);

/* A listed table (checksum_list). */
struct checksum_listed {
    const char *name; /* valid during the callback */
    int kind;         /* enum checksum_kind */
    bool rowid;       /* a rowid table */
    bool autoinc;     /* declared with AUTOINCREMENT */
};

/* checksum_list calls @cb(@data, table) for every table of the main
 * database of @db (pragma table_list), with its kind (tables with
 * generated columns are CHECKSUM_SCAN). Returns SQLITE_OK, the first
 * non-zero return of @cb, or a SQLite error. */
int checksum_list(sqlite3 *db,
                  int (*cb)(void *data, const struct checksum_listed *t),
                  void *data);

/* The stored sums (raftsql_applied.sums, written with the applied index):
 *
 *   version:u8 (1) table*
 *   table := name_len:u16 name[name_len] sum:u64 pinned:u8
 *
 * little-endian; NULL while the checksum is not maintained. */

/* checksum_sums_put appends table @name's @sum and @pinned to @b, or the
 * version byte when @name is NULL. Returns false when out of memory. */
bool checksum_sums_put(struct checksum_buf *b, const char *name, uint64_t sum,
                       bool pinned);

/* checksum_sums_each calls @cb(@data, name, sum, pinned) for each table of
 * the stored sums @p (@len bytes; name NUL-terminated, valid during the
 * call). Returns 0, -1 when @p is malformed or of another version, or
 * @cb's first non-zero return. */
int checksum_sums_each(const void *p, size_t len,
                       int (*cb)(void *data, const char *name, uint64_t sum,
                                 bool pinned),
                       void *data);

/* checksum_scan sums the row hashes of table @name (a rowid table when
 * @rowid) of the main database of @db into *@out; a table that does not
 * exist sums to 0. Returns SQLITE_OK or a SQLite error (SQLITE_NOMEM). */
int checksum_scan(sqlite3 *db, struct checksum_buf *b, const char *name,
                  bool rowid, uint64_t *out);

/* ---- schema_sum.c: the schema sum (any connection) -------------------- *
 *
 * The running checksum covers rows only. The schema sum is XXH3_64bits of
 * the schema's rows but raftsql's own (type, name, tbl_name, sql, in name
 * order, each text length-prefixed; not rootpage, which differs between
 * replicas) and of PRAGMA user_version and application_id (little-endian
 * i64s), stored with the applied index (raftsql_applied.schema_sum; NULL:
 * not known yet, a file of before). It is computed again only when the
 * node's own work moved the header's numbers (checksum_batch_store), so a
 * schema change made while no node ran stays visible to the start's
 * scan. */

/* schema_sum_compute computes the schema sum of the main database of @db
 * into *@out. Returns SQLITE_OK or SQLite's error. Any connection. */
int schema_sum_compute(sqlite3 *db, uint64_t *out);

/* schema_sum_cookie reads the header's numbers of the main database of
 * @db into *@out, with the SCHEMA_COOKIE_STMTS statements @stmts (each
 * prepared on the first call while NULL; schema_sum_cookie_free finalizes
 * them). Returns SQLITE_OK or SQLite's error. Any connection. */
int schema_sum_cookie(sqlite3 *db, sqlite3_stmt **stmts,
                      struct schema_cookie *out);

/* schema_sum_cookie_free finalizes the statements of schema_sum_cookie
 * at @stmts and sets them NULL. */
void schema_sum_cookie_free(sqlite3_stmt **stmts);

/* ---- checksum.c: the running sums (the apply thread) ------------------ */

/* checksum_enable turns the checksum of @f on (installing the hook and
 * loading the stored sums, or computing them by a full scan when none are
 * stored) or off (forgetting the stored sums, so that a later start with
 * it on computes them again). Returns 0 or an error code with @f's
 * message saying which; an unavailable hook is no error: the checksum is
 * off, and why says why. */
int checksum_enable(struct sql_fsm *f, bool on);

/* checksum_free frees the checksum state of @f. */
void checksum_free(struct sql_fsm *f);

/* checksum_reload reloads the sums from @f's database after its content
 * was replaced (a snapshot). Returns 0 or an error code. */
int checksum_reload(struct sql_fsm *f);

/* checksum_statement notes statement @s of a request before it runs:
 * schema changes and writes to sqlite_* tables. */
void checksum_statement(struct sql_fsm *f, sqlite3_stmt *s);

/* checksum_altered notes that the running request alters table @name
 * (the authorizer's SQLITE_ALTER_TABLE). */
void checksum_altered(struct sql_fsm *f, const char *name);

/* checksum_rescan notes that table @name changed in a way the hook did
 * not see (a changeset its writer committed itself): it is rescanned at
 * the running request's end. @name NULL: the schema changed, the tables
 * are listed again. */
void checksum_rescan(struct sql_fsm *f, const char *name);

/* checksum_rescan_listed is checksum_rescan of table @name only when it
 * is listed (it exists, as last listed): a table that does not exist
 * costs nothing (checksum_rescan lists every table again for it). Apply
 * thread. */
void checksum_rescan_listed(struct sql_fsm *f, const char *name);

/* checksum_moved says (in *@out) whether table @name's content in the
 * file differs from its running sum (a scan, in the running transaction
 * or a read of its own): a commit the node did not apply changed it.
 * false when the checksum is off or its sums are to be read again.
 * Returns 0, or the scan's error as fsm_fail words it. Thread: the apply
 * connection's. */
int checksum_moved(struct sql_fsm *f, const char *name, bool *out);

/* checksum_rescan_touched has every table the running request touched
 * so far rescanned at its end, and the tables listed again: a statement
 * of it failed and was rolled back after the hook counted its rows (a
 * skipped schema statement of a changeset, changeset_apply.c). */
void checksum_rescan_touched(struct sql_fsm *f);

/* checksum_request_end closes the running request: @ok, it rescans the
 * tables it needs to and folds its deltas into the batch (before the
 * savepoint is released; returns 0 or an error code); else it drops
 * them (returns 0). */
int checksum_request_end(struct sql_fsm *f, bool ok);

/* checksum_batch_begin prepares a batch, after BEGIN: reloads the sums
 * after a batch that rolled back. Returns 0 or an error code. */
int checksum_batch_begin(struct sql_fsm *f);

/* checksum_batch_store binds to parameter @param of @s (the statement
 * that writes raftsql_applied, run next in the batch's transaction) the
 * tables' sums as of the batch's end when the batch changed any, else
 * leaves it NULL (the stored sums stay); and to parameter @schema_param
 * the schema sum when the batch moved the header's numbers (schema
 * version, user_version, application_id), a changeset in it has schema
 * statements (checksum_schema_changed), or none is stored, else
 * NULL. Returns 0 or an error code. */
int checksum_batch_store(struct sql_fsm *f, sqlite3_stmt *s, int param,
                         int schema_param);

/* checksum_schema_changed tells the checksum that the batch applies or
 * records a changeset with schema statements: the schema sum is computed
 * at the batch's end even when the header's numbers did not move (a plain
 * write whose writer's own commit landed before a restart, which the
 * numbers read at the reopen already show). */
void checksum_schema_changed(struct sql_fsm *f);

/* checksum_batch_end closes the batch: committed (@ok) or rolled back. */
void checksum_batch_end(struct sql_fsm *f, bool ok);

#ifdef RAFTSQL_TEST_FAULTS
/* checksum_test_skew is a test-only fault, compiled into the sanitizer
 * builds only: when the environment variable RAFTSQL_TEST_APPLY_SKEW is
 * @index, it deletes the row the request of entry @index wrote last, on
 * this node only, so that this replica applies that entry differently. */
void checksum_test_skew(struct sql_fsm *f, uint64_t index);
#else
#define checksum_test_skew(f, index) ((void)0)
#endif

/* checksum_value returns the running checksum (committed and batch). */
uint64_t checksum_value(const struct sql_fsm *f);

#endif /* SQL_CHECKSUM_H */
