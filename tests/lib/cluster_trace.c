/* The cluster's tracing (cluster.h): the hash of every output of every
 * core, and the CLUSTER_TRACE=1 lines of delivered messages. */

#include <stdio.h>
#include <stdlib.h>

#include "raft/message.h"
#include "tests/lib/cluster_internal.h"

/* trace_bytes folds @len bytes into the output hash (FNV-1a, 64 bits). */
static void trace_bytes(struct cluster *c, const void *p, size_t len)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < len; i++) {
        c->trace ^= b[i];
        c->trace *= 0x100000001b3ULL;
    }
}

static void trace_u64(struct cluster *c, uint64_t v)
{
    unsigned char b[8];
    unsigned i;

    for (i = 0; i < 8; i++) {
        b[i] = (unsigned char)(v >> (8 * i));
    }
    trace_bytes(c, b, sizeof b);
}

static void trace_entry(struct cluster *c, const struct raft_entry *e)
{
    trace_u64(c, e->term);
    trace_u64(c, e->index);
    trace_u64(c, e->type);
    if (e->data != NULL) {
        trace_u64(c, e->data->len);
        trace_bytes(c, e->data->data, e->data->len);
    } else {
        trace_u64(c, 0);
    }
}

void cluster_trace_update(struct cluster *c, raft_id id,
                          const struct raft_update *u)
{
    unsigned i;

    trace_u64(c, id);
    trace_u64(c, u->hard_state_changed);
    trace_u64(c, u->hard_state.term);
    trace_u64(c, u->hard_state.vote);
    trace_u64(c, u->proposed_index);
    trace_u64(c, u->proposed_term);
    trace_u64(c, u->n_entries);
    for (i = 0; i < u->n_entries; i++) {
        trace_entry(c, &u->entries[i]);
    }
    trace_u64(c, u->n_messages);
    for (i = 0; i < u->n_messages; i++) {
        struct raft_frame f;
        raft_frame_wrap(&u->messages[i], &f);
        size_t len = raft_frame_encoded_len(&f);
        unsigned char *frame = cluster_alloc(c, NULL, len > 0 ? len : 1);
        if (raft_frame_encode(&f, frame, len) != 0) {
            free(frame);
            cluster_fail(c, "node %llu emits an unencodable message",
                         (unsigned long long)id);
        }
        trace_bytes(c, frame, len);
        free(frame);
    }
    trace_u64(c, u->n_committed);
    for (i = 0; i < u->n_committed; i++) {
        trace_entry(c, &u->committed[i]);
    }
}

uint64_t cluster_trace_hash(const struct cluster *c)
{
    return c->trace;
}

void cluster_trace_message(const struct cluster *c,
                           const struct raft_message *m)
{
    const struct raft_append_entries *ae = &m->append_entries;
    const struct raft_append_entries_result *ar = &m->append_entries_result;

    fprintf(stderr, "t=%llu %llu->%llu ", (unsigned long long)c->now,
            (unsigned long long)m->from, (unsigned long long)m->to);
    switch (m->type) {
        case RAFT_MSG_REQUEST_VOTE:
            fprintf(stderr, "RV%s term %llu last %llu/%llu\n",
                    m->request_vote.pre_vote ? "(pre)" : "",
                    (unsigned long long)m->request_vote.term,
                    (unsigned long long)m->request_vote.last_log_index,
                    (unsigned long long)m->request_vote.last_log_term);
            break;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            fprintf(stderr, "RVR%s term %llu granted %d\n",
                    m->request_vote_result.pre_vote ? "(pre)" : "",
                    (unsigned long long)m->request_vote_result.term,
                    m->request_vote_result.vote_granted);
            break;
        case RAFT_MSG_APPEND_ENTRIES:
            fprintf(
                stderr,
                "AE term %llu prev %llu/%llu commit %llu n %u"
                "%s%llu\n",
                (unsigned long long)ae->term,
                (unsigned long long)ae->prev_log_index,
                (unsigned long long)ae->prev_log_term,
                (unsigned long long)ae->leader_commit, ae->n_entries,
                ae->n_entries > 0 ? " last term " : "",
                ae->n_entries > 0
                    ? (unsigned long long)ae->entries[ae->n_entries - 1].term
                    : 0ULL);
            break;
        default:
            fprintf(stderr,
                    "AER term %llu ok %d reject %llu last %llu "
                    "conflict %llu\n",
                    (unsigned long long)ar->term, ar->success,
                    (unsigned long long)ar->reject_index,
                    (unsigned long long)ar->last_log_index,
                    (unsigned long long)ar->conflict_index);
            break;
    }
}
