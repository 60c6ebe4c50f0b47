/* The node driver: runs the pure Raft core on a libuv loop thread of its
 * own, with the TCP transport (uv.h), and persists through the storage
 * interface of raft/persist.h (its job queue, run by uv_storage.c). This
 * header needs no libuv types, so ext/ never includes <uv.h>. */

#ifndef RAFT_UV_NODE_H
#define RAFT_UV_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "address.h"
#include "frame.h"
#include "histogram.h"
#include "logging.h"
#include "persist.h"
#include "raft.h"

/* Longest build id a handshake carries, bytes (see uv.h). */
#define RAFT_UV_BUILD_ID_MAX 128

/* A cluster id: 16 random bytes made when a cluster gets its first leader
 * (ext/runtime/cluster_id.h), all zero for a server that has none yet. Every
 * handshake carries it; a server refuses one of another cluster (uv.h).
 * Shown as RAFT_UV_CLUSTER_ID_HEX - 1 lowercase hex digits. */
#define RAFT_UV_CLUSTER_ID_LEN 16
#define RAFT_UV_CLUSTER_ID_HEX (2 * RAFT_UV_CLUSTER_ID_LEN + 1)

/* raft_uv_cluster_id_hex writes @id in hex, NUL-terminated, into @out.
 * Pure; any thread. */
void raft_uv_cluster_id_hex(const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                            char out[RAFT_UV_CLUSTER_ID_HEX]);

/* raft_uv_cluster_id_is_zero says whether @id is all zero (none). Pure;
 * any thread. */
bool raft_uv_cluster_id_is_zero(const uint8_t id[RAFT_UV_CLUSTER_ID_LEN]);

/* A peer to connect to. */
struct raft_uv_peer {
    raft_id id; /* the peer's server id */
    char host[RAFT_ADDRESS_TEXT_MAX +
              1];  /* an IPv4 or IPv6 literal (no brackets) or a hostname,
                      resolved before each dial: "127.0.0.1", "::1",
                      "node2"; with the port, at most RAFT_ADDRESS_TEXT_MAX
                      bytes as "host:port" (raft/address.h) */
    uint16_t port; /* TCP port */
    char identity[RAFT_ADDRESS_TEXT_MAX + 1]; /* under TLS with
                      certificates, the host its certificate must name:
                      the host of its address in the configuration (as
                      written: a hostname stays one however it resolves),
                      which @host differs from when dial= overrides it;
                      "" for @host */
};

struct raft_uv_tls; /* uv_tls.h */

/* raft_uv_peer_set_identity sets @p's identity to the host of @address
 * ("host:port" as raft/address.h parses it, the configuration's; "" when
 * it does not parse). Pure. */
void raft_uv_peer_set_identity(struct raft_uv_peer *p, const char *address);

/* The driver persists through the storage interface of raft/persist.h
 * (struct raft_persist_storage: the log half and the state machine half,
 * which document every function): the log's functions and the state
 * machine's @snapshot_install run on a libuv thread-pool thread, one
 * storage job at a time, in queue order; @snapshot_create runs on the
 * pool too, possibly concurrently with them. Before @snapshot_install the
 * driver verifies the received file's checksum. */

/* What the driver hands to the application. Every callback runs on the
 * driver's loop thread with @data; a callback may call the loop-thread
 * functions below. Any may be NULL. */
