/* The start's verification of the database file in the background
 * (start_scan.h): sql_checksum_verify on a read-only connection of its
 * own, in one read transaction, so the file's rows and the running
 * checksum stored with the applied index (raftsql_applied.sums) are read
 * at one snapshot while the apply thread goes on.
 *
 * Happy path: scan -> equal -> one INFO line; the node served reads and
 * raft_exec writes all along, and its plain writes once it ended.
 * Failure modes:
 * - The file differs at a snapshot after the start's applied index A:
 *   the entries applied since came through the apply connection, the
 *   landed entry of a plain write too (the apply decides that from the
 *   file, sql_fsm_apply): what differs was written while no node ran.
 *   Diverged, with the reason a start gave before: "the database changed
 *   while the node was stopped: ...".
 * - It differs at A itself: entry N, the first after A and the no-ops
 *   after it (a batch of no-ops alone is not recorded: sql_fsm_apply),
 *   may be a plain write whose writer's commit landed in the file before
 *   this node recorded it (window 2 of the plain-write crash windows).
 *   When this node's log holds N and it is no changeset, nothing explains
 *   the difference: diverged. Else the scan waits for N to be applied
 *   (when the log holds none yet, at most next_ms, then diverged) and
 *   scans again: what still differs was written while no node ran.
 * - A snapshot install during the scan replaced the file: the result is
 *   dropped (diverged_since compares the install count).
 * - The scan fails (an I/O error): a WARN line, as a start's did.
 * - The node stops: the scan is interrupted (a progress handler), and
 *   start_scan_end says so, so no clean stop is recorded. */

#include "start_scan.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../sql/sql.h"

/* How long one wait for the applied index lasts before the stop flag is
 * looked at again, ms. */
#define EXT__START_SCAN_SLICE_MS 50

struct ext_start_scan {
    struct ext_start_scan_config cfg;  /* (copy) */
    struct ext_start_scan_hooks hooks; /* (copy) */
    struct ext_node_log *log;          /* the node's log lines */
    pthread_t thread;                  /* the scan thread */
    atomic_bool cancel;                /* start_scan_end asked it to end */
    uint64_t began_ms;                 /* CLOCK_MONOTONIC at begin */
    uint64_t installs;                 /* the install count at begin */
    pthread_mutex_t mu;                /* guards view */
    struct ext_start_scan_view view;   /* where it stands (mu) */
};

/* mono_ms returns CLOCK_MONOTONIC in ms. */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *start_scan_state_name(int state)
{
    switch (state) {
        case EXT_START_SCAN_RUNNING:
            return "running";
        case EXT_START_SCAN_WAITING:
            return "waiting";
        case EXT_START_SCAN_EQUAL:
            return "equal";
        case EXT_START_SCAN_DIFFERS:
            return "differs";
        case EXT_START_SCAN_FAILED:
            return "failed";
        case EXT_START_SCAN_REPLACED:
            return "replaced";
        default:
            return "stopped";
    }
}

/* set_state moves @s to @state; an ending state stops the clock. */
static void set_state(struct ext_start_scan *s, int state)
{
    pthread_mutex_lock(&s->mu);
    s->view.state = state;
    s->view.elapsed_ms = mono_ms() - s->began_ms;
    pthread_mutex_unlock(&s->mu);
}

/* on_interrupted is the scan's interrupted hook. */
static int on_interrupted(void *data)
{
    struct ext_start_scan *s = data;
    return atomic_load(&s->cancel) ? 1 : 0;
}

/* test_gate holds the scan, in test builds only, while the file named by
 * RAFTSQL_TEST_START_SCAN_GATE does not exist (at most two minutes), so a
 * test sees the node serve while its start's scan has not ended. */
static void test_gate(struct ext_start_scan *s)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *gate = getenv("RAFTSQL_TEST_START_SCAN_GATE");
    uint64_t until = mono_ms() + 120000;
    if (gate == NULL) {
        return;
    }
    node_log_line(s->log, RAFT_LOG_INFO,
                  "start: the scan holds its snapshot until %s exists "
                  "(test build)",
                  gate);
    while (access(gate, F_OK) != 0 && !atomic_load(&s->cancel) &&
           mono_ms() < until) {
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
#else
    (void)s;
#endif
}

/* on_snapshot is the scan's snapshot hook: the index it reads at. */
static void on_snapshot(void *data, uint64_t index)
{
    struct ext_start_scan *s = data;
    pthread_mutex_lock(&s->mu);
    s->view.index = index;
    pthread_mutex_unlock(&s->mu);
    test_gate(s);
}

/* schema_differs says whether the schema sum of @v's file differs from
 * the one stored with its applied index. */
static bool schema_differs(const struct sql_verify *v)
{
    return v->schema_available && v->schema_stored != v->schema_scanned;
}

/* differs says whether scan @v found anything that differs. */
static bool differs(const struct sql_verify *v)
{
    return v->n_differ > 0 || schema_differs(v);
}

/* differ_names writes the tables of @v that differ into @out ("kv", "kv,
 * t2, ..."), and "the schema" when it differs. */
