/* The apply connection's prepared-statement cache (see cache.h). */

#include "cache.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

sqlite3_stmt *cache_take(struct sql_cache *c, const char *sql, size_t len)
{
    for (int i = 0; i < SQL__CACHE_SIZE; i++) {
        if (c->slot[i].stmt != NULL && c->slot[i].len == len &&
            memcmp(c->slot[i].sql, sql, len) == 0) {
            sqlite3_stmt *s = c->slot[i].stmt;
            c->slot[i].stmt = NULL;
            c->slot[i].taken = 1;
            return s;
        }
    }
    return NULL;
}

void cache_put(struct sql_cache *c, const char *sql, size_t len,
               sqlite3_stmt *s)
{
    int victim = 0;
    char *key;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    for (int i = 0; i < SQL__CACHE_SIZE; i++) {
        if (c->slot[i].taken && c->slot[i].len == len &&
            memcmp(c->slot[i].sql, sql, len) == 0) {
            /* Back into the slot it came from: its key is still there. */
            c->slot[i].stmt = s;
            c->slot[i].taken = 0;
            c->slot[i].used = ++c->clock;
            return;
        }
    }
    key = malloc(len + 1);
    if (key == NULL) {
        sqlite3_finalize(s);
        return;
    }
    memcpy(key, sql, len);
    key[len] = '\0';
    for (int i = 0; i < SQL__CACHE_SIZE; i++) {
        if (c->slot[i].stmt == NULL) {
            victim = i;
            break;
        }
        if (c->slot[i].used < c->slot[victim].used) {
            victim = i;
        }
    }
    sqlite3_finalize(c->slot[victim].stmt);
    free(c->slot[victim].sql);
    c->slot[victim].sql = key;
    c->slot[victim].len = len;
    c->slot[victim].stmt = s;
    c->slot[victim].taken = 0;
    c->slot[victim].used = ++c->clock;
}

void cache_clear(struct sql_cache *c)
{
    for (int i = 0; i < SQL__CACHE_SIZE; i++) {
        sqlite3_finalize(c->slot[i].stmt);
        free(c->slot[i].sql);
        c->slot[i].stmt = NULL;
        c->slot[i].sql = NULL;
        c->slot[i].taken = 0;
    }
}
