/* Private state of the node driver (uv_node.h), shared by uv_node.c (the
 * loop, stepping the core, start and stop), uv_storage.c (running the
 * storage jobs of raft/persist.h on the thread pool),
 * uv_snapshot.c (streaming snapshots to and from peers) and uv_remove.c
 * (removing snapshot files on the thread pool). */

#ifndef RAFT_UV_NODE_INTERNAL_H
#define RAFT_UV_NODE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "persist.h"
#include "raft.h"
#include "uv.h"
#include "uv_node.h"

/* Most snapshot chunks in flight to one follower. */
#define RAFT__UV_SNAPSHOT_WINDOW 4

/* A snapshot transfer without progress for this long is abandoned, ms. */
#define RAFT__UV_SNAPSHOT_STALL_MS 30000

/* The slowest a follower may verify and install a received snapshot,
 * bytes a second: once the whole file is sent, its last chunk is answered
 * only when the install is done (a file's fsync, a checksum read of it and
 * its copy into the database), so the stall timeout then grows by the
 * file's size over this (5 GB: about 5 minutes more). */
#define RAFT__UV_SNAPSHOT_INSTALL_RATE (16u << 20)

/* A follower receiving a snapshot asks the kernel to write back what it
 * wrote once this many bytes arrived since its last request, bytes (the
 * final fsync then finds little dirty). */
#define RAFT__UV_SNAPSHOT_WRITE_BEHIND (8u << 20)

/* How often a running transfer tells the core it is on its way
 * (RAFT_EVENT_SNAPSHOT_PROGRESS), ms: well within the core's expiry of 10
 * election timeouts. */
#define RAFT__UV_SNAPSHOT_VOUCH_MS 500

/* A leader whose last index has not grown for this long takes no writes:
 * its snapshot transfers go unpaced (raft/uv_snapshot.c). */
#define RAFT__UV_SNAPSHOT_PACE_IDLE_MS 1000

/* A peer's REPAIR_REQUEST within this long of its last one (it asks once
 * a second) is the same repair: logged once. ms. */
#define RAFT__UV_REPAIR_KNOWN_MS 3000

/* The transport a driver carries its frames on: the TCP transport of uv.h
 * (raft_uv_node_start), or a test's own (raft_uv_node_start_with). Every
 * function runs on the driver's loop thread; the last three take what
 * @start wrote to *out. */
struct raft_uv_node_transport {
    void *data; /* passed to @start */
    /* start begins carrying frames on @loop for the server of @cfg (which
     * lives only during the call): @recv_cb(@recv_data) for each frame
     * received, @log_cb(@recv_data) for its log lines; it writes *out
     * only on success, and @errmsg on failure. Errors: as
     * raft_uv_transport_start. Called before the loop thread starts. */
    int (*start)(void *data, uv_loop_t *loop,
                 const struct raft_uv_node_config *cfg, raft_uv_recv_cb recv_cb,
                 raft_log_cb log_cb, void *recv_data, void **out, char *errmsg,
                 size_t errmsg_len);
    /* send: as raft_uv_transport_send. */
    int (*send)(void *t, const struct raft_frame *f);
    /* connected: as raft_uv_transport_connected. */
    bool (*connected)(const void *t, raft_id id);
    /* peer_build_id: as raft_uv_transport_peer_build_id (NULL: none is
     * ever known). */
    const char *(*peer_build_id)(const void *t, raft_id id);
    /* set_cluster_id, peer_cluster_id: as raft_uv_transport_set_cluster_id
     * and _peer_cluster_id (NULL: no cluster id is sent nor ever known). */
    void (*set_cluster_id)(void *t, const uint8_t id[RAFT_UV_CLUSTER_ID_LEN]);
    bool (*peer_cluster_id)(const void *t, raft_id id,
                            uint8_t out[RAFT_UV_CLUSTER_ID_LEN]);
    /* close: as raft_uv_transport_close (@cb fires from the loop once the
     * transport is gone; no receive callback after the call). */
    void (*close)(void *t, void (*cb)(void *data), void *data);
    /* add_peer, remove_peer: as raft_uv_transport_add_peer and
     * _remove_peer (NULL: the peers stay those of @start's @cfg). */
    int (*add_peer)(void *t, const struct raft_uv_peer *p);
    int (*remove_peer)(void *t, raft_id id);
    /* connected_peers: as raft_uv_transport_connected_peers (NULL: none
     * is listed). */
    unsigned (*connected_peers)(const void *t, raft_id *ids, unsigned max);
    /* peer_wire: as raft_uv_transport_peer_wire (NULL: every connected
     * peer speaks RAFT_WIRE_VERSION). */
    unsigned (*peer_wire)(const void *t, raft_id id);
    /* peer_wire_last: as raft_uv_transport_peer_wire_last (NULL: what
     * peer_wire says now). */
    unsigned (*peer_wire_last)(const void *t, raft_id id);
    /* contacts: as raft_uv_transport_contacts (NULL: only whole frames
     * tell that a peer is alive). */
    unsigned (*contacts)(void *t, raft_id *ids, unsigned max);
};

