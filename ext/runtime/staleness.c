/* The staleness bound on local reads (staleness.h). */

#include "staleness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stopped.h"

/* wall_ms returns the wall clock, ms since the epoch. */
static uint64_t wall_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

/* mono_ms returns CLOCK_MONOTONIC in ms. */
static int64_t mono_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Nodes of the process that are stale now. */
static atomic_uint n_stale;
/* Nodes of this process with a bound (staleness_any). */
static atomic_uint n_bounded;

struct ext_staleness {
    unsigned max_ms;                  /* the bound, 0 off */
    struct ext_node_log *log;         /* borrowed */
    char notice_path[4200];           /* "" for none */
    char bound_path[4200];            /* the bound marker, "" for none */
    int64_t beat_at;                  /* its mtime last set, mono ms (loop) */
    int64_t tick_at;                  /* the last tick, mono ms (loop) */
    bool beat_failed;                 /* the last beat failed (loop) */
    bool bound_due;                   /* the marker could not be written
                                         at start: each beat tries again
                                         (loop) */
    struct ext_staleness_memory mem;  /* the rule's (loop thread) */
    bool notice_up;                   /* the notice exists (loop) */
    char notice_text[200];            /* what it holds (loop) */
    pthread_mutex_t mu;               /* guards now */
    struct ext_staleness_verdict now; /* the verdict last published */
    _Atomic bool stale;               /* now.stale, counted in n_stale */
};

/* bound_write writes the bound marker of @s naming process @pid (0: no
 * node serves the file), best effort: a WARN line on failure when @warn.
 * From the loop thread (@warn false) it is not fsynced: the loop never
 * waits for the disk, and a marker lost in a crash only lets reads
 * through until the next start. Returns whether it was written. */
static bool bound_write(struct ext_staleness *s, long pid, bool warn)
{
    char text[128];
    snprintf(text, sizeof text,
             EXT_BOUND_MAGIC "\nmax_staleness_ms=%u\npid=%ld\n", s->max_ms,
             pid);
    if (stopped_write_file(s->bound_path, text, warn)) {
        return true;
    }
    if (warn) {
        node_log_line(s->log, RAFT_LOG_WARN, "cannot write %s: %s (%s)",
                      s->bound_path, strerror(errno),
                      pid != 0 ? "until it is, other processes take the "
                                 "database as served by no node, or as not "
                                 "bound; tried again at each beat"
                               : "other processes' reads are not refused "
                                 "while no node serves the database");
    }
    return false;
}

/* notice_follow makes the notice file exist, holding @text, exactly
 * while the node is stale, rewritten when @text changes (best effort:
 * without it, other processes let their reads through; a line says so
 * once per change). */
static void notice_follow(struct ext_staleness *s, bool stale, const char *text)
{
    char line[sizeof s->notice_text + 2];
    if (s->notice_path[0] == '\0' ||
        (stale == s->notice_up &&
         (!stale || strcmp(text, s->notice_text) == 0))) {
        return;
    }
    if (stale) {
        snprintf(line, sizeof line, "%s\n", text);
        if (!stopped_write_file(s->notice_path, line, false)) {
            if (strcmp(text, s->notice_text) != 0) {
                node_log_line(s->log, RAFT_LOG_WARN,
                              "cannot write %s: %s (other processes' reads "
                              "of the stale replica are not refused)",
                              s->notice_path, strerror(errno));
                snprintf(s->notice_text, sizeof s->notice_text, "%s", text);
            }
            return;
        }
        snprintf(s->notice_text, sizeof s->notice_text, "%s", text);
    } else {
        unlink(s->notice_path);
        s->notice_text[0] = '\0';
    }
    s->notice_up = stale;
}

