/* What travels between two servers: a frame is one of the core's messages
 * (raft.h) or one of the node runtime's own, from one server to another.
 * The codec (message.h) writes and reads frames and the transport (uv.h)
 * carries them; the core never sees the runtime's. Pure: no I/O. */

#ifndef RAFT_FRAME_H
#define RAFT_FRAME_H

#include <stdbool.h>
#include <stdint.h>

#include "raft.h"

/* The runtime's frame types. They share the type byte of the wire format
 * with enum raft_message_type (1..4, and 9 after them), so a frame's type
 * is one or the other. FORWARD and FORWARD_RESULT carry a
 * follower's client request to the leader and its answer (thesis §6.2;
 * ext/runtime/forward.c and ext/runtime/exec.c); SNAPSHOT_CHUNK and its result
 * stream a snapshot from the leader's driver to a follower's (paper §7;
 * uv_snapshot.c). CHECKSUM (wire version 2 and later only) carries a
 * server's checksum of its replicated content at an applied index
 * (ext/checksum.c). REPAIR_REQUEST (wire version 2 and later only) asks
 * the leader's driver for a fresh snapshot: a diverged replica's
 * (ext/runtime/repair.c; uv_snapshot.c answers it). READ_INDEX and its
 * result (wire version 3 and later only) carry a follower's linearizable
 * read to the leader, which confirms its leadership (ReadIndex, thesis
 * §6.4, raft/read_index.c) and answers with the read index
 * (ext/runtime/barrier.c). LEASE and its result (wire version 5 and later
 * only) carry a follower's write-lease calls to the leader: ask for the
 * lease, commit a changeset under it, release it (ext/runtime/lease.h). */
enum raft_frame_type {
    RAFT_FRAME_FORWARD = 5,
    RAFT_FRAME_FORWARD_RESULT = 6,
    RAFT_FRAME_SNAPSHOT_CHUNK = 7,
    RAFT_FRAME_SNAPSHOT_CHUNK_RESULT = 8,
    RAFT_FRAME_CHECKSUM = 10,
    RAFT_FRAME_REPAIR_REQUEST = 11,
    RAFT_FRAME_READ_INDEX = 12,
    RAFT_FRAME_READ_INDEX_RESULT = 13,
    RAFT_FRAME_LEASE = 14,
    RAFT_FRAME_LEASE_RESULT = 15,
};

/* What a LEASE frame asks of the leader. */
enum raft_lease_op {
    RAFT_LEASE_ASK = 1,     /* grant the lease to @holder of the sender */
    RAFT_LEASE_COMMIT = 2,  /* append changeset @data under lease @id */
    RAFT_LEASE_RELEASE = 3, /* end lease @id without an entry (no answer) */
};

/* A client request forwarded from a follower to the leader. @request_id is
 * chosen by the origin node and identifies the request across retries. */
struct raft_forward {
    uint64_t request_id[2]; /* origin node id, origin sequence number */
    struct raft_buf *data;  /* the request payload (owned by the sender) */
};

/* The leader's answer to a forwarded request: @status is 0 when the request
 * was appended to the leader's log at @index in @term, else a project error
 * code (RAFT_NOTLEADER, RAFT_BUSY, RAFT_TOOBIG, ...). */
struct raft_forward_result {
    uint64_t request_id[2]; /* as in the request */
    int32_t status;         /* 0 or an error code */
    raft_index index;       /* log index assigned, when status is 0 */
    raft_term term;         /* term of that entry, when status is 0 */
};

/* One chunk of a snapshot streamed from the leader's driver to a
 * follower's driver (InstallSnapshot, paper §7, carried outside the core:
 * the core only learns of the installed result through
 * RAFT_EVENT_SNAPSHOT_INSTALLED). Chunks go in order; the follower answers
 * each. @checksum is over the whole file (XXH64, seed 0), checked by the
 * receiver once it has @total bytes. */
struct raft_snapshot_chunk {
    raft_term term;        /* leader's term */
    raft_index last_index; /* the snapshot reflects the log up to here */
    raft_term last_term;   /* term of that entry */
    uint64_t total;        /* size of the whole snapshot file, bytes */
    uint64_t offset;       /* position of this chunk in the file */
    uint64_t checksum;     /* XXH64 of the whole file */
    struct raft_buf *data; /* chunk bytes, NULL when empty */
};

/* The follower's answer to a chunk: @status 0 and @offset the next byte it
 * expects (== total once installed), or a project error code, after which
 * the leader's driver starts over from offset 0 or gives up. */
struct raft_snapshot_chunk_result {
    raft_term term;        /* responder's current term */
    raft_index last_index; /* as in the chunk */
    uint64_t offset;       /* next expected byte */
    int32_t status;        /* 0 or an error code */
};

/* A server's checksum of its replicated content (every table but the
 * raftsql_* internals) once it has applied the log up to @index; compared
 * with the receiver's own value at that index, it tells whether the two
 * replicas agree there (sql/checksum.h, ext/checksum.c). */
