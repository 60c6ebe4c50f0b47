/* Determinism shims of the apply connection (private to sql/): a seeded
 * PRNG behind random() and randomblob(), and a VFS wrapping the default one
 * whose current time is the applied entry's leader timestamp, so that every
 * node computes the same values (DESIGN.md "Determinism").
 *
 * Sources: the VFS object and xCurrentTimeInt64
 * (https://sqlite.org/c3ref/vfs.html), application-defined functions
 * overriding built-ins (https://sqlite.org/appfunc.html), xoshiro256** and
 * splitmix64 (Blackman and Vigna, https://prng.di.unimi.it/). */

#ifndef SQL_DETERMINISM_H
#define SQL_DETERMINISM_H

#include <sqlite3ext.h>
#include <stddef.h>
#include <stdint.h>

/* The determinism context of one apply connection. It embeds the shim VFS,
 * whose pAppData points at its @base (vfs_forward.h).
 * Invariant: while @registered, @vfs is registered under @name and must not
 * move (the struct lives inside a heap-allocated sql_fsm). */
struct sql_determinism {
    sqlite3_vfs vfs;   /* the shim, registered under @name */
    sqlite3_vfs *base; /* the wrapped default VFS */
    char name[64];     /* unique VFS name, "raftsql-<address>" */
    int registered;    /* 1 once sqlite3_vfs_register succeeded */
    int active;        /* 1 while an entry is being applied */
    int64_t time_ms;   /* entry timestamp, valid while @active */
    uint64_t s[4];     /* xoshiro256** state */
    sqlite3 *clock_db; /* in-memory connection on the shim that evaluates
                          the date and time functions, or NULL */
    struct sql_date_fn {
        struct sql_determinism *d; /* owner */
        const char *name;          /* the wrapped builtin, e.g. "date" */
    } date_fns[6];                 /* user data of the date function wrappers */
};

/* determinism_init registers the shim VFS of @d (which must stay at the
 * same address until determinism_close) under a name unique to @d, wrapping
 * the default VFS. Returns 0, or SQL_ERR_IOERR (no default VFS, registration
 * failed) with a message in @errmsg (@errmsg_len bytes). Any thread. */
int determinism_init(struct sql_determinism *d, char *errmsg,
                     size_t errmsg_len);

/* determinism_close unregisters the VFS of @d. Call it only after every
 * connection using the VFS is closed. Safe on a context whose init failed
 * or that is zeroed. Any thread. */
void determinism_close(struct sql_determinism *d);

/* determinism_install replaces random() and randomblob() on @db with
 * functions drawing from @d's PRNG. Returns 0 or the SQLite error code.
 * Thread: the one using @db. */
int determinism_install(struct sql_determinism *d, sqlite3 *db);

/* determinism_begin sets the context of one entry: the PRNG is reseeded
 * from @seed and "now" becomes @time_ms (ms since the Unix epoch) until
 * determinism_end. Thread: the apply thread. */
void determinism_begin(struct sql_determinism *d, uint64_t seed,
                       int64_t time_ms);

/* determinism_end leaves the entry context: "now" is the real clock again
 * (only internal statements run then). Thread: the apply thread. */
void determinism_end(struct sql_determinism *d);

/* determinism_next returns the next 64 PRNG bits of @d. Thread: the apply
 * thread. */
uint64_t determinism_next(struct sql_determinism *d);

#endif /* SQL_DETERMINISM_H */
