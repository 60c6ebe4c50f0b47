/* The durable Raft log and hard state, stored in LMDB.
 *
 * One LMDB environment per node (a directory) with two named databases:
 * "entries" (key: 8-byte big-endian index; value: see format.h: term, type,
 * payload and a checksum verified on every read) and "meta" (format version,
 * term, vote, first index, snapshot boundary). Each append is one write
 * transaction: set the
 * hard state, delete a conflicting suffix, then append with MDB_APPEND; one
 * fsync per batch (LMDB's default synchronous commit, never MDB_NOSYNC).
 * The map grows on MDB_MAP_FULL, doubling up to a ceiling; past it appends
 * fail with RAFT_NOSPACE and nothing is half-written. Entries may fill all
 * of the ceiling but a small reserve (16 pages plus 1/128 of it), kept so
 * that a full log can still store a new term and vote and be truncated
 * or compacted. Compaction (lmdb_log_compact) deletes a prefix; LMDB puts
 * the freed pages on its freelist and reuses them for later appends, so
 * under a steady load with periodic compaction the data file stops
 * growing (it never shrinks: LMDB does not return pages to the system).
 *
 * The snapshot boundary: (snapshot_index, snapshot_term) names the last
 * entry compacted away or covered by an installed snapshot ((0, 0) when
 * none). Invariant: the first index (stored or, for an empty log, the
 * recorded one) is snapshot_index + 1; no call deletes or replaces an entry
 * at or below the boundary except by moving the boundary itself.
 *
 * Threads: one thread writes at a time (the disk thread); reads may run on
 * any thread concurrently with the writer (the env is opened MDB_NOTLS and
 * read transactions are short). Not safe to close while other calls run. */

#ifndef LMDB_LOG_H
#define LMDB_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "../raft/raft.h"

struct lmdb_log; /* opaque */

/* lmdb_log_open opens (creating if needed) the log in directory @dir
 * (created with mode 0700 if missing). @max_bytes is the ceiling of the LMDB
 * map, rounded up to the page size (the log_max_mb setting); the initial map
 * is min(64 MiB, @max_bytes) or the file's current size, whichever is
 * larger. On failure writes a message naming the cause into @errmsg
 * (@errmsg_len bytes, NUL-terminated) and leaves nothing open.
 * Errors: RAFT_INVALID (@max_bytes below 256 KiB), RAFT_IOERR (directory or
 * LMDB failure), RAFT_FORMAT (written by an unknown format version),
 * RAFT_CORRUPT (meta records unreadable), RAFT_NOMEM. */
int lmdb_log_open(const char *dir, uint64_t max_bytes, struct lmdb_log **out,
                  char *errmsg, size_t errmsg_len);

/* lmdb_log_close closes the environment and frees @l. NULL is ignored. */
void lmdb_log_close(struct lmdb_log *l);

/* lmdb_log_errmsg returns the message of the last failed call on @l
 * ("" when none); valid until the next call on @l. */
const char *lmdb_log_errmsg(const struct lmdb_log *l);

/* lmdb_log_hard_state reads the stored term and vote into @out (both 0 for
 * a new log). Errors: RAFT_IOERR, RAFT_CORRUPT. */
int lmdb_log_hard_state(struct lmdb_log *l, struct raft_hard_state *out);

/* lmdb_log_bounds reads the first and last stored index. An empty log gives
 * *out_first = snapshot_index + 1 (1 for a new log, boundary + 1 after a
 * compaction of every entry or a reset) and *out_last = *out_first - 1.
 * Any thread. Errors: RAFT_IOERR, RAFT_CORRUPT. */
int lmdb_log_bounds(struct lmdb_log *l, raft_index *out_first,
                    raft_index *out_last);