struct raft_uv_node_callbacks {
    void *data;
    /* Committed entries, in order, each exactly once; take references to
     * keep their bufs. */
    void (*apply)(void *data, const struct raft_entry *entries, unsigned n);
    /* Entries the core's log just took (update.entries: this server's
     * own proposals and no-ops as leader, the leader's entries received
     * as follower), in log order, in the step that added them: before
     * they are durable, and before the call that stepped returns (a
     * proposal's entries are handed over before raft_uv_node_propose
     * returns). An entry handed over may later be truncated (a
     * conflicting suffix) and its index handed over again; entries of a
     * log loaded at start or replaced by a snapshot are not handed over.
     * Take references to keep their bufs. */
    void (*appended)(void *data, const struct raft_entry *entries, unsigned n);
    /* One of the application's frames from a peer: every runtime frame
     * but the snapshot chunks the driver streams itself
     * (RAFT_FRAME_FORWARD, _FORWARD_RESULT, _CHECKSUM, _READ_INDEX and
     * its result; the frame and its
     * bufs are released after the call: take references to keep them). */
    void (*forward)(void *data, const struct raft_frame *f);
    /* Reads of raft_uv_node_read_index ready or failed (struct
     * raft_read, raft.h), @n of them, in registration order; the array
     * is valid for the call only. */
    void (*read)(void *data, const struct raft_read *reads, unsigned n);
    /* raft_uv_node_wake was called (coalesced, as uv_async_send is). */
    void (*wake)(void *data);
    /* The clock ticked (every tick_ms). */
    void (*tick)(void *data);
    /* The core stepped: its accessors may show a new state. */
    void (*stepped)(void *data);
    /* A log line (see logging.h). A failed storage write is logged at
     * RAFT_LOG_ERROR; the driver then stops writing, voting and
     * acknowledging until restarted. */
    void (*log)(void *data, int level, const char *msg);
    /* Where to dial server @id, whose address in the configuration is
     * @address: fill @out's host and port (its id is set) and return true,
     * or false not to dial it. NULL: @address itself, "host:port" as
     * raft/address.h reads it. Called for each server of every new
     * configuration in force. */
    bool (*dial)(void *data, raft_id id, const char *address,
                 struct raft_uv_peer *out);
    /* This server, which had no cluster id, adopted @id, the cluster id
     * of server @from, the first leader to replicate to it (an
     * AppendEntries or a snapshot chunk from @from, whose handshake
     * carried @id): the application must make @id durable before any
     * storage write that follows the call, as that write may hold what
     * @from sent (raft_uv_node_cluster_id_set documents the rule). */
    void (*cluster_id)(void *data, const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                       raft_id from);
    /* Whether this server's state machine is diverged now (a commit it
     * did not make reached it): the application owns that state, and
     * the driver asks rather than keeps a copy. While it answers true,
     * the core declines TimeoutNow (RAFT_EVENT_DECLINE, raft.h, stepped
     * after the tick callback of each tick where the answer differs from
     * raft_declining), so that a leadership handed on lands elsewhere,
     * and the driver makes no snapshot for a peer's REPAIR_REQUEST (it
     * only records it, raft_uv_node_peer_repair_age): nothing of a
     * diverged database is sent. Called on the loop thread, up to twice a
     * tick and at each REPAIR_REQUEST: it must never wait on the loop,
     * and any lock it takes must be held briefly. NULL: never
     * diverged. */
    bool (*diverged)(void *data);
};

/* Static settings of a driver. */
struct raft_uv_node_config {
    raft_id id;                       /* this server's id */
    const char *listen_host;          /* an IPv4 or IPv6 literal (no
                                         brackets), wildcards included:
                                         "127.0.0.1", "0.0.0.0", "::" */
    uint16_t listen_port;             /* TCP port, 0 for any */
    const char *advertise;            /* "host:port" peers dial to reach
                                         this server, sent in every
                                         handshake; NULL for the listen
                                         address (none for a wildcard) */
    const struct raft_uv_peer *peers; /* the other servers at start,
                                         n_peers; afterwards the peers
                                         follow the configuration in force
                                         (update.configuration_changed):
                                         new servers are dialled (the
                                         @dial callback says where),
                                         removed ones closed and
                                         forgotten */
    unsigned n_peers;
    uint64_t max_frame_bytes;      /* bound of one frame's body */
    unsigned tick_ms;              /* RAFT_EVENT_TICK period, ms, >= 1 */
    const char *snapshot_dir;      /* where snapshot files are written and
                                        received (must exist) */
    uint64_t snapshot_chunk_bytes; /* bytes per snapshot chunk, > 0 */
    uint64_t snapshot_rate_bytes;  /* the pace of each snapshot transfer,
                                        bytes per second (0: as fast as
                                        the window of acknowledgements
                                        allows); the follower writes what
                                        arrives, so it paces its disk too */
    unsigned storage_stall_ms;     /* a write that has waited this long
                                        for room (full log or disk) makes
                                        the core stop leading and
                                        campaigning until a write succeeds
                                        (RAFT_EVENT_STORAGE_STALLED); 0 for
                                        1000. The election timeout is a
                                        good value */
    struct raft_uv_tls *tls;       /* TLS credentials every connection
                                        uses (borrowed: they must outlive
                                        the driver), NULL for plain TCP */
    const char *build_id;          /* opaque id of this server's build,
                                        sent in every handshake and compared
                                        with each peer's (ext/ passes the
                                        SQLite source id): printable ASCII,
                                        at most RAFT_UV_BUILD_ID_MAX bytes;
                                        NULL or "" for none */
    uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN]; /* this server's cluster
                                        id, all zero for none yet (see
                                        raft_uv_node_cluster_id_set) */
};

