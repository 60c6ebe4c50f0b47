/* A small LRU cache of prepared statements on the apply connection, keyed
 * by the exact SQL text of single-statement requests (the common shape of
 * an application's writes), so a batch does not re-prepare the same
 * INSERT for every entry. Private to sql/. */

#ifndef SQL_CACHE_H
#define SQL_CACHE_H

#include <sqlite3ext.h>
#include <stddef.h>
#include <stdint.h>

/* Statements kept at most. */
#define SQL__CACHE_SIZE 64

/* The cache. Zero-initialized is empty. Invariant: every stored statement
 * is reset and has no bindings; a slot with a key but no statement is
 * taken or free, and is reused for any key when no taken slot matches. */
struct sql_cache {
    struct {
        char *sql;          /* key, malloc'd, len bytes */
        size_t len;         /* key length, bytes */
        sqlite3_stmt *stmt; /* owned statement, NULL when the slot is free
                               or its statement is taken */
        uint64_t used;      /* LRU clock of the last use */
        int taken;          /* the statement is out (cache_take); the
                               key waits for it */
    } slot[SQL__CACHE_SIZE];
    uint64_t clock; /* LRU clock */
};

/* cache_take removes and returns the statement cached for @sql (@len
 * bytes), or NULL. The caller owns it (give it back with cache_put); its
 * slot keeps the key, so giving it back allocates nothing. */
sqlite3_stmt *cache_take(struct sql_cache *c, const char *sql, size_t len);

/* cache_put resets @s, clears its bindings and stores it under @sql,
 * evicting (finalizing) the least recently used statement when full; on
 * out of memory it finalizes @s instead. Takes ownership of @s. */
void cache_put(struct sql_cache *c, const char *sql, size_t len,
               sqlite3_stmt *s);

/* cache_clear finalizes every statement (before closing the connection). */
void cache_clear(struct sql_cache *c);

#endif /* SQL_CACHE_H */
