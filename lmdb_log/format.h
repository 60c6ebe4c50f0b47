/* The on-disk encoding of the LMDB log: keys and values of the "entries"
 * and "meta" databases. Pure byte codecs, no LMDB; txn.c and the files on
 * it do the I/O.
 *
 * Format version 2 (LMDB_LOG_FORMAT_VERSION). Integers in values are
 * little-endian; keys are big-endian so that LMDB's default byte-wise key
 * order is the numeric order of indexes.
 *
 * "entries" database, one record per log entry:
 *   key   (8 bytes)  index, u64 big-endian (index >= 1)
 *   value (21 + N bytes):
 *     offset 0       term, u64
 *     offset 8       type, u8 (enum raft_entry_type, stored as given)
 *     offset 9       N, payload length, u32 (must equal value size - 21)
 *     offset 13      payload, N bytes (N = 0 for an entry without data)
 *     offset 13 + N  checksum, u64 = XXH64(value bytes [0, 13 + N),
 *                    seed = index). Seeding with the index binds the value
 *                    to its key: a value copied or moved under another key
 *                    fails the check, as does any change to term, type,
 *                    length or payload.
 *
 * "meta" database, keys are the ASCII names below without a NUL:
 *   "format"       u32: the format version. This record's shape is frozen
 *                  for all versions (4 bytes, no checksum), so any build can
 *                  read it and refuse a version it does not know.
 *   "term"         currentTerm   } each a u64 value followed by a u64
 *   "vote"         votedFor      } checksum = XXH64(value 8 bytes,
 *   "first_index"  index of the  } seed = XXH64(name bytes, seed 0)),
 *                  first entry   } 16 bytes in all.
 *                  when the log is empty (1 for a new log)
 *   "snapshot_index"  the snapshot boundary: the last index compacted }
 *                     away or covered by an installed snapshot (0: none) }
 *   "snapshot_term"   the term of the entry at snapshot_index (0: none)  }
 *                     (version 2; same u64 + checksum shape as above)
 *   "cluster_id_0"    the cluster id (16 bytes,                         }
 *                     ext/runtime/cluster_id.h): bytes 0-7              }
 *   "cluster_id_1"    and 8-15, each read as a u64 little-endian; same  }
 *                     shape as above. Optional: both absent while the   }
 *                     node has no cluster id (a log written before it,  }
 *                     or by a build that does not know it, has none)    }
 *   "server_id"       the id of the server the log belongs to (the node's }
 *                     id= when it first started on it; same shape as     }
 *                     above). Optional: absent in a log written before   }
 *                     it, where the next start writes it                 }
 *
 * Invariant: first_index == snapshot_index + 1, and when entries are
 * stored the first of them has index first_index (compaction and reset
 * write the three records in the same transaction as their deletions).
 *
 * A new log holds format = 2, term = 0, vote = 0, first_index = 1,
 * snapshot_index = 0, snapshot_term = 0 and no entries. Changing any of
 * this bumps the version.
 *
 * Version history: version 1 had no snapshot records (and never compacted,
 * so its first_index was always 1). This build reads a version 1 log and
 * upgrades it when opening it: in open's write transaction it adds
 * snapshot_index = snapshot_term = 0 and sets format = 2. A build that
 * knows only version 1 then refuses the log (RAFT_FORMAT) instead of
 * misreading a compacted one. */

#ifndef LMDB_LOG_FORMAT_H
#define LMDB_LOG_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "../raft/raft.h"

/* The format version this build writes and reads. */
#define LMDB_LOG_FORMAT_VERSION 2u

/* The oldest version this build reads (and upgrades when opening). */
#define LMDB_LOG_FORMAT_VERSION_MIN 1u

/* Sizes, in bytes, of the encoded records. */
#define LMDB_LOG_FORMAT_KEY_LEN 8u      /* an entry key */
#define LMDB_LOG_FORMAT_ENTRY_HEAD 13u  /* term, type, payload length */
#define LMDB_LOG_FORMAT_ENTRY_EXTRA 21u /* head plus checksum */
#define LMDB_LOG_FORMAT_VERSION_LEN 4u  /* the "format" record */
#define LMDB_LOG_FORMAT_META_LEN 16u    /* a u64 meta record */

