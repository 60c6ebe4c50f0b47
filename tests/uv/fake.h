/* Fakes for the driver's unit tests (tests/uv/test_uv_storage.c and
 * test_uv_snapshot.c) and for the runtime modules of ext/ that a driver
 * calls back (tests/ext): one real driver (raft/uv_node.c) per struct fake,
 * with an in-memory store in place of LMDB and SQLite, and a transport
 * (struct raft_uv_node_transport) in place of TCP that captures the
 * frames the driver sends and delivers the ones a test injects.
 *
 * Threads: the driver runs its loop and its storage jobs on threads of its
 * own. Everything the fakes record (store calls, sent frames, log lines,
 * applied entries, and a copy of the core's and driver's state refreshed
 * at every callback) is under the fake's mutex, and every change
 * broadcasts its condition variable: a test waits for an event with
 * FAKE_WAIT (bounded by FAKE_WAIT_MS, never by sleeping), reads with
 * FAKE_CHECK, and runs code on the loop thread with fake_on_loop. Frames
 * and functions queued for the loop (fake_inject, fake_on_loop) run in
 * the order they were queued. Include after <cmocka.h>. */

#ifndef TESTS_UV_FAKE_H
#define TESTS_UV_FAKE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "raft/frame.h"
#include "raft/persist.h"
#include "raft/uv_node_internal.h"

/* Longest wait for one expected event, ms. */
#define FAKE_WAIT_MS 5000

/* Most log indexes the fake store holds (terms kept by index). */
#define FAKE_MAX_INDEX 4096

/* The store's functions, for the failure and hold plans. */
enum fake_op {
    FAKE_APPEND = 0,
    FAKE_COMPACT = 1,
    FAKE_CREATE = 2,
    FAKE_INSTALL = 3,
    FAKE_N_OPS = 4,
};

/* One call the driver made on the store, recorded when it returned. */
struct fake_call {
    int op;                    /* enum fake_op */
    int rc;                    /* what it returned */
    uint64_t seq;              /* event number when it returned */
    bool on_loop;              /* it ran on the driver's loop thread */
    bool has_hs;               /* APPEND: with a hard state */
    struct raft_hard_state hs; /* that hard state */
    raft_index first;          /* APPEND: index of the first entry, 0 */
    unsigned n;                /* APPEND: entries */
    raft_index index;          /* COMPACT, INSTALL: its index; CREATE: the
                                  index returned */
    raft_term term;            /* INSTALL: its last term */
};

/* One frame the driver sent: a decoded copy, and its event number. */
struct fake_sent {
    struct raft_frame f; /* owns its bufs (raft_frame_release) */
    uint64_t seq;        /* event number when it was sent */
};

/* One entry handed to the apply callback. */
struct fake_applied {
    raft_index index; /* its index */
    raft_term term;   /* its term */
    uint8_t type;     /* enum raft_entry_type */
    char data[64];    /* its payload, NUL-terminated, cut at 63 bytes */
};

/* One log line of the driver. */
struct fake_line {
    int level;      /* RAFT_LOG_* */
    char text[512]; /* the line */
};

/* The driver's and its core's state, copied on the loop thread at every
 * callback (so a wait sees it change). */
struct fake_obs {
    int role;                        /* raft_role */
    raft_term term;                  /* raft_current_term */
    raft_id leader;                  /* raft_leader_id */
    raft_index commit;               /* raft_commit_index */
    raft_index first;                /* raft_first_index */
    raft_index last;                 /* raft_last_index */
    raft_index persisted;            /* raft_persisted_index */
    raft_index snapshot_index;       /* raft_snapshot_index */
    bool failed;                     /* raft_uv_node_failed */
    char failure[256];               /* raft_uv_node_failure */
    bool log_full;                   /* raft_uv_node_log_full */
    struct raft_uv_node_stats stats; /* raft_uv_node_stats */
    unsigned n_ticks;                /* tick callbacks so far */
};

/* A scripted follower that the send hook plays (fake_peer_hook) towards a
 * leader driver: it grants votes, answers AppendEntries from a log that
 * holds entries up to @last, and receives snapshot chunks. */
struct fake_peer {
    raft_id id;             /* the peer's server id */
    bool deny_votes;        /* answer RequestVote with a refusal */
    raft_index last;        /* last index of its log */
    bool chunk_silent;      /* never answer a chunk */
    bool installing;        /* a complete file is installing: its last
                               chunk (and each one sent again) gets no
                               answer until this is cleared */
    unsigned n_last;        /* last chunks received (sent again too) */
    unsigned n_refuse;      /* complete snapshots to refuse with
                               RAFT_CORRUPT, as a bad checksum */
    unsigned busy_after;    /* > 0: send refuses chunks with RAFT_BUSY
                               once this many went out */
    unsigned n_chunks;      /* chunks received */
    unsigned n_starts;      /* of them at offset 0 */
    unsigned n_refused;     /* complete snapshots refused */
    uint64_t max_window;    /* most bytes sent beyond the last
                               acknowledgement the leader got */
    uint64_t acked;         /* last acknowledged offset the leader got */
    uint8_t *buf;           /* the file being reassembled */
    size_t len;             /* bytes of it */
    bool installed;         /* a complete, valid snapshot arrived */
    raft_index snap_index;  /* its last index */
    uint64_t chunk_offs[8]; /* offsets of the first 8 chunks */
};

