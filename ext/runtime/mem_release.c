/* Giving the memory a node freed in bulk back to the system
 * (mem_release.h). */

#include "mem_release.h"

#include <malloc.h>
#include <time.h>

bool mem_release_due(struct ext_mem_release *m, uint64_t events, uint64_t n_log,
                     bool freed_much, uint64_t now_ms)
{
    if (n_log > m->peak) {
        m->peak = n_log;
    }
    m->pending = m->pending || freed_much;
    if (events == m->events && m->peak - n_log < EXT__MEM_RELEASE_ENTRIES &&
        !m->pending) {
        return false;
    }
    if (m->last_ms != 0 && now_ms < m->last_ms + EXT__MEM_RELEASE_MS) {
        return false;
    }
    m->events = events;
    m->peak = n_log;
    m->pending = false;
    m->last_ms = now_ms;
    m->n_trims++;
    return true;
}

void mem_release_on_tick(struct ext_mem_release *m,
                         const struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    struct raft_uv_node_stats st;
    struct timespec ts;
    uint64_t now_ms;
    raft_index first = raft_first_index(core);
    raft_index last = raft_last_index(core);
    bool freed_much = false;

    raft_uv_node_stats(d, &st);
    if (st.n_compactions != m->compactions) {
        /* Once per compaction: mallinfo2 walks every arena. */
        struct mallinfo2 mi = mallinfo2();
        m->compactions = st.n_compactions;
        freed_much = mi.fordblks >= EXT__MEM_RELEASE_FREE_BYTES;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
    if (mem_release_due(m, st.n_snapshots_sent + st.n_snapshots_installed,
                        last >= first ? last + 1 - first : 0, freed_much,
                        now_ms)) {
        (void)malloc_trim(0);
    }
}
