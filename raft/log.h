/* The in-memory Raft log: entries from first to last index, each holding a
 * reference to its payload buf (paper Fig. 2 "log[]"). Entries before the
 * first index were compacted into a snapshot and are committed; the term of
 * the last of them (the snapshot boundary, first - 1) is remembered, so
 * consistency checks at the boundary work (paper §7). */

#ifndef RAFT_LOG_H
#define RAFT_LOG_H

#include <stddef.h>

#include "raft.h"

/* A contiguous run of entries.
 * Invariant: entries[i].index == first + i for i < n.
 * Invariant: every entries[i].data reference is owned by the log. */
struct raft_log {
    struct raft_entry *entries; /* the entries, n long, cap allocated */
    size_t n;                   /* number of entries held */
    size_t cap;                 /* allocated slots */
    raft_index first;           /* index of entries[0], >= 1 */
    raft_term snapshot_term;    /* term of entry first - 1 (0: none or
                                   unknown) */
};

/* log_init fills @l with copies of @n entries starting at index @first,
 * after a boundary (@first - 1) of term @snapshot_term, taking a reference
 * to each payload. Writes @l only on success.
 * Errors: RAFT_INVALID (@first is 0 or the entries are not contiguous from
 * @first), RAFT_NOMEM. Same thread as the owning core. */
int log_init(struct raft_log *l, raft_index first, raft_term snapshot_term,
             const struct raft_entry *entries, unsigned n);

/* log_close drops every payload reference and frees the entries array. */
void log_close(struct raft_log *l);

/* log_last_index returns the index of the last entry, first - 1 when the
 * log is empty. */
raft_index log_last_index(const struct raft_log *l);

/* log_term_at returns the term of the entry at @index, the snapshot term
 * at first - 1, or 0 when @index is 0 or outside [first - 1, last] (the
 * term of an older compacted entry is unknown). */
raft_term log_term_at(const struct raft_log *l, raft_index index);

/* log_last_term returns the term of the last entry; when empty, the
 * snapshot term. */
raft_term log_last_term(const struct raft_log *l);

/* log_get returns the entry at @index, or NULL when outside [first, last].
 * The pointer is valid until the log is next appended to or truncated. */
const struct raft_entry *log_get(const struct raft_log *l, raft_index index);

/* log_reserve makes room for @extra more entries, so that the next @extra
 * log_append calls cannot fail nor move the array.
 * Errors: RAFT_NOMEM (nothing changed). */
int log_reserve(struct raft_log *l, size_t extra);

/* log_append appends an entry with index last + 1, taking a reference to
 * @data (may be NULL). Room must have been reserved with log_reserve.
 * Returns the new entry's index. */
raft_index log_append(struct raft_log *l, raft_term term, uint8_t type,
                      struct raft_buf *data);

/* log_truncate deletes every entry with index >= @from (a conflicting
 * suffix, paper Fig. 2 receiver rule 3), dropping their references. */
void log_truncate(struct raft_log *l, raft_index from);

/* log_compact drops every entry through @index (a prefix now in a
 * snapshot), remembers the term of @index as the snapshot term, and makes
 * @index + 1 the first index; shrinks the array when it is mostly empty
 * (a failed shrink keeps the larger one). @index must be in [first, last].
 * Moves the entries: pointers from log_get are invalid after it. */
void log_compact(struct raft_log *l, raft_index index);

/* log_reset drops every entry and makes (@index, @term) the snapshot
 * boundary: the first index becomes @index + 1 (an installed snapshot,
 * paper §7). Frees the array. */
void log_reset(struct raft_log *l, raft_index index, raft_term term);

#endif /* RAFT_LOG_H */