static void differ_names(const struct sql_verify *v, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i <= v->n_differ && used + 8 < len; i++) {
        const char *name = i < v->n_differ     ? v->differ[i].name
                           : schema_differs(v) ? "the schema"
                                               : NULL;
        int k;
        if (name == NULL) {
            break;
        }
        k = snprintf(out + used, len - used, "%s%s", i > 0 ? ", " : "", name);
        if (k < 0 || (size_t)k >= len - used) {
            snprintf(out + used, len - used, ", ...");
            break;
        }
        used += (size_t)k;
    }
}

/* differ_what writes into @out what of @v differs, in words. */
static void differ_what(const struct sql_verify *v, char *out, size_t len)
{
    char names[200];
    size_t used = 0;

    out[0] = '\0';
    if (v->n_differ > 0) {
        struct sql_verify content = *v;
        content.schema_available = 0;
        differ_names(&content, names, sizeof names);
        used = (size_t)snprintf(out, len,
                                "the content of %s differs from the running "
                                "checksum (raftsql_applied.sums)",
                                names);
    }
    if (schema_differs(v) && used < len) {
        snprintf(out + used, len - used,
                 "%sthe schema (a table, index, trigger or view, "
                 "user_version or application_id) differs from the one "
                 "recorded with the applied index (raftsql_applied."
                 "schema_sum)",
                 used > 0 ? ", and " : "");
    }
}

/* scan runs one scan into *@v. Returns 0, or -1 after a failure (the
 * state set, a WARN line) or an interruption (STOPPED). */
static int scan(struct ext_start_scan *s, struct sql_verify *v)
{
    struct sql_verify_hooks h = {
        .data = s, .snapshot = on_snapshot, .interrupted = on_interrupted};
    char err[512];
    int rc;

    memset(v, 0, sizeof *v);
    set_state(s, EXT_START_SCAN_RUNNING);
    rc = sql_checksum_verify_hooked(s->cfg.db_path, &h, v, err, sizeof err);
    if (atomic_load(&s->cancel)) {
        sql_verify_clear(v);
        set_state(s, EXT_START_SCAN_STOPPED);
        return -1;
    }
    if (rc != 0 && s->hooks.installs(s->hooks.data) != s->installs) {
        /* A repair replaced the file under the scan: nothing of it is
         * left to verify. */
        sql_verify_clear(v);
        set_state(s, EXT_START_SCAN_REPLACED);
        return -1;
    }
    if (rc != 0) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->view.error, sizeof s->view.error, "%s", err);
        pthread_mutex_unlock(&s->mu);
        set_state(s, EXT_START_SCAN_FAILED);
        node_log_line(s->log, RAFT_LOG_WARN,
                      "start: cannot verify the database against its "
                      "running checksum: %s",
                      err);
        return -1;
    }
    return 0;
}

/* wait_next waits until entry cfg.next_index (the first after the
 * start's applied index and its no-ops) is applied: at most cfg.next_ms when the log held none at start, else
 * until the stop. Returns true once it is. */
static bool wait_next(struct ext_start_scan *s)
{
    uint64_t until = mono_ms() + s->cfg.next_ms;
    while (!atomic_load(&s->cancel)) {
        if (s->hooks.wait_applied(s->hooks.data, s->cfg.next_index,
                                  EXT__START_SCAN_SLICE_MS)) {
            return true;
        }
        if (!s->cfg.next_stored && mono_ms() >= until) {
            return false;
        }
    }
    return false;
}

/* judge handles a first scan @v that differs; @installs is the install
 * count before it. */
