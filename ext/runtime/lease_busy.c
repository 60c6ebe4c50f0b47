/* The writers of a node lately answered busy (lease_busy.h). */

#include "lease_busy.h"

uint64_t lease_busy_kept(const struct ext_lease_busy *b, uint64_t holder,
                         uint64_t now, uint64_t again_ms)
{
    for (unsigned i = 0; i < EXT_LEASE_BUSY_SLOTS; i++) {
        if (b->slot[i].holder == holder && now < b->slot[i].at + again_ms) {
            return b->slot[i].ticket;
        }
    }
    return 0;
}

void lease_busy_note(struct ext_lease_busy *b, uint64_t holder, uint64_t ticket,
                     uint64_t now, bool busy)
{
    unsigned at = 0;

    for (unsigned i = 0; i < EXT_LEASE_BUSY_SLOTS; i++) {
        if (b->slot[i].holder == holder) {
            b->slot[i].holder = busy ? holder : 0;
            b->slot[i].at = now;
            b->slot[i].ticket = ticket;
            return;
        }
    }
    if (!busy) {
        return;
    }
    /* A free slot, else the one answered longest ago (taken in turn
     * instead, slots of writers that had asked again within the retry's
     * time were given to others, which sent those back to the end of the
     * line: 655 of 675 refusals with 64 writers of one node). */
    for (unsigned i = 0; i < EXT_LEASE_BUSY_SLOTS; i++) {
        if (b->slot[i].holder == 0) {
            at = i;
            break;
        }
        if (b->slot[i].at < b->slot[at].at) {
            at = i;
        }
    }
    b->slot[at].holder = holder;
    b->slot[at].at = now;
    b->slot[at].ticket = ticket;
}
