/* The staleness bound on local reads (staleness.h). */

#include "staleness.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stopped.h"

void staleness_judge(struct ext_staleness_memory *mem, unsigned max_ms,
                     const struct ext_staleness_view *v,
                     struct ext_staleness_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->leader_known = v->contact_ms != UINT64_MAX;
    out->lag_ms = out->leader_known ? v->contact_ms : 0;
    out->lag_entries =
        v->leader_commit > v->applied ? v->leader_commit - v->applied : 0;
    if (out->leader_known && !mem->contacted) {
        mem->contacted = true;
        mem->catch_up_to = v->leader_commit;
    }
    if (mem->contacted && !mem->caught_up && v->applied >= mem->catch_up_to) {
        mem->caught_up = true;
    }
    if (max_ms == 0) {
        return;
    }
    if (!out->leader_known) {
        out->stale = true;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: no leader known (max_staleness_ms=%u)",
                 max_ms);
    } else if (v->contact_ms > max_ms) {
        out->stale = true;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: %s for %llu ms (max_staleness_ms=%u)",
                 v->leading ? "no quorum heard" : "no leader heard",
                 (unsigned long long)v->contact_ms, max_ms);
    } else if (!mem->caught_up) {
        out->stale = true;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: catching up after its start: applied "
                 "%llu of the leader's commit index %llu "
                 "(max_staleness_ms=%u)",
                 (unsigned long long)v->applied,
                 (unsigned long long)mem->catch_up_to, max_ms);
    }
}

/* Nodes of the process that are stale now. */
static atomic_uint n_stale;

struct ext_staleness {
    unsigned max_ms;                  /* the bound, 0 off */
    struct ext_node_log *log;         /* borrowed */
    char notice_path[4200];           /* "" for none */
    struct ext_staleness_memory mem;  /* the rule's (loop thread) */
    bool notice_up;                   /* the notice exists (loop) */
    pthread_mutex_t mu;               /* guards now */
    struct ext_staleness_verdict now; /* the verdict last published */
    _Atomic bool stale;               /* now.stale, counted in n_stale */
};

int staleness_new(unsigned max_ms, const char *notice_path,
                  struct ext_node_log *log, struct ext_staleness **out)
{
    struct ext_staleness *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    s->max_ms = max_ms;
    s->log = log;
    snprintf(s->notice_path, sizeof s->notice_path, "%s", notice_path);
    if (s->notice_path[0] != '\0') {
        /* One left by a run that crashed: the first tick writes it anew
         * when the node is stale. */
        unlink(s->notice_path);
    }
    pthread_mutex_init(&s->mu, NULL);
    if (max_ms > 0) {
        /* Until the first tick: no leader known yet. */
        struct ext_staleness_view v = {.contact_ms = UINT64_MAX};
        struct ext_staleness_memory m = {0};
        staleness_judge(&m, max_ms, &v, &s->now);
        atomic_store(&s->stale, true);
        atomic_fetch_add(&n_stale, 1);
    }
    *out = s;
    return 0;
}

void staleness_free(struct ext_staleness *s)
{
    if (s == NULL) {
        return;
    }
    if (atomic_load(&s->stale)) {
        atomic_fetch_sub(&n_stale, 1);
    }
    if (s->notice_up) {
        unlink(s->notice_path);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* notice_follow makes the notice file exist, holding @reason, exactly
 * while the node is stale (best effort: without it, other processes let
 * their reads through; a line says so once per change). */
static void notice_follow(struct ext_staleness *s, bool stale,
                          const char *reason)
{
    char text[sizeof s->now.reason + 2];
    if (s->notice_path[0] == '\0' || stale == s->notice_up) {
        return;
    }
    if (stale) {
        snprintf(text, sizeof text, "%s\n", reason);
        if (!stopped_write_file(s->notice_path, text, false)) {
            node_log_line(s->log, RAFT_LOG_WARN,
                          "cannot write %s: %s (other processes' reads "
                          "of the stale replica are not refused)",
                          s->notice_path, strerror(errno));
            return;
        }
    } else {
        unlink(s->notice_path);
    }
    s->notice_up = stale;
}

bool staleness_on_tick(struct ext_staleness *s,
                       const struct ext_staleness_view *v)
{
    struct ext_staleness_verdict out;
    bool was;
    staleness_judge(&s->mem, s->max_ms, v, &out);
    pthread_mutex_lock(&s->mu);
    s->now = out;
    pthread_mutex_unlock(&s->mu);
    was = atomic_exchange(&s->stale, out.stale);
    if (was != out.stale) {
        if (out.stale) {
            atomic_fetch_add(&n_stale, 1);
            node_log_line(s->log, RAFT_LOG_INFO,
                          "%s: reads of replicated tables are refused",
                          out.reason);
        } else {
            atomic_fetch_sub(&n_stale, 1);
            node_log_line(s->log, RAFT_LOG_INFO,
                          "fresh again (max_staleness_ms=%u): reads "
                          "are served",
                          s->max_ms);
        }
    }
    notice_follow(s, out.stale, out.reason);
    return out.stale && !was;
}

void staleness_get(struct ext_staleness *s, struct ext_staleness_verdict *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->now;
    pthread_mutex_unlock(&s->mu);
}

bool staleness_any(void)
{
    return atomic_load(&n_stale) > 0;
}