/* The largest payload a value can hold (its length field is a u32). */
#define LMDB_LOG_FORMAT_MAX_PAYLOAD UINT32_MAX

/* Names of the meta records (keys of the "meta" database). */
#define LMDB_LOG_FORMAT_META_FORMAT "format"
#define LMDB_LOG_FORMAT_META_TERM "term"
#define LMDB_LOG_FORMAT_META_VOTE "vote"
#define LMDB_LOG_FORMAT_META_FIRST_INDEX "first_index"
#define LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX "snapshot_index"
#define LMDB_LOG_FORMAT_META_CLUSTER_ID_0 "cluster_id_0"
#define LMDB_LOG_FORMAT_META_CLUSTER_ID_1 "cluster_id_1"
#define LMDB_LOG_FORMAT_META_SNAPSHOT_TERM "snapshot_term"
#define LMDB_LOG_FORMAT_META_SERVER_ID "server_id"

/* format_key_encode writes the key of @index into @out (8 bytes). Pure. */
void format_key_encode(raft_index index, uint8_t out[LMDB_LOG_FORMAT_KEY_LEN]);

/* format_key_decode reads the index of the key at @key (@key_len bytes)
 * into *@out_index. Pure. Errors: RAFT_CORRUPT (@key_len is not 8). */
int format_key_decode(const void *key, size_t key_len, raft_index *out_index);

/* format_entry_len returns the value size of an entry whose payload is
 * @payload_len bytes (@payload_len <= LMDB_LOG_FORMAT_MAX_PAYLOAD). Pure. */
size_t format_entry_len(size_t payload_len);

/* format_entry_encode writes the value of @e into @out, which holds exactly
 * format_entry_len(payload length of @e) bytes. @e's payload (NULL data
 * means empty) must be at most LMDB_LOG_FORMAT_MAX_PAYLOAD bytes. Does not
 * take a reference to @e->data. Pure. */
void format_entry_encode(const struct raft_entry *e, void *out);

/* format_entry_check verifies the value @value (@value_len bytes) stored
 * under the key of @index: its size, its length field and its checksum.
 * Returns NULL when it is sound, or else a static text naming the defect
 * (for an error message). Pure. */
const char *format_entry_check(raft_index index, const void *value,
                               size_t value_len);

/* format_entry_decode decodes @value (@value_len bytes), which
 * format_entry_check has accepted for @index, into *@out: term, type, the
 * index, and data (a new buf reference owned by the caller, or NULL for an
 * empty payload). Errors: RAFT_NOMEM. */
int format_entry_decode(raft_index index, const void *value, size_t value_len,
                        struct raft_entry *out);

/* format_entry_term returns the term of the entry value @value, which
 * format_entry_check has accepted. Pure. */
raft_term format_entry_term(const void *value);

/* format_version_encode writes the "format" record of @version into @out
 * (4 bytes). Pure. */
void format_version_encode(uint32_t version,
                           uint8_t out[LMDB_LOG_FORMAT_VERSION_LEN]);

/* format_version_decode reads the "format" record @value (@value_len
 * bytes) into *@out_version; it does not judge the version. Pure.
 * Errors: RAFT_CORRUPT (@value_len is not 4). */
int format_version_decode(const void *value, size_t value_len,
                          uint32_t *out_version);

/* format_meta_encode writes the meta record named @name (NUL-terminated)
 * holding @value into @out (16 bytes). Pure. */
void format_meta_encode(const char *name, uint64_t value,
                        uint8_t out[LMDB_LOG_FORMAT_META_LEN]);

/* format_meta_decode reads the meta record @value (@value_len bytes) stored
 * under @name into *@out_value. Pure. Errors: RAFT_CORRUPT (wrong size or
 * checksum mismatch, including a record stored under another name). */
int format_meta_decode(const char *name, const void *value, size_t value_len,
                       uint64_t *out_value);

#endif /* LMDB_LOG_FORMAT_H */
