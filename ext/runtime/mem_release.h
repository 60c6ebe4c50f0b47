/* Giving the memory a node freed in bulk back to the system.
 *
 * The leader keeps every entry of its log in memory until it compacts;
 * while a follower receives a snapshot, the compaction waits for it
 * (store.c, follower_hold), so a join under writes holds every write of
 * the join (about 1.1 kB of heap per 1 kB entry). Snapshot chunks (1 MiB
 * each) are allocated and freed on both sides of a transfer. All of it is
 * freed afterwards, but glibc keeps the free pages of its thread arenas:
 * after a 1 GB join under one client's writes, the leader's RssAnon stayed
 * at 35 MB and the new node's at 51 MB, of which malloc_trim gave back 29
 * and 34 MB (docs/performance.md, "Anonymous memory"). So after a
 * snapshot was sent or installed, once the in-memory log shrank by
 * EXT__MEM_RELEASE_ENTRIES or more since the last trim (a compaction after
 * a hold), or after a compaction that left EXT__MEM_RELEASE_FREE_BYTES or
 * more free in the heap (a few thousand large entries: a bulk load), the
 * node's tick calls malloc_trim(0), at most once a second.
 * Routine compactions (snapshot_threshold minus trailing_entries, 7,168
 * entries by default) do not trim: their memory is reused by the next
 * entries, and trimming it each second cost 14 % of the writes a second
 * at 64 clients (the pages are faulted in again).
 *
 * The rule (mem_release_due) is pure and unit-tested; mem_release_on_tick
 * reads the driver's counters and the core's log and trims. Loop thread
 * only. */

#ifndef EXT_MEM_RELEASE_H
#define EXT_MEM_RELEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/uv_node.h"

/* Least time between two trims, ms. */
#define EXT__MEM_RELEASE_MS 1000

/* Entries the in-memory log must have shrunk by since the last trim for
 * a compaction to trim (twice the default compaction's). */
#define EXT__MEM_RELEASE_ENTRIES 16384

/* Free heap after a compaction, bytes, from which it trims (glibc's
 * mallinfo2 fordblks). */
#define EXT__MEM_RELEASE_FREE_BYTES (32u << 20)

/* What the rule remembers between ticks. */
struct ext_mem_release {
    uint64_t events;      /* snapshots sent + installed, at the last trim */
    uint64_t compactions; /* the driver's compactions at the last look */
    bool pending;         /* a compaction left much free, not trimmed yet */
    uint64_t peak;        /* most entries the log held since the last trim */
    uint64_t last_ms;     /* monotonic ms of the last trim, 0 before any */
    uint64_t n_trims;     /* trims so far */
};

/* mem_release_due returns whether to trim now, given @events (the
 * driver's snapshots sent and snapshots installed so far), @n_log (the
 * entries the core's log holds now), @freed_much (a compaction since the
 * last call left EXT__MEM_RELEASE_FREE_BYTES or more free) and @now_ms
 * (monotonic ms, > 0): when @events moved since the last trim, the log
 * holds EXT__MEM_RELEASE_ENTRIES fewer entries than at its peak since
 * then, or a compaction left much free since then, and the last trim is
 * EXT__MEM_RELEASE_MS old or more (or none was made). Records the peak
 * and @freed_much; when it returns true, also @events, @n_log as the new
 * peak and @now_ms as the trim's. Pure; any thread that owns @m. */
bool mem_release_due(struct ext_mem_release *m, uint64_t events, uint64_t n_log,
                     bool freed_much, uint64_t now_ms);

/* mem_release_on_tick trims the process's free heap (malloc_trim(0)) when
 * mem_release_due says so for driver @d's counters and log. Loop
 * thread. */
void mem_release_on_tick(struct ext_mem_release *m,
                         const struct raft_uv_node *d);

#endif /* EXT_MEM_RELEASE_H */