/* What raft_uv_node_start fixes and a test may replace. */
struct raft_uv_node_seams {
    const struct raft_uv_node_transport *transport; /* NULL: TCP (uv.h) */
    uint64_t snapshot_stall_ms; /* 0: RAFT__UV_SNAPSHOT_STALL_MS */
    uint64_t install_rate;      /* 0: RAFT__UV_SNAPSHOT_INSTALL_RATE */
    /* Called on the thread that removes a snapshot file (its name, then
     * being removed) or closes the last descriptor of a removed one
     * (NULL), before it does; NULL: none. */
    void (*on_remove)(void *data, const char *path);
    void *on_remove_data; /* its argument */
};

/* The leader's current snapshot file, shared by every transfer. */
struct raft_uv_snapshot_file {
    bool creating;     /* a creation job runs */
    bool ready;        /* path holds a complete snapshot */
    char path[4096];   /* file name */
    raft_index index;  /* last index it reflects */
    raft_term term;    /* term of that entry */
    uint64_t size;     /* bytes */
    uint64_t checksum; /* XXH64 of the file */
    unsigned counter;  /* for unique names */
    uv_work_t req;     /* the creation job */
    int rc;            /* its result */
    char errmsg[256];  /* its message */
};

/* A transfer from this leader to one follower. */
struct raft_uv_snapshot_send {
    raft_id to;              /* follower */
    bool wanted;             /* the core asked for a snapshot */
    bool active;             /* sending */
    int fd;                  /* the file, open while active */
    raft_index index;        /* the snapshot's last index */
    raft_term last_term;     /* term of that entry */
    uint64_t total;          /* file size */
    uint64_t checksum;       /* XXH64 of the file */
    uint64_t sent;           /* bytes sent */
    uint64_t acked;          /* bytes acknowledged */
    uint64_t vouched;        /* loop clock of the last SNAPSHOT_PROGRESS
                               stepped for it, ms */
    uint64_t pace_from;      /* loop clock the pace counts from, ms */
    uint64_t pace_sent;      /* @sent then */
    unsigned failures;       /* consecutive failed attempts */
    uint64_t last_progress;  /* loop clock of the last ack, ms */
    uint64_t last_resend;    /* loop clock of the last re-send of the
                               window, ms */
    bool repair;             /* the follower asked for a repair
                               (REPAIR_REQUEST): a snapshot at or above
                               @repair_index; the core is not told of its
                               end */
    raft_index repair_index; /* the follower's applied index then */
    bool repair_fresh;       /* asked since the last snapshot was made */
    uint64_t repair_asked;   /* loop clock of its last REPAIR_REQUEST,
                               ms (kept across roles), 0 for none */
};