/* lmdb_log_entries reads the entries with index in [@lo, @hi] (inclusive),
 * stopping early once their payloads exceed @max_bytes (at least one entry
 * is returned when @lo <= @hi; 0 means no limit). On success *out is a new
 * array of *out_n entries that the caller frees with lmdb_log_entries_free;
 * each entry's data is a new buf reference.
 * Any thread.
 * Errors: RAFT_COMPACTED (1 <= @lo <= the snapshot boundary: those entries
 * were compacted away; send a snapshot instead), RAFT_NOTFOUND (another
 * index in the range is not stored, e.g. past the last), RAFT_CORRUPT
 * (checksum mismatch or malformed value; the message names the index; the
 * entries before it still read), RAFT_IOERR, RAFT_NOMEM. */
int lmdb_log_entries(struct lmdb_log *l, raft_index lo, raft_index hi,
                     uint64_t max_bytes, struct raft_entry **out,
                     unsigned *out_n);

/* lmdb_log_entries_free drops the references of @n entries and frees the
 * array @entries (NULL is ignored). */
void lmdb_log_entries_free(struct raft_entry *entries, unsigned n);

/* lmdb_log_append writes, in one durable write transaction: the hard state
 * @hs (NULL to leave it as is), then deletes every stored entry with index
 * >= entries[0].index, then stores @entries (n long, consecutive indexes,
 * entries[0].index <= last stored index + 1, and >= the first index, so
 * an empty compacted or reset log takes snapshot_index + 1). @n may be 0
 * to store only the hard state. Either all of it is durable on return 0,
 * or nothing changed. Writer thread.
 * Errors: RAFT_INVALID (non-consecutive indexes, a gap after the log, or a
 * start below the first index),
 * RAFT_NOSPACE (the map reached its ceiling: "log full"), RAFT_IOERR,
 * RAFT_NOMEM. */
int lmdb_log_append(struct lmdb_log *l, const struct raft_hard_state *hs,
                    const struct raft_entry *entries, unsigned n);

/* lmdb_log_truncate_suffix deletes every entry with index >= @index, in one
 * durable transaction. Writer thread. Errors: RAFT_INVALID (@index is at
 * or below the snapshot boundary: those entries are committed), RAFT_IOERR,
 * RAFT_NOSPACE (not even the reserve left for deletions suffices; nothing
 * is deleted). */
int lmdb_log_truncate_suffix(struct lmdb_log *l, raft_index index);

/* lmdb_log_compact deletes every entry with index <= @index and moves the
 * snapshot boundary to (@index, term of entry @index), in one durable write
 * transaction; the term is read (and its checksum verified) before the
 * entry is deleted. Afterwards lmdb_log_bounds gives first = @index + 1.
 * An @index at or below the current boundary changes nothing (returns 0).
 * It works on a full log (deletions use the reserve) and the freed pages
 * take later appends. The caller must only compact entries that are
 * durable in the state machine (docs/operations.md, "The durable point":
 * @index <= sql_fsm_durable()). Writer thread.
 * Errors: RAFT_INVALID (@index > the last stored index), RAFT_CORRUPT
 * (entry @index is unreadable: the message names it; nothing deleted),
 * RAFT_NOSPACE, RAFT_IOERR. */
int lmdb_log_compact(struct lmdb_log *l, raft_index index);

/* lmdb_log_usage gives the bytes the stored entries occupy (*@out_used,
 * whole pages) and the most they may occupy before appends fail with
 * RAFT_NOSPACE (*@out_budget: the log_max_mb ceiling less the reserve for
 * hard state updates and deletions). One short read transaction. Any
 * thread. Errors: RAFT_IOERR. */
int lmdb_log_usage(struct lmdb_log *l, uint64_t *out_used,
                   uint64_t *out_budget);