struct fake;

/* Called on the loop thread, with the fake's mutex held, for each frame
 * the driver sends to a connected peer, before it is captured. Returns 0
 * to send it, or the error code send returns (the frame is dropped and
 * not captured). May queue answers with fake_reply. */
typedef int (*fake_send_hook)(struct fake *f, const struct raft_frame *fr);

struct fake_item;

/* One driver under test with its fakes. Fields below the mutex are read
 * and written under it (FAKE_WAIT, FAKE_CHECK, fake_lock). */
struct fake {
    raft_id id;                       /* the driver's server id */
    struct raft_uv_node *d;           /* the driver, NULL when stopped */
    struct raft_uv_node_transport tr; /* the fake transport's functions */
    char dir[64];                     /* its snapshot directory (mkdtemp) */
    uv_loop_t *loop;                  /* the driver's loop (transport start) */
    uv_async_t async;                 /* delivers the inbox on the loop */
    raft_uv_recv_cb recv_cb;          /* the driver's receive callback */
    void *recv_data;                  /* its argument */
    void (*close_cb)(void *);         /* transport close callback */
    void *close_data;                 /* its argument */
    struct fake *links[8];            /* drivers by id that get our frames */
    uint64_t seq_out;          /* seq of the last injected AppendEntries */
    pthread_mutex_t inbox_mu;  /* guards the inbox and @inbox_closed */
    struct fake_item *inbox;   /* queued for the loop, FIFO */
    struct fake_item *inbox_t; /* its tail */
    bool inbox_closed;         /* the transport is not running */

    pthread_mutex_t mu;              /* guards everything below */
    pthread_cond_t cond;             /* broadcast at every change */
    uint64_t seq;                    /* event counter (calls and frames) */
    pthread_t loop_thread;           /* the driver's loop thread */
    bool loop_known;                 /* @loop_thread is set */
    bool transport_closed;           /* the driver closed the transport */
    struct fake_obs obs;             /* the driver's state */
    struct fake_call *calls;         /* store calls, n_calls */
    unsigned n_calls;                /* calls at @calls */
    unsigned cap_calls;              /* room at @calls */
    int fail_rc[FAKE_N_OPS];         /* code of an injected failure */
    unsigned fail_n[FAKE_N_OPS];     /* calls left to fail, UINT_MAX: all */
    unsigned fail_skip[FAKE_N_OPS];  /* calls to let pass first */
    bool hold[FAKE_N_OPS];           /* the next call blocks */
    bool held[FAKE_N_OPS];           /* a call is blocked now */
    bool release_all;                /* unblock everything (teardown) */
    raft_index log_first;            /* the stored log: first index */
    raft_index log_last;             /* last index, log_first - 1 empty */
    raft_term terms[FAKE_MAX_INDEX]; /* term of each stored index */
    struct raft_hard_state hs;       /* stored hard state */
    uint8_t *snap;                   /* snapshot_create writes this */
    size_t snap_len;                 /* bytes of it */
    raft_index snap_index;           /* and gives this index */
    raft_term snap_term;             /* and term */
    uint8_t *installed;              /* bytes of the last installed file */
    bool installing;                 /* the log changes after an install
                                        (not recorded as calls of their
                                        own: FAKE_INSTALL's) */
    size_t installed_len;            /* their count */
    char fail_text[FAKE_N_OPS][128]; /* message of an injected failure,
                                        "" for "fake: injected <code>" */
    bool down[8];                    /* peers (by id) shown unconnected */
    raft_id peer_ids[8];             /* fake_opts.peers, n_peer_ids: the
                                        connected ones are listed */
    unsigned n_peer_ids;             /* their count */
    fake_send_hook hook;             /* NULL: send everything */
    bool corrupt_next_chunk;         /* flip a byte of the next linked chunk */
    struct fake_peer peer;           /* fake_peer_hook's follower */
    struct fake_sent *sent;          /* frames the driver sent, n_sent */
    unsigned n_sent;                 /* frames at @sent */
    unsigned cap_sent;               /* room at @sent */
    struct fake_applied *applied;    /* entries applied, n_applied */
    unsigned n_applied;              /* entries at @applied */
    unsigned cap_applied;            /* room at @applied */
    struct fake_line *lines;         /* log lines, n_lines */
    unsigned n_lines;                /* lines at @lines */
    unsigned cap_lines;              /* room at @lines */
    struct raft_uv_node_callbacks app; /* fake_opts.app (written before
                                          the driver starts) */
    unsigned n_removes;                /* snapshot files the driver removed
                                   (seams.on_remove) */
    unsigned n_removes_on_loop;        /* of those, on its loop thread */
    bool hold_remove;                  /* the next removal blocks before it
                                   begins, until cleared */
    bool remove_held;                  /* a removal is blocked now */
};