struct raft_checksum {
    raft_index index;  /* applied index the value belongs to */
    uint64_t checksum; /* the checksum there */
    bool probe;        /* the receiver answers with its own value at
                          @index (a search for the first index where two
                          replicas differ), else it only compares */
};

/* A diverged replica's request for a snapshot (its database took a commit
 * it did not make, ext/runtime/repair.h): the leader's driver sends one, made
 * at an applied index of at least @applied, with the snapshot chunks, so
 * that nothing needs re-applying after the install. */
struct raft_repair_request {
    raft_index applied; /* the requester's applied index */
};

/* A follower's read request (raft_barrier): the leader answers with a
 * READ_INDEX_RESULT of the same @tag. */
struct raft_read_index_request {
    uint64_t tag; /* chosen by the follower, echoed */
};

/* The leader's answer: @status 0 and the read index @index, once a quorum
 * confirmed its leadership after the request arrived; else a project
 * error code (RAFT_NOTLEADER, RAFT_TIMEOUT, RAFT_BUSY) and @index 0. */
struct raft_read_index_result {
    uint64_t tag;     /* as in the request */
    int32_t status;   /* 0 or an error code */
    raft_index index; /* the read index, when status is 0 */
};

/* A follower's write-lease call (ext/runtime/lease.h): the leader
 * answers ASK and COMMIT with a LEASE_RESULT of the same @tag and @op. */
struct raft_lease_request {
    uint64_t tag;          /* chosen by the follower, echoed */
    uint8_t op;            /* enum raft_lease_op */
    uint64_t holder;       /* ASK: the holder's token on the follower */
    uint64_t id;           /* COMMIT, RELEASE: the lease id */
    struct raft_buf *data; /* COMMIT: the changeset (owned by the sender) */
};

/* The leader's answer to an ASK or a COMMIT: @status 0, or a project
 * error code (RAFT_BUSY: another holder has it; RAFT_NOTLEADER;
 * RAFT_FORMAT; RAFT_TIMEOUT: the lease expired; RAFT_INVALID: the lease
 * is not in force; RAFT_TOOBIG; RAFT_UNKNOWN: appended, then the
 * leadership was lost before it was seen committed, or the leader does
 * not remember the lease: granted before its restart). */
struct raft_lease_result {
    uint64_t tag;     /* as in the call */
    uint8_t op;       /* as in the call */
    int32_t status;   /* 0 or an error code */
    uint64_t id;      /* the lease id (ASK granted; COMMIT) */
    raft_index index; /* ASK granted: the leader's last index at the
                          grant; COMMIT done: the changeset's index */
    raft_id server;   /* ASK refused busy: the holder's server, 0 */
};

/* One frame between two servers: one of the core's messages or one of the
 * runtime's, under a header that says which and between whom.
 * Invariant: when @type is an enum raft_message_type, @message is that
 * message and its own type, from and to equal the frame's
 * (raft_frame_wrap and the decoder make them so; the encoder refuses a
 * frame where they differ). Who owns the payloads (entries, bufs) is said
 * where a frame is made: the sender's until the send returns, the
 * decoder's until raft_frame_release. */
struct raft_frame {
    uint8_t type; /* enum raft_message_type or enum raft_frame_type */
    raft_id from; /* sender id */
    raft_id to;   /* receiver id */
    union {
        struct raft_message message;               /* the core's types */
        struct raft_forward forward;               /* FORWARD */
        struct raft_forward_result forward_result; /* FORWARD_RESULT */
        struct raft_snapshot_chunk snapshot_chunk; /* SNAPSHOT_CHUNK */
        struct raft_snapshot_chunk_result snapshot_chunk_result; /* its
                                                                    answer */
        struct raft_checksum checksum;                           /* CHECKSUM */
        struct raft_repair_request repair_request;       /* REPAIR_REQUEST */
        struct raft_read_index_request read_index;       /* READ_INDEX */
        struct raft_read_index_result read_index_result; /* its answer */
        struct raft_lease_request lease;                 /* LEASE */
        struct raft_lease_result lease_result;           /* its answer */
    };
};

/* raft_frame_is_message says whether @f carries one of the core's messages
 * (its type is an enum raft_message_type). Any thread. */
bool raft_frame_is_message(const struct raft_frame *f);

/* raft_frame_wrap fills @out with the frame that carries the core's
 * message @m: struct copies, nothing allocated; the entries array and bufs
 * stay @m's. A message of a type the core does not have gives a frame of
 * type 0, which the codec refuses. Any thread. */
void raft_frame_wrap(const struct raft_message *m, struct raft_frame *out);

/* raft_frame_unwrap copies the core's message that @f carries into @out
 * and returns true; it returns false and leaves @out alone when @f is one
 * of the runtime's frames or of no known type. @out shares @f's entries
 * array and bufs. Any thread. */
bool raft_frame_unwrap(const struct raft_frame *f, struct raft_message *out);

#endif /* RAFT_FRAME_H */