struct raft_uv_node; /* opaque */

/* raft_uv_node_start starts a driver for core @r: a libuv loop on a new
 * thread with the transport (listening and dialling per @cfg, copied) and
 * a tick timer. Following raft.h's driver contract, it persists each
 * update through @storage (group commit: updates that arrive while a write
 * runs are merged into the next one), sends messages (after the write when
 * the hard state changed), steps RAFT_EVENT_PERSISTED and hands committed
 * entries to @cb->apply. On success the driver owns @r (closed by
 * raft_uv_node_stop); *out is written before the loop thread starts, so
 * callbacks may use it. On failure the caller still owns @r, nothing runs
 * and @errmsg says why.
 * Errors: RAFT_IOERR (listen failure, thread creation), RAFT_INVALID (bad
 * address, peers or build id), RAFT_NOMEM. Thread: any but a driver's own. */
int raft_uv_node_start(struct raft *r, const struct raft_uv_node_config *cfg,
                       const struct raft_persist_storage *storage,
                       const struct raft_uv_node_callbacks *cb,
                       struct raft_uv_node **out, char *errmsg,
                       size_t errmsg_len);

/* raft_uv_node_wake makes the loop call @cb->wake soon. Any thread, until
 * raft_uv_node_stop is called. */
void raft_uv_node_wake(struct raft_uv_node *d);

/* raft_uv_node_decline_leadership makes this server ignore TimeoutNow from
 * now on, as a diverged one does (RAFT_EVENT_DECLINE, stepped by the loop
 * as soon as it wakes): a server about to stop should not take a
 * leadership it would hand on or drop a moment later. Cannot be undone;
 * raft_uv_node_stop follows. Any thread, until raft_uv_node_stop. */
void raft_uv_node_decline_leadership(struct raft_uv_node *d);

/* raft_uv_node_stop closes the transport and timers, waits for the running
 * storage write, joins the loop thread, closes the core and frees @d. No
 * callback runs after it returns. Thread: any but the driver's own. */
void raft_uv_node_stop(struct raft_uv_node *d);

/* raft_uv_node_propose appends @n payloads (references taken) to the log
 * as one batch and replicates them; *out_index and *out_term give the
 * first new entry. Errors: RAFT_NOTLEADER, RAFT_IOERR (storage failed
 * earlier: the driver no longer writes), RAFT_SHUTDOWN, RAFT_NOMEM.
 * Loop thread only. */
int raft_uv_node_propose(struct raft_uv_node *d, struct raft_buf *const *bufs,
                         unsigned n, raft_index *out_index,
                         raft_term *out_term);

/* raft_uv_node_read_index steps RAFT_EVENT_READ_INDEX of @tag (ReadIndex,
 * raft.h): the read comes back through @cb->read, in this call (a single
 * voter) or a later one, exactly once unless the driver stops first.
 * Errors: raft_step's for it (RAFT_NOTLEADER, RAFT_BUSY, RAFT_NOMEM: then
 * nothing comes back); RAFT_IOERR (storage failed earlier);
 * RAFT_SHUTDOWN. Loop thread. */
int raft_uv_node_read_index(struct raft_uv_node *d, uint64_t tag);

/* raft_uv_node_compact queues the compaction of the stored log up to
 * @index, in order with the storage writes; once done the driver steps
 * RAFT_EVENT_COMPACT. @index must be <= the state machine's durable
 * applied index (the caller's rule: what the log forgets must be in the
 * database file). Returns 0, RAFT_INVALID (beyond the persisted log, or no
 * compact function), or RAFT_BUSY (a compaction is already queued).
 * Loop thread. */
int raft_uv_node_compact(struct raft_uv_node *d, raft_index index);

/* raft_uv_node_log_full says whether the log refused the last write for
 * lack of space (the write is retried after a compaction). Loop thread. */
bool raft_uv_node_log_full(const struct raft_uv_node *d);

/* raft_uv_node_log_full_reason returns why the log last refused a write
 * for lack of space ("...: log full: ..." at log_max_mb, "...: disk full:
 * ..." for the filesystem), "" once a write succeeded again. Valid until
 * the next step. Loop thread. */
const char *raft_uv_node_log_full_reason(const struct raft_uv_node *d);

