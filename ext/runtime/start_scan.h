/* The start's verification of the database file, in the background
 * (start_scan.c): a start that finds the file may have changed while no
 * node ran (stopped.h) serves at once, and a thread of its own compares
 * the file with the running checksum stored in it; a difference marks
 * the replica diverged, as a foreign commit does, and the repair
 * follows. */

#ifndef EXT_START_SCAN_H
#define EXT_START_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "node_log.h"

/* Where the verification stands (raft_status()'s start_verify.state). */
enum ext_start_scan_state {
    EXT_START_SCAN_RUNNING = 1, /* the scan reads the file */
    EXT_START_SCAN_WAITING,     /* it found a difference that the entry
                                   after the applied index may explain (a
                                   plain write's commit that landed
                                   unrecorded): it scans again once that
                                   entry is applied */
    EXT_START_SCAN_EQUAL,       /* the file equals its running checksum */
    EXT_START_SCAN_DIFFERS,     /* it does not: the replica was marked
                                   diverged */
    EXT_START_SCAN_FAILED,      /* the scan could not read the file */
    EXT_START_SCAN_REPLACED,    /* a snapshot install replaced the
                                   database before the scan ended */
    EXT_START_SCAN_STOPPED,     /* the node stopped before it ended */
};

/* What the applier lends the scan, with @data. Any thread may call them
 * while the scan runs. */
struct ext_start_scan_hooks {
    void *data;
    /* The applied index now. */
    uint64_t (*applied)(void *data);
    /* Waits up to @ms for the applied index to reach @index; true when it
     * has. */
    bool (*wait_applied)(void *data, raft_index index, unsigned ms);
    /* The snapshots installed so far (a count). */
    uint64_t (*installs)(void *data);
    /* Marks the replica diverged for @reason unless a snapshot was
     * installed since the count was @installs. */
    void (*diverged_since)(void *data, uint64_t installs, const char *reason);
};

/* What the scan is to judge. */
struct ext_start_scan_config {
    char db_path[4200];    /* the database file */
    char why[4400];        /* why the start verifies ("no record of a clean
                           stop in ...") */
    raft_index applied;    /* the applied index at start */
    raft_index next_index; /* the entry a plain writer's commit may have
                           landed before: the first after @applied and
                           the no-ops after it */
    bool next_stored;      /* this node's log holds that entry */
    bool next_plain;       /* ... and it is a plain write's changeset (its
                           writer's commit may be in the file unrecorded) */
    unsigned next_ms;      /* how long to wait for that entry when it is not
                           stored, ms */
};

/* A copy of where it stands (start_scan_view). */
struct ext_start_scan_view {
    int state;           /* enum ext_start_scan_state */
    char why[4400];      /* the config's why */
    uint64_t index;      /* the applied index of the snapshot scanned last,
                            0 before the first scan took one */
    uint64_t elapsed_ms; /* since the start, until it ended */
    char error[512];     /* why it failed (FAILED), else "" */
};

struct ext_start_scan; /* opaque */

/* start_scan_begin starts the scan thread with @cfg and @hooks (copied);
 * lines go to @log, which must outlive the scan. Writes *@out on success.
 * Errors: RAFT_NOMEM (also when the thread cannot start). Thread: the
 * applier's owner. */
int start_scan_begin(const struct ext_start_scan_config *cfg,
                     const struct ext_start_scan_hooks *hooks,
                     struct ext_node_log *log, struct ext_start_scan **out);

/* start_scan_end interrupts the scan if it still runs, joins its thread
 * and frees @s; returns whether it had ended with the file found equal,
 * or a snapshot was installed since it began (a repair of what it found,
 * or any install: the file is a healthy peer's): only then may a clean
 * stop be recorded,
 * else the next start verifies again. NULL returns true. Thread: the
 * applier's owner; no other call on @s may run or follow. */
bool start_scan_end(struct ext_start_scan *s);

/* start_scan_pending says whether the scan has not ended yet (running or
 * waiting): this node's plain writes wait for it, since a transaction
 * would read a foreign write the scan has not found yet and ship it in
 * its changeset. NULL is false. Any thread. */
bool start_scan_pending(struct ext_start_scan *s);

/* start_scan_view copies where @s stands into @out. Any thread. */
void start_scan_view(struct ext_start_scan *s, struct ext_start_scan_view *out);

/* start_scan_state_name names @state ("running", "waiting", "equal",
 * "differs", "failed", "replaced", "stopped"). Static storage. Pure. */
const char *start_scan_state_name(int state);

#endif /* EXT_START_SCAN_H */