/* A transfer from a leader to this follower. */
struct raft_uv_snapshot_recv {
    bool active;           /* receiving */
    bool installing;       /* complete, the install job runs */
    raft_id from;          /* leader */
    raft_term term;        /* its term */
    raft_index index;      /* the snapshot's last index */
    raft_term last_term;   /* term of that entry */
    uint64_t total;        /* file size */
    uint64_t checksum;     /* expected XXH64 */
    uint64_t expected;     /* next byte expected */
    uint64_t written_back; /* bytes whose write-back was asked for
                              (RAFT__UV_SNAPSHOT_WRITE_BEHIND) */
    int fd;                /* temp file, open while receiving */
    char path[4096];       /* temp file name */
};

/* Most files renamed for removal while transfers still read them: one
 * per transfer, and the one being replaced. */
#define RAFT__UV_REMOVE_HELD (RAFT_MAX_VOTERS + 1)

/* A file renamed for removal (uv_remove.c) that a transfer still reads:
 * removed once the last descriptor on it is closed. */
struct raft_uv_held {
    bool used;       /* this slot holds one */
    dev_t dev;       /* its device */
    ino_t ino;       /* and inode */
    char path[4096]; /* its removing-* name */
};

struct raft_uv_removal;

struct raft_uv_node {
    raft_id id;                          /* this server */
    struct raft *raft;                   /* the core (loop thread) */
    struct raft_persist_storage storage; /* durable writes */
    struct raft_uv_node_callbacks cb;    /* the application */
    unsigned tick_ms;                    /* tick period */
    uv_loop_t loop;                      /* the driver's own loop */
    uv_thread_t thread;                  /* runs the loop */
    uv_async_t wake;                     /* raft_uv_node_wake */
    uv_async_t stop_async;               /* raft_uv_node_stop */
    uv_timer_t tick;                     /* drives RAFT_EVENT_TICK */
    uv_idle_t tick_idle;                 /* a tick is due: poll without
                                            blocking */
    uv_check_t tick_check;               /* runs a due tick after the
                                            poll */
    bool tick_due;                       /* the timer fired, the tick has
                                            not run yet */
    void *transport;                     /* peers, NULL once closed */
    bool stopping;                       /* closing handles */
    raft_id peers[RAFT_MAX_VOTERS];      /* the other servers of the
                                            configuration in force */
    bool connected[RAFT_MAX_VOTERS];     /* last seen connection state */
    _Atomic bool no_lead; /* raft_uv_node_decline_leadership was called */
    raft_term told_term;  /* the term whose leadership run_tick told the core
                            of the peers already unreachable at its start */
    unsigned n_peers;
    bool drop_pending;                          /* a peer left the configuration
                                            but leads: drop it later */
    bool said_not_voting;                       /* "not voting" was logged */
    const struct raft_uv_node_transport *tr;    /* @transport's functions */
    uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN]; /* this server's, zero for
                                            none yet */

    /* Storage jobs (uv_storage.c). */
    struct raft_persist persist;       /* the job queue */
    struct raft_persist_job *disk_job; /* the running job, or NULL */
    uv_work_t disk_req;                /* its request */
    uint64_t disk_ns;                  /* the running job's time on the
                                          pool, ns (written by the pool
                                          thread before its after-work
                                          callback reads it) */
    bool disk_failed;                  /* a job failed: stop */
    char disk_failure[256];            /* why, "" while none failed */
    uint64_t retry_at;                 /* loop clock of the next retry
                                            of a job refused for a full
                                            log */
    uint64_t full_since;               /* loop clock of the first refusal
                                            of the waiting job, 0 none */
    unsigned storage_stall_ms;         /* cfg.storage_stall_ms */
    bool stalled;                      /* STORAGE_STALLED stepped true */

    /* Snapshots (uv_snapshot.c). */
    char snapshot_dir[3800]; /* where files go */
    uint64_t chunk_bytes;    /* bytes per chunk */
    uint64_t snapshot_rate;  /* bytes per second a transfer is paced to,
                                0: unpaced */
    raft_index pace_last;    /* the last index at the last look: while it
                               grows, transfers are paced */
    uint64_t pace_writes;    /* loop clock it last grew, ms; 0 never */
    struct raft_uv_snapshot_file snap;                   /* leader's file */
    struct raft_uv_snapshot_send sends[RAFT_MAX_VOTERS]; /* per peer */
    struct raft_uv_snapshot_recv recv; /* follower's transfer */
    uint64_t stall_ms;     /* RAFT__UV_SNAPSHOT_STALL_MS, or a test's */
    uint64_t install_rate; /* RAFT__UV_SNAPSHOT_INSTALL_RATE, or a test's */

    /* Removals on the pool (uv_remove.c). */
    uint64_t remove_start;                 /* realtime ns at start, in names */
    unsigned n_removed;                    /* names given so far */
    struct raft_uv_removal *removals;      /* queued, not begun (FIFO) */
    struct raft_uv_removal *removals_tail; /* its last */
    bool removal_running;                  /* one job is on the pool */
    _Atomic bool remove_abandon;           /* stopping: jobs stop at their
                                              next step */
    struct raft_uv_held held[RAFT__UV_REMOVE_HELD];  /* renamed, still read
                                                       by a transfer */
    void (*on_remove)(void *data, const char *path); /* seams.on_remove */
    void *on_remove_data;                            /* its argument */

    struct raft_uv_node_stats stats; /* counters */
    uint64_t last_tick_at;           /* loop clock of the last tick, 0
                                        before the first */
    char log_full_reason[256];       /* why the log refused the waiting
                                        write, "" when none waits */
};