/* What a test's setup allocates: one driver, and a second for the tests
 * that link two. */
struct fake_pair {
    struct fake a; /* the driver under test */
    struct fake b; /* a second one, when linked */
};

/* fake_setup is a cmocka setup: *@state becomes a zeroed struct
 * fake_pair. */
int fake_setup(void **state);

/* fake_teardown is its teardown: it stops both drivers, then frees them
 * (a linked driver sends to the other until it stops) and the pair. */
int fake_teardown(void **state);

/* fake_a returns the first fake of the pair at *@state. */
struct fake *fake_a(void **state);

/* Settings of fake_start beyond the core. */
struct fake_opts {
    const raft_id *peers;   /* the other servers, n_peers */
    unsigned n_peers;       /* their count */
    uint64_t chunk_bytes;   /* snapshot chunk size, 0: 1000 */
    uint64_t snapshot_rate; /* snapshot pace, bytes per second, 0: none */
    uint64_t stall_ms;      /* snapshot stall timeout, 0: the driver's */
    uint64_t install_rate;  /* a follower's slowest install, bytes per
                               second, 0: the driver's */
    unsigned tick_ms;       /* 0: 2 */
    bool no_compact;        /* the storage has no compact function, nor
                             (as an install changes the log through it)
                             a snapshot install */
    bool no_snapshots;      /* no snapshot functions */
    const struct raft_uv_node_callbacks *app; /* the application's
                             callbacks (copied; NULL: none): its wake,
                             forward, read and appended are the driver's
                             own; its apply, tick and stepped run after
                             the fake recorded the call, without its
                             mutex; its log and dial are ignored */
};

/* fake_init prepares @f for server @id: an empty store whose log starts
 * at 1, a fresh snapshot directory. */
void fake_init(struct fake *f, raft_id id);

/* fake_start starts the driver on core @r (which it then owns) with the
 * fakes; fails the test on error. */
void fake_start(struct fake *f, struct raft *r, const struct fake_opts *o);

/* fake_stop releases every held store call and stops the driver (which
 * closes the core). */
void fake_stop(struct fake *f);

/* fake_free stops the driver if it runs and frees everything, removing
 * the snapshot directory and its files. */
void fake_free(struct fake *f);

/* fake_core returns a fresh core for server @id of @voters (n), failing
 * the test on error. @election_ms is the election timeout; the heartbeat
 * interval is a fifth of it. */
struct raft *fake_core(raft_id id, const raft_id *voters, unsigned n,
                       unsigned election_ms);

/* fake_config fills @cfg as fake_core configures its cores (@voters must
 * outlive the call that uses @cfg). */
void fake_config(struct raft_config *cfg, raft_id id, const raft_id *voters,
                 unsigned n, unsigned election_ms);

/* fake_store_log makes the store hold entries @first..@last of @term
 * (before fake_start). */
void fake_store_log(struct fake *f, raft_index first, raft_index last,
                    raft_term term);

/* fake_snapshot sets what snapshot_create writes: @len pseudo-random bytes
 * (seeded by @len), reflecting (@index, @term). */
void fake_snapshot(struct fake *f, size_t len, raft_index index,
                   raft_term term);

/* fake_fail makes the next @n calls of @op fail with @rc (UINT_MAX:
 * every call). Any thread. */
void fake_fail(struct fake *f, int op, int rc, unsigned n);

/* fake_fail_text makes the injected failures of @op say @text (copied,
 * cut at 127 bytes) instead of "fake: injected <code>". Any thread. */
void fake_fail_text(struct fake *f, int op, const char *text);

/* fake_fail_after is fake_fail for the calls after the next @skip (a call
 * blocked by fake_hold counts as the next). Any thread. */
void fake_fail_after(struct fake *f, int op, int rc, unsigned n, unsigned skip);

/* fake_hold makes the next call of @op block until fake_release; wait for
 * f->held[op] to know it is blocked. Any thread. */
void fake_hold(struct fake *f, int op);

/* fake_release unblocks the held call of @op. Any thread. */
void fake_release(struct fake *f, int op);

/* fake_release_remove unblocks the removal that hold_remove blocked. */
void fake_release_remove(struct fake *f);