/* lmdb_log_defragment rewrites the data file compacted (mdb_env_copy2
 * with MDB_CP_COMPACT into <dir>/defrag, fsynced, then renamed over
 * data.mdb and reopened). For a log that refuses an append with
 * RAFT_NOSPACE although its entries take far less than their budget: LMDB
 * keeps a large value in consecutive pages, and the freed pages of a
 * compacted log may be too scattered to hold one. The content (entries,
 * hard state, boundary) is unchanged. Readers on other threads wait while
 * the file is swapped. Thread: the writing thread, between writes.
 * Errors: RAFT_NOSPACE (no room for the copy: nothing changed),
 * RAFT_IOERR (copy or rename failed, nothing changed; or the reopen
 * failed: the log is then unusable until restarted), RAFT_NOMEM. */
int lmdb_log_defragment(struct lmdb_log *l);

/* lmdb_log_snapshot reads the snapshot boundary: the index and term of the
 * last entry compacted away or covered by an installed snapshot ((0, 0)
 * when there is none). Any thread. Errors: RAFT_IOERR, RAFT_CORRUPT. */
int lmdb_log_snapshot(struct lmdb_log *l, raft_index *out_index,
                      raft_term *out_term);

/* lmdb_log_reset empties the log after a snapshot was installed (paper
 * Fig. 13, receiver rule 7): in one durable write transaction it deletes
 * every entry and sets the boundary to (@snapshot_index, @snapshot_term),
 * so the log takes appends from @snapshot_index + 1. Call it only once the
 * snapshot is durable in the database (sql_fsm_snapshot_install returns
 * after that). The hard state is left as is. Writer thread.
 * Errors: RAFT_INVALID (exactly one of the two is 0, or the index is
 * 2^64 - 1), RAFT_NOSPACE, RAFT_IOERR. */
int lmdb_log_reset(struct lmdb_log *l, raft_index snapshot_index,
                   raft_term snapshot_term);

/* Bytes of a cluster id (ext/runtime/cluster_id.h). */
#define LMDB_LOG_CLUSTER_ID_LEN 16

/* lmdb_log_cluster_id reads the cluster id stored in the log into @out,
 * all zero when none is (format.h: "cluster_id_0", "cluster_id_1"). One
 * short read transaction; any thread. Errors: RAFT_CORRUPT (a record
 * corrupt, or one of the two missing), RAFT_IOERR. */
int lmdb_log_cluster_id(struct lmdb_log *l,
                        uint8_t out[LMDB_LOG_CLUSTER_ID_LEN]);

/* lmdb_log_set_cluster_id stores @id as the log's cluster id, in one
 * durable write transaction (nothing else changes). Writer thread.
 * Errors: RAFT_NOSPACE, RAFT_IOERR. */
int lmdb_log_set_cluster_id(struct lmdb_log *l,
                            const uint8_t id[LMDB_LOG_CLUSTER_ID_LEN]);

/* lmdb_log_server_id reads into *@out the id of the server the log
 * belongs to (format.h: "server_id"), 0 when none is stored (a new log,
 * or one written before the record). One short read transaction; any
 * thread. Errors: RAFT_CORRUPT (the record corrupt), RAFT_IOERR. */
int lmdb_log_server_id(struct lmdb_log *l, uint64_t *out);

/* lmdb_log_set_server_id stores @id (not 0) as the id of the server the
 * log belongs to, in one durable write transaction (nothing else
 * changes). Writer thread. Errors: RAFT_NOSPACE, RAFT_IOERR. */
int lmdb_log_set_server_id(struct lmdb_log *l, uint64_t id);

/* lmdb_log_peek_server_id reads into *@out the id of the server the log
 * in directory @dir belongs to, without opening it for writing (a
 * read-only LMDB environment, beside a node that may run on it): 0 when
 * @dir holds no log or the log no such record. For checks before a
 * start. Any thread. Errors: RAFT_CORRUPT (the record corrupt),
 * RAFT_IOERR (the log cannot be read); @errmsg (@errmsg_len bytes) says
 * why. */
int lmdb_log_peek_server_id(const char *dir, uint64_t *out, char *errmsg,
                            size_t errmsg_len);

#endif /* LMDB_LOG_H */