/* raft_uv_node_send_frame sends @f (@f->from must be this server) to
 * @f->to: the runtime's own frames (forwarding) go out this way. The frame
 * is encoded at once: the caller may free @f and its bufs on return.
 * Frames to one peer leave in order; Raft and forwarding tolerate loss, so
 * a frame that cannot go is dropped. Every error but RAFT_NOCONN is also
 * logged at RAFT_LOG_WARN.
 * Errors: RAFT_NOCONN (not connected to @f->to), RAFT_BUSY (64 MiB already
 * queued to that peer), RAFT_NOTFOUND (@f->to is not a peer), RAFT_TOOBIG
 * (larger than max_frame_bytes), RAFT_INVALID (@f->from is not this
 * server, or the codec refuses @f: unknown type, a chunk past its total),
 * RAFT_SHUTDOWN (the driver is stopping), RAFT_NOMEM. Loop thread. */
int raft_uv_node_send_frame(struct raft_uv_node *d, const struct raft_frame *f);

/* raft_uv_node_send sends the core's message @m as raft_uv_node_send_frame
 * sends a frame, and counts the entries of an AppendEntries in the stats.
 * The driver sends its core's messages this way (no allocation beyond the
 * encoded frame). Errors: as raft_uv_node_send_frame. Loop thread. */
int raft_uv_node_send(struct raft_uv_node *d, const struct raft_message *m);

/* raft_uv_node_core returns the core, for its read-only accessors. Loop
 * thread only (and before start / after stop by the owner). */
const struct raft *raft_uv_node_core(const struct raft_uv_node *d);

/* raft_uv_node_now returns the loop's clock, ms. Loop thread. */
uint64_t raft_uv_node_now(struct raft_uv_node *d);

/* raft_uv_node_log formats a line (printf's @fmt) and hands it to the log
 * callback at @level (enum raft_log_level); lines over 511 bytes are cut.
 * Cannot fail. Loop thread. */