int staleness_new(unsigned max_ms, const char *notice_path,
                  const char *bound_path, struct ext_node_log *log,
                  struct ext_staleness **out)
{
    struct ext_staleness *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    s->max_ms = max_ms;
    s->log = log;
    snprintf(s->notice_path, sizeof s->notice_path, "%s", notice_path);
    snprintf(s->bound_path, sizeof s->bound_path, "%s", bound_path);
    if (s->notice_path[0] != '\0') {
        /* One left by a run that crashed: written anew below when the
         * node has a bound (it is stale until it hears its leader). */
        unlink(s->notice_path);
    }
    pthread_mutex_init(&s->mu, NULL);
    if (max_ms > 0) {
        /* Until the first tick: no leader known yet. */
        struct ext_staleness_view v = {.contact_ms = UINT64_MAX,
                                       .wall_ms = wall_ms()};
        struct ext_staleness_memory m = {0};
        staleness_judge(&m, max_ms, &v, &s->now);
        atomic_store(&s->stale, true);
        atomic_fetch_add(&n_stale, 1);
        atomic_fetch_add(&n_bounded, 1);
        /* The notice before the marker: once the marker names this live
         * process, other processes serve reads unless a notice refuses
         * them, and this node's state is the one it had when it
         * stopped, or was killed, until it catches up. */
        notice_follow(s, true, s->now.notice);
    }
    if (s->bound_path[0] != '\0') {
        if (max_ms > 0) {
            /* A full disk does not stop the node: the beats write the
             * marker once space frees (before, refreshing the mtime of
             * one a stopped node left would tell that no node serves). */
            s->bound_due = !bound_write(s, (long)getpid(), true);
            s->beat_at = mono_ms();
        } else {
            unlink(s->bound_path); /* a clean start without the bound */
        }
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
    if (s->max_ms > 0) {
        atomic_fetch_sub(&n_bounded, 1);
    }
    if (s->notice_up) {
        unlink(s->notice_path);
    }
    if (s->max_ms > 0 && s->bound_path[0] != '\0') {
        /* No node serves the file from now on. */
        (void)bound_write(s, 0, true);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* beat sets the bound marker's mtime to now when EXT_BOUND_BEAT_MS passed
 * since the last time: readers of other processes take a node whose
 * marker is older than EXT_BOUND_SILENCE_MS as not serving. Loop
 * thread. */
static void beat(struct ext_staleness *s)
{
    int64_t now = mono_ms();
    struct timespec t[2];
    if (s->max_ms == 0 || s->bound_path[0] == '\0' ||
        now - s->beat_at < EXT_BOUND_BEAT_MS(s->max_ms)) {
        return;
    }
    s->beat_at = now;
    if (s->bound_due) {
        s->bound_due = !bound_write(s, (long)getpid(), false);
        if (!s->bound_due) {
            node_log_line(s->log, RAFT_LOG_INFO,
                          "wrote %s: it names this "
                          "process",
                          s->bound_path);
        }
        return;
    }
    /* This clock's time rather than the file system's (UTIME_NOW): the
     * same clock as the readers', not a coarser one nor a server's. */
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[1] = t[0];
    if (utimensat(AT_FDCWD, s->bound_path, t, 0) == 0) {
        s->beat_failed = false;
    } else if (!s->beat_failed) {
        s->beat_failed = true;
        node_log_line(s->log, RAFT_LOG_WARN,
                      "cannot refresh %s: %s (other processes refuse reads "
                      "once it is %u ms old)",
                      s->bound_path, strerror(errno),
                      EXT_BOUND_SILENCE_MS(s->max_ms));
    }
}

/* test_hold_after_stall holds the tick, in test builds only, for
 * RAFTSQL_TEST_STALL_HOLD_MS between its notice and its beat when the
 * loop was held a second or more since the tick before (a paused or
 * starved process): what another process's reader sees in between is
 * what a slow loop lets it see. */
static void test_hold_after_stall(struct ext_staleness *s, int64_t gap_ms)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *ms = getenv("RAFTSQL_TEST_STALL_HOLD_MS");
    if (ms != NULL && gap_ms >= 1000 && s->tick_at != 0) {
        struct timespec t = {.tv_sec = atoi(ms) / 1000,
                             .tv_nsec = (atoi(ms) % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
#else
    (void)s;
    (void)gap_ms;
#endif
}

bool staleness_on_tick(struct ext_staleness *s,
                       const struct ext_staleness_view *v)
{
    struct ext_staleness_verdict out;
    int64_t now = mono_ms(), gap = now - s->tick_at;
    bool was;
    /* The verdict and its notice first, the beat after: a beat first,
     * after a held loop (a paused process), told other processes this
     * node serves the file while the notice still said it was fresh, and
     * they read its old state (make jepsen, seed 335615: 2.3 s stale). */
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
                          "%s (max_staleness_ms=%u): reads are served",
                          s->max_ms > 0 ? "fresh again" : "a member again",
                          s->max_ms);
        }
    }
    notice_follow(s, out.stale, out.notice);
    test_hold_after_stall(s, gap);
    s->tick_at = now;
    beat(s);
    return out.stale && !was;
}

void staleness_get(struct ext_staleness *s, struct ext_staleness_verdict *out)
{
    uint64_t now;

    pthread_mutex_lock(&s->mu);
    *out = s->now;
    pthread_mutex_unlock(&s->mu);
    if (out->stale || out->fresh_until == 0 ||
        (now = (uint64_t)mono_ms()) <= out->fresh_until) {
        return;
    }
    out->stale = true;
    snprintf(out->reason, sizeof out->reason,
             "stale replica: applied state %llu ms old: no round trip "
             "renewed it (max_staleness_ms=%u); not judged since the last "
             "tick (the next, due within 10 ms, says why)",
             (unsigned long long)(now - out->fresh_until + s->max_ms),
             s->max_ms);
}

bool staleness_any(void)
{
    return atomic_load(&n_stale) > 0 || atomic_load(&n_bounded) > 0;
}