static void judge(struct ext_start_scan *s, const struct sql_verify *v,
                  uint64_t installs)
{
    char names[200], what[500], reason[900], more[1200];
    struct sql_verify again;

    differ_what(v, what, sizeof what);
    snprintf(reason, sizeof reason,
             "the database changed while the node was stopped: %s at index "
             "%" PRIu64 " (%.300s)",
             what, v->index, s->cfg.why);
    if (v->index != s->cfg.applied ||
        (s->cfg.next_stored && !s->cfg.next_plain)) {
        /* Marked diverged before the scan ends: a plain writer waiting for
         * it (ext_node_lease_acquire) must find the mark once it ends. */
        s->hooks.diverged_since(s->hooks.data, installs, reason);
        set_state(s, EXT_START_SCAN_DIFFERS);
        return;
    }
    if (!s->cfg.next_stored) {
        node_log_line(s->log, RAFT_LOG_INFO,
                      "start: %s; this node's log holds no entry after "
                      "index %" PRIu64
                      " yet (a plain write that landed "
                      "unrecorded is one): verifying again once the next "
                      "entry is applied, diverged if none comes within "
                      "%u ms",
                      reason, s->cfg.applied, s->cfg.next_ms);
    } else {
        node_log_line(s->log, RAFT_LOG_INFO,
                      "start: %s; entry %" PRIu64
                      " is a plain write whose writer's commit may have "
                      "landed in the file before this node recorded it: "
                      "verifying again once it is applied",
                      reason, s->cfg.next_index);
    }
    set_state(s, EXT_START_SCAN_WAITING);
    if (!wait_next(s)) {
        if (atomic_load(&s->cancel)) {
            set_state(s, EXT_START_SCAN_STOPPED);
            return;
        }
        if (s->hooks.installs(s->hooks.data) != installs) {
            set_state(s, EXT_START_SCAN_REPLACED);
            return;
        }
        snprintf(more, sizeof more,
                 "%s; no entry after index %" PRIu64 " came to explain it",
                 reason, s->cfg.applied);
        /* Marked diverged before the scan ends: a plain writer waiting for
         * it (ext_node_lease_acquire) must find the mark once it ends. */
        s->hooks.diverged_since(s->hooks.data, installs, more);
        set_state(s, EXT_START_SCAN_DIFFERS);
        return;
    }
    if (s->hooks.installs(s->hooks.data) != installs) {
        set_state(s, EXT_START_SCAN_REPLACED);
        return;
    }
    if (scan(s, &again) != 0) {
        return;
    }
    if (!differs(&again)) {
        set_state(s, EXT_START_SCAN_EQUAL);
        node_log_line(s->log, RAFT_LOG_INFO,
                      "start: verified against the running checksum at "
                      "index %" PRIu64 ", after the entry after index %" PRIu64
                      " was applied (a plain write's commit that had landed "
                      "unrecorded), equal",
                      again.index, s->cfg.applied);
    } else {
        differ_names(&again, names, sizeof names);
        snprintf(more, sizeof more,
                 "%s; %s still differs at index %" PRIu64
                 ", after the entry after index %" PRIu64 " was applied",
                 reason, names, again.index, s->cfg.applied);
        /* Marked diverged before the scan ends: a plain writer waiting for
         * it (ext_node_lease_acquire) must find the mark once it ends. */
        s->hooks.diverged_since(s->hooks.data, installs, more);
        set_state(s, EXT_START_SCAN_DIFFERS);
    }
    sql_verify_clear(&again);
}

/* scan_main is the scan thread's body. */
static void *scan_main(void *arg)
{
    struct ext_start_scan *s = arg;
    uint64_t installs = s->installs;
    struct sql_verify v;

    pthread_setname_np(pthread_self(), "raftsql-verify");
    if (scan(s, &v) != 0) {
        return NULL;
    }
    if (s->hooks.installs(s->hooks.data) != installs) {
        set_state(s, EXT_START_SCAN_REPLACED);
    } else if (!v.available || !differs(&v)) {
        set_state(s, EXT_START_SCAN_EQUAL);
        node_log_line(s->log, RAFT_LOG_INFO,
                      "start: %.300s: verified against the running "
                      "checksum, equal (a background scan at index %" PRIu64
                      ", %" PRIu64 " ms)",
                      s->cfg.why, v.index, mono_ms() - s->began_ms);
    } else {
        judge(s, &v, installs);
    }
    sql_verify_clear(&v);
    return NULL;
}

int start_scan_begin(const struct ext_start_scan_config *cfg,
                     const struct ext_start_scan_hooks *hooks,
                     struct ext_node_log *log, struct ext_start_scan **out)
{
    struct ext_start_scan *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    s->cfg = *cfg;
    s->hooks = *hooks;
    s->log = log;
    s->began_ms = mono_ms();
    s->installs = hooks->installs(hooks->data);
    s->view.state = EXT_START_SCAN_RUNNING;
    snprintf(s->view.why, sizeof s->view.why, "%s", cfg->why);
    pthread_mutex_init(&s->mu, NULL);
    node_log_line(log, RAFT_LOG_INFO,
                  "start: %.300s: verifying the database against its "
                  "running checksum in the background (reads and raft_exec "
                  "are served meanwhile; plain writes on this node wait for "
                  "it)",
                  cfg->why);
    if (pthread_create(&s->thread, NULL, scan_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return RAFT_NOMEM;
    }
    *out = s;
    return 0;
}

bool start_scan_end(struct ext_start_scan *s)
{
    int state;
    bool replaced;
    if (s == NULL) {
        return true;
    }
    atomic_store(&s->cancel, true);
    pthread_join(s->thread, NULL);
    state = s->view.state;
    /* A repair (or any install) since the scan began replaced the file
     * with a healthy peer's: that is verified too. */
    replaced = s->hooks.installs(s->hooks.data) != s->installs;
    pthread_mutex_destroy(&s->mu);
    free(s);
    return state == EXT_START_SCAN_EQUAL || state == EXT_START_SCAN_REPLACED ||
           replaced;
}

bool start_scan_pending(struct ext_start_scan *s)
{
    bool pending;
    if (s == NULL) {
        return false;
    }
    pthread_mutex_lock(&s->mu);
    pending = s->view.state == EXT_START_SCAN_RUNNING ||
              s->view.state == EXT_START_SCAN_WAITING;
    pthread_mutex_unlock(&s->mu);
    return pending;
}

void start_scan_view(struct ext_start_scan *s, struct ext_start_scan_view *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->view;
    if (out->state == EXT_START_SCAN_RUNNING ||
        out->state == EXT_START_SCAN_WAITING) {
        out->elapsed_ms = mono_ms() - s->began_ms;
    }
    pthread_mutex_unlock(&s->mu);
}