/* ---- uv_node.c ------------------------------------------------------- */

/* raft_uv_node_start_with is raft_uv_node_start (same arguments, same
 * errors, plus the transport's) with the parts of @seams that are set
 * (@seams may be NULL: then it is raft_uv_node_start). For tests. */
int raft_uv_node_start_with(struct raft *r,
                            const struct raft_uv_node_config *cfg,
                            const struct raft_persist_storage *storage,
                            const struct raft_uv_node_callbacks *cb,
                            const struct raft_uv_node_seams *seams,
                            struct raft_uv_node **out, char *errmsg,
                            size_t errmsg_len);

/* raft_uv_node_step feeds @event to the core and carries out the update;
 * @out, when not NULL, receives it. Returns raft_step's code, RAFT_IOERR
 * after a storage failure or RAFT_SHUTDOWN while stopping. */
int raft_uv_node_step(struct raft_uv_node *d, const struct raft_event *event,
                      struct raft_update *out);

/* raft_uv_node_diverged asks the application whether its state machine
 * is diverged (raft_uv_node_callbacks.diverged; false without one). */
bool raft_uv_node_diverged(struct raft_uv_node *d);

/* ---- uv_storage.c ---------------------------------------------------- */

/* raft_uv_storage_merge adds an update's durable work to the queue
 * (raft_persist_merge). Returns 0 or RAFT_NOMEM. */
int raft_uv_storage_merge(struct raft_uv_node *d, const struct raft_update *u);

/* raft_uv_storage_install queues the install of the received snapshot
 * (alone in a sealed job). Returns 0 or RAFT_NOMEM. */
int raft_uv_storage_install(struct raft_uv_node *d,
                            const struct raft_uv_snapshot_recv *r);

/* raft_uv_storage_start runs the head job on the thread pool when none runs. */
void raft_uv_storage_start(struct raft_uv_node *d);

/* raft_uv_storage_fail marks storage failed and logs @why. */
void raft_uv_storage_fail(struct raft_uv_node *d, const char *why);