void raft_uv_node_log(struct raft_uv_node *d, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* raft_uv_node_failed says whether a storage write failed (the driver
 * stopped writing). Loop thread. */
bool raft_uv_node_failed(const struct raft_uv_node *d);

/* raft_uv_node_failure returns why storage failed (the failed write's
 * error, e.g. "append: mdb_txn_commit: Input/output error"), "" while
 * raft_uv_node_failed is false. The text is the driver's, valid until it
 * is freed. Cannot fail. Loop thread. */
const char *raft_uv_node_failure(const struct raft_uv_node *d);

/* raft_uv_node_connected says whether the outgoing connection to peer @id
 * is established. Loop thread. */
bool raft_uv_node_connected(const struct raft_uv_node *d, raft_id id);

/* raft_uv_node_connected_peers writes into @ids (room for @max) the ids of
 * the servers this node has an established outgoing connection to (peers
 * of the configuration, and servers that connected to it and were dialled
 * back), and returns how many. Loop thread. */
unsigned raft_uv_node_connected_peers(const struct raft_uv_node *d,
                                      raft_id *ids, unsigned max);

/* raft_uv_node_peer_wire returns the wire version agreed with peer @id
 * on the established outgoing connection (the version the frames sent to
 * it go in, message.h), or 0 while none is established or for an unknown
 * peer. A frame of a newer version than that (raft_frame_type_wire_min)
 * must not be sent to it: raft_uv_node_send_frame would fail to encode
 * it. Loop thread. */
unsigned raft_uv_node_peer_wire(const struct raft_uv_node *d, raft_id id);

/* raft_uv_node_peer_wire_last returns the wire version agreed with peer
 * @id when it was last reached: that of the established outgoing
 * connection, or of the latest one before it closed. 0 while none was
 * established since this driver started, or for an unknown peer. What a
 * peer spoke when last reached may change at its next handshake (it ran
 * another release meanwhile). Loop thread. */
unsigned raft_uv_node_peer_wire_last(const struct raft_uv_node *d, raft_id id);

/* raft_uv_node_peer_snapshot tells whether this driver is sending a
 * snapshot to peer @id, and if so writes the bytes the peer acknowledged
 * into *@out_bytes and the file's size into *@out_total. Loop thread. */
bool raft_uv_node_peer_snapshot(const struct raft_uv_node *d, raft_id id,
                                uint64_t *out_bytes, uint64_t *out_total);

/* raft_uv_node_peer_repair_age returns how long ago, in ms of the loop
 * clock, peer @id last sent this server a REPAIR_REQUEST (it diverged and
 * asks for a snapshot once a second until repaired), UINT64_MAX when it
 * never did or is not a peer. Loop thread. */
uint64_t raft_uv_node_peer_repair_age(struct raft_uv_node *d, raft_id id);

/* raft_uv_node_probe dials @host:@port, a server whose id is not known
 * (a join= address), as peer RAFT_UV_PROBE_ID (uv.h): its handshake makes
 * that server dial back, and once it has, raft_uv_node_connected_peers
 * lists it. The transport re-dials it as any peer. Errors: RAFT_INVALID
 * (no transport that takes peers, a bad address), RAFT_BUSY (the peer
 * table is full), RAFT_SHUTDOWN. Loop thread. */
int raft_uv_node_probe(struct raft_uv_node *d, const char *host, uint16_t port);

/* raft_uv_node_peer_build_id returns the build id peer @id sent in the
 * handshake of its latest accepted connection (its build_id setting, ""
 * for none), or NULL while none arrived or for an unknown peer. A peer
 * whose build id differs from this server's is logged at RAFT_LOG_WARN
 * once per connection, with both ids; nothing else changes (a rolling
 * upgrade passes through it). Valid until the next step. Loop thread. */
const char *raft_uv_node_peer_build_id(const struct raft_uv_node *d,
                                       raft_id id);

/* raft_uv_node_cluster_id_set makes @id this server's cluster id: every
 * later handshake carries it and the transport refuses a server of
 * another cluster (uv.h); connections already made are kept. While it
 * has none, the driver adopts the cluster id of the first server that
 * replicates to it (an AppendEntries or a snapshot chunk whose sender's
 * handshake carried an id) and calls @cb->cluster_id before it steps
 * what that server sent. Safe because an id is only ever one a cluster
 * committed (ext/runtime/cluster_id.h): a server that has one sends it, and the
 * server it replicates to joins the cluster whose log it takes, whose
 * id it is. Loop thread. */
void raft_uv_node_cluster_id_set(struct raft_uv_node *d,
                                 const uint8_t id[RAFT_UV_CLUSTER_ID_LEN]);

/* Counters of a driver since it started, for status and benchmarks, and
 * the progress of snapshot transfers. */
struct raft_uv_node_stats {
    uint64_t n_writes;                   /* storage writes (one fsync each) */
    uint64_t n_entries_written;          /* entries in those writes */
    uint64_t n_bytes_written;            /* payload bytes of those entries */
    struct raft_histogram write_seconds; /* time of each of those writes
                                       on the thread pool (the LMDB write
                                       transaction and its fsync), s */
    struct raft_histogram write_entries; /* entries per write */
    uint64_t n_appends_sent;             /* AppendEntries sent with entries */
    uint64_t n_entries_sent;             /* entries in those AppendEntries */
    uint64_t n_compactions;              /* log compactions done */
    uint64_t n_snapshots_sent;           /* snapshots fully sent (leader) */
    uint64_t n_snapshots_installed;      /* snapshots installed (follower) */
    uint64_t n_snapshot_bytes_sent;      /* bytes of the snapshots fully sent */
    uint64_t n_snapshot_bytes_installed; /* bytes of those installed */
    raft_id last_install_from; /* sender of the last one installed, 0 */
    raft_id snapshot_peer;     /* peer of the transfer shown below, 0 */
    uint64_t snapshot_done;    /* bytes sent or received of it */
    uint64_t snapshot_total;   /* its size, bytes */
    uint64_t loop_max_tick_ms; /* longest time between two ticks
                                       of the loop thread since start,
                                       ms (a tick is due every tick_ms:
                                       more is time the loop was held) */
    char install_error[256];   /* why the last snapshot received was
                                       not installed (the leader sends it
                                       again), "" once one was, or none
                                       failed */
};

/* raft_uv_node_stats copies the driver's counters into @out. Loop
 * thread. */
void raft_uv_node_stats(const struct raft_uv_node *d,
                        struct raft_uv_node_stats *out);

/* raft_uv_node_change steps @ev, a RAFT_EVENT_CHANGE or
 * RAFT_EVENT_TRANSFER (raft.h documents both), and carries out its update
 * as every step does. For a CHANGE, *@out_index (may be NULL) is the index
 * of the new configuration entry: the change is done once that index is
 * committed; for a TRANSFER it is 0. Written only on success.
 * Errors: raft_step's for that event (RAFT_NOTLEADER, RAFT_BUSY,
 * RAFT_NOTFOUND, RAFT_INVALID, RAFT_NOMEM); RAFT_INVALID for any other
 * event type; RAFT_IOERR (storage failed earlier); RAFT_SHUTDOWN. Loop
 * thread. */
int raft_uv_node_change(struct raft_uv_node *d, const struct raft_event *ev,
                        raft_index *out_index);

#endif /* RAFT_UV_NODE_H */
