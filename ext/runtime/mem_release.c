/* Giving the memory a node freed in bulk back to the system
 * (mem_release.h). */

#include "mem_release.h"

#include <malloc.h>
#include <time.h>

bool mem_release_due(struct ext_mem_release *m, uint64_t events,
                     uint64_t now_ms)
{
    if (events == m->events) {
        return false;
    }
    if (m->last_ms != 0 && now_ms < m->last_ms + EXT__MEM_RELEASE_MS) {
        return false;
    }
    m->events = events;
    m->last_ms = now_ms;
    m->n_trims++;
    return true;
}

void mem_release_on_tick(struct ext_mem_release *m,
                         const struct raft_uv_node *d)
{
    struct raft_uv_node_stats st;
    struct timespec ts;
    uint64_t now_ms;

    raft_uv_node_stats(d, &st);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
    if (mem_release_due(m,
                        st.n_compactions + st.n_snapshots_sent +
                            st.n_snapshots_installed,
                        now_ms)) {
        (void)malloc_trim(0);
    }
}
