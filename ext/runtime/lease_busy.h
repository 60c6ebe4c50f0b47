/* The writers of a node lately answered busy for the write lease, and the
 * place in line each keeps (lease.c): a writer that asks again within a
 * short time of its busy answer is its busy handler's retry, and goes
 * back to the place it had, not to the end of the line. A fixed table,
 * kept by the node's lease under its mutex; pure (no clock, no lock):
 * the caller passes the time. */

#ifndef EXT_LEASE_BUSY_H
#define EXT_LEASE_BUSY_H

#include <stdbool.h>
#include <stdint.h>

/* How many writers of a node are remembered at once. */
#define EXT_LEASE_BUSY_SLOTS 32

/* The table; zeroed: empty. */
struct ext_lease_busy {
    struct {
        uint64_t holder; /* 0: a free slot */
        uint64_t at;     /* when it was last answered busy, ms */
        uint64_t ticket; /* the place in line it keeps */
    } slot[EXT_LEASE_BUSY_SLOTS];
};

/* lease_busy_kept returns the ticket @holder (non-zero) keeps when it
 * was answered busy less than @again_ms before @now (ms, the caller's
 * clock), else 0. */
uint64_t lease_busy_kept(const struct ext_lease_busy *b, uint64_t holder,
                         uint64_t now, uint64_t again_ms);

/* lease_busy_note records that @holder (non-zero), in line at @ticket,
 * was answered busy at @now (@busy true): in its own slot if it has one,
 * else in a free slot, else in the slot answered longest ago (a writer
 * still retrying keeps its place while fewer than EXT_LEASE_BUSY_SLOTS
 * retry at once). With @busy false it forgets @holder (it got the lease,
 * or another answer). */
void lease_busy_note(struct ext_lease_busy *b, uint64_t holder, uint64_t ticket,
                     uint64_t now, bool busy);

#endif /* EXT_LEASE_BUSY_H */