/* raft_uv_storage_tick retries a job refused for a full log, once a second. */
void raft_uv_storage_tick(struct raft_uv_node *d);

/* raft_uv_storage_close frees every queued job (after the loop ended). */
void raft_uv_storage_close(struct raft_uv_node *d);

/* ---- uv_snapshot.c --------------------------------------------------- */

/* raft_uv_snapshot_want records that the core asked for snapshots to be
 * sent to @ids and starts what it can. */
void raft_uv_snapshot_want(struct raft_uv_node *d, const raft_id *ids,
                           unsigned n);

/* raft_uv_snapshot_message handles a RAFT_FRAME_SNAPSHOT_CHUNK, a
 * RAFT_FRAME_SNAPSHOT_CHUNK_RESULT or a RAFT_FRAME_REPAIR_REQUEST (a
 * leader makes a snapshot at least at the requester's applied index and
 * streams it as any other). */
void raft_uv_snapshot_message(struct raft_uv_node *d,
                              const struct raft_frame *m);

/* raft_uv_snapshot_tick abandons stalled transfers and those of a lost
 * leadership. */
void raft_uv_snapshot_tick(struct raft_uv_node *d);

/* raft_uv_snapshot_unreachable aborts a transfer to peer @id. */
void raft_uv_snapshot_unreachable(struct raft_uv_node *d, raft_id id);

/* raft_uv_snapshot_installed finishes a receive after the install job of
 * @in: @rc is the job's result, @errmsg its message when not 0. */
void raft_uv_snapshot_installed(struct raft_uv_node *d,
                                const struct raft_persist_install *in, int rc,
                                const char *errmsg);

/* raft_uv_snapshot_forget drops the transfer to @id, a server that left
 * the configuration, without stepping the core (which forgot it). */
void raft_uv_snapshot_forget(struct raft_uv_node *d, raft_id id);

/* raft_uv_snapshot_close closes files and removes temporary ones. */
void raft_uv_snapshot_close(struct raft_uv_node *d);

/* raft_uv_snapshot_checksum computes the XXH64 (seed 0) of file @path into
 * *out and its size into *out_size. Returns 0 or RAFT_IOERR. Any thread. */
int raft_uv_snapshot_checksum(const char *path, uint64_t *out,
                              uint64_t *out_size);

/* ---- uv_remove.c ----------------------------------------------------- */

/* raft_uv_remove_file removes the file @path (a snapshot file of @d's, or
 * one received) without blocking the loop thread: it renames it at once
 * to a name of its own in the snapshot directory, so @path is free for a
 * new file when this returns (nothing happens when @path does not
 * exist), and queues its removal on the libuv thread pool, one job at a
 * time: shortened step by step, then unlinked. A file an active
 * transfer still reads is held until raft_uv_remove_close closes the
 * last descriptor on it. A rename refused removes it here (logged at
 * WARN). Returns whether a file was there. Loop thread. */
bool raft_uv_remove_file(struct raft_uv_node *d, const char *path);

/* raft_uv_remove_close closes descriptor @fd of a transfer (ours from
 * now on; the caller marks the transfer inactive after), and queues the
 * removal of its file if it was held for it and no other transfer reads
 * it. Loop thread. */
void raft_uv_remove_close(struct raft_uv_node *d, int fd);

/* raft_uv_remove_leftovers queues the removal of every file an earlier
 * life of server @d->id left half removed in its snapshot directory,
 * and dates this life's names. Called once at start, before the loop
 * runs and before any raft_uv_remove_file. */
void raft_uv_remove_leftovers(struct raft_uv_node *d);

/* raft_uv_remove_abandon makes the removal under way stop at its next
 * step and drops those not begun: a stop does not wait for them, and
 * the next start finishes them (raft_uv_remove_leftovers). Loop thread,
 * when the node stops. */
void raft_uv_remove_abandon(struct raft_uv_node *d);

#endif /* RAFT_UV_NODE_INTERNAL_H */
