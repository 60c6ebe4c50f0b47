/* Internal entry points of the LMDB log, for its own tests: open with a
 * chosen initial map size and read the current map size. Not part of the
 * module's contract (lmdb_log.h); other modules must not use them. */

#ifndef LMDB_LOG_INTERNAL_H
#define LMDB_LOG_INTERNAL_H

#include <stdint.h>

#include "lmdb_log.h"

/* lmdb_log_open_sized is lmdb_log_open with the initial map size chosen by
 * the caller: the map starts at min(@initial_bytes, the ceiling) or the
 * file's current size, whichever is larger, rounded up to the page size.
 * lmdb_log_open passes 64 MiB. Same ownership, threads and errors as
 * lmdb_log_open; RAFT_INVALID also when @initial_bytes is 0. */
int lmdb_log_open_sized(const char *dir, uint64_t initial_bytes,
                        uint64_t max_bytes, struct lmdb_log **out, char *errmsg,
                        size_t errmsg_len);

/* lmdb_log_map_bytes returns the current size of @l's LMDB map, bytes.
 * Call it from the writing thread (or when no other call runs). */
uint64_t lmdb_log_map_bytes(const struct lmdb_log *l);

/* lmdb_log_max_bytes returns @l's map ceiling (max_bytes rounded up to the
 * page size), bytes. Any thread. */
uint64_t lmdb_log_max_bytes(const struct lmdb_log *l);

#endif /* LMDB_LOG_INTERNAL_H */