/* fake_link makes the frames each of @a and @b sends to the other go to
 * it (two drivers in one process). Before either starts. */
void fake_link(struct fake *a, struct fake *b);

/* fake_on_loop runs @fn(@f, @arg) on the driver's loop thread, after what
 * was queued before, and returns once it ran. Not on the loop thread. */
void fake_on_loop(struct fake *f, void (*fn)(struct fake *, void *), void *arg);

/* fake_barrier returns once everything queued before it ran. */
void fake_barrier(struct fake *f);

/* fake_inject queues frame @fr (copied) for delivery to the driver as if
 * received. Any thread (the hook too, as fake_reply). */
void fake_inject(struct fake *f, const struct raft_frame *fr);

/* fake_inject_message injects the core message @m. */
void fake_inject_message(struct fake *f, const struct raft_message *m);

/* fake_inject_vote injects a RequestVote (not a pre-vote) from @from in
 * @term, for a candidate whose log is empty. */
void fake_inject_vote(struct fake *f, raft_id from, raft_term term);

/* fake_inject_append injects an AppendEntries from leader @from in @term
 * after (@prev, @prev_term), carrying one entry of @payload (a string)
 * when not NULL, else none (a heartbeat), with commit index @commit. */
void fake_inject_append(struct fake *f, raft_id from, raft_term term,
                        raft_index prev, raft_term prev_term,
                        const char *payload, raft_index commit);

/* fake_reply is fake_inject for a hook (which runs under the mutex). */
void fake_reply(struct fake *f, const struct raft_frame *fr);

/* fake_propose proposes @payload (a string) on the loop thread and
 * returns raft_uv_node_propose's code, the index in *out_index. */
int fake_propose(struct fake *f, const char *payload, raft_index *out_index);

/* fake_compact calls raft_uv_node_compact(@index) on the loop thread and
 * returns its code. */
int fake_compact(struct fake *f, raft_index index);

/* fake_peer_hook is a send hook that plays f->peer (see struct
 * fake_peer). */
int fake_peer_hook(struct fake *f, const struct raft_frame *fr);

/* The lock of @f's recorded state, for reads outside FAKE_WAIT and
 * FAKE_CHECK. */
void fake_lock(struct fake *f);
void fake_unlock(struct fake *f);

/* fake_wait_locked waits (the mutex held) for the next change, until
 * @deadline (CLOCK_MONOTONIC); returns false once it passed. */
bool fake_wait_locked(struct fake *f, const struct timespec *deadline);

/* fake_deadline returns the time FAKE_WAIT_MS from now. */
struct timespec fake_deadline(void);

/* The helpers below read the recorded state: call them with the mutex
 * held (inside FAKE_WAIT or FAKE_CHECK). */

/* fake_n_calls counts the store calls of @op that returned @rc (any code
 * when @rc < 0). */
unsigned fake_n_calls(const struct fake *f, int op, int rc);

/* fake_last_call returns the last store call of @op, NULL when none. */
const struct fake_call *fake_last_call(const struct fake *f, int op);

/* fake_n_sent counts the frames of @type the driver sent. */
unsigned fake_n_sent(const struct fake *f, int type);

/* fake_last_sent returns the last frame of @type sent, NULL when none. */
const struct fake_sent *fake_last_sent(const struct fake *f, int type);

/* fake_logged counts the log lines at @level that contain @text. */
unsigned fake_logged(const struct fake *f, int level, const char *text);

/* FAKE_WAIT waits until @cond (evaluated with @f's mutex held) holds, and
 * fails the test after FAKE_WAIT_MS. */
#define FAKE_WAIT(f, cond)                                                     \
    do {                                                                       \
        struct timespec dl_ = fake_deadline();                                 \
        bool ok_;                                                              \
        fake_lock(f);                                                          \
        while (!(ok_ = (cond)) && fake_wait_locked((f), &dl_)) {               \
        }                                                                      \
        ok_ = ok_ || (cond);                                                   \
        fake_unlock(f);                                                        \
        if (!ok_) {                                                            \
            fail_msg("%s:%d: timed out waiting for %s", __FILE__, __LINE__,    \
                     #cond);                                                   \
        }                                                                      \
    } while (0)

/* FAKE_CHECK fails the test unless @cond holds now (evaluated with @f's
 * mutex held). */
#define FAKE_CHECK(f, cond)                                                    \
    do {                                                                       \
        bool ok_;                                                              \
        fake_lock(f);                                                          \
        ok_ = (cond);                                                          \
        fake_unlock(f);                                                        \
        if (!ok_) {                                                            \
            fail_msg("%s:%d: expected %s", __FILE__, __LINE__, #cond);         \
        }                                                                      \
    } while (0)

#endif /* TESTS_UV_FAKE_H */
