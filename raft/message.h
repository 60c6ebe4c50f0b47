/* The wire codec: one encoder and one bounds-checked decoder for every
 * frame of frame.h, the core's messages (raft.h) and the runtime's frames
 * alike. Pure code (no I/O); the libuv transport carries what it produces.
 *
 * Wire format, versions RAFT_WIRE_VERSION_MIN to RAFT_WIRE_VERSION (1 to
 * 7; version 2 is version 1 plus the CHECKSUM and REPAIR_REQUEST frames,
 * version 3 is version 2 plus the READ_INDEX frames, version 4 has
 * version 3's frames and says its release applies changeset entries, a
 * plain SQL transaction's effect, in NORMAL entries: the leader grants a
 * write lease only while every member speaks it, ext/runtime/lease.h;
 * version 5 is version 4 plus the LEASE frames, a follower's write-lease
 * calls; version 6 is version 5 with quorum_contact in APPEND_ENTRIES, the
 * leader's last contact with a quorum, which bounds a follower's
 * staleness, ext/runtime/staleness_rule.h; version 7 is version 6 with
 * sent_at in APPEND_ENTRIES_RESULT, the follower's clock when it sent
 * it, and echo in APPEND_ENTRIES, the newest sent_at the leader took
 * from that follower: a round trip timed by the follower's own clock
 * bounds its staleness, raft_leader_commit_contact in raft.h), all
 * integers little-endian:
 *
 *   frame   := len:u32 body            len = bytes of body, <= max frame
 *   body    := version:u8 type:u8 from:u64 to:u64 fields
 *   type 1..4 and 9: the core's messages (enum raft_message_type)
 *   REQUEST_VOTE         term:u64 last_log_index:u64 last_log_term:u64
 *                        flags:u8 (bit 0 pre-vote, bit 1 disrupt: the
 *                        election of a leadership transfer; other bits
 *                        refused. Before TimeoutNow this byte was the
 *                        pre_vote boolean, whose 0 and 1 read the same)
 *   REQUEST_VOTE_RESULT  term:u64 vote_granted:u8 pre_vote:u8
 *   APPEND_ENTRIES       term:u64 prev_log_index:u64 prev_log_term:u64
 *                        leader_commit:u64 seq:u64 [quorum_contact:u32,
 *                        version 6 on; read as 0 from an older body]
 *                        [echo:u64, version 7 on; read as 0 from an
 *                        older body]
 *                        n_entries:u32 entry*
 *     entry              term:u64 index:u64 type:u8 len:u32 bytes[len]
 *   APPEND_ENTRIES_RESULT term:u64 success:u8 reject_index:u64
 *                        last_log_index:u64 conflict_index:u64 seq:u64
 *                        [sent_at:u64, version 7 on; read as 0 from an
 *                        older body]
 *   TIMEOUT_NOW (9)      term:u64
 *   type 5..8: the runtime's frames (enum raft_frame_type)
 *   FORWARD              request_id:u64[2] len:u32 bytes[len]
 *   FORWARD_RESULT       request_id:u64[2] status:i32 index:u64 term:u64
 *   SNAPSHOT_CHUNK       term:u64 last_index:u64 last_term:u64 total:u64
 *                        offset:u64 checksum:u64 len:u32 bytes[len]
 *   SNAPSHOT_CHUNK_RESULT term:u64 last_index:u64 offset:u64 status:i32
 *   types 10 and 11, in wire version 2 and later only (refused in a
 *   version 1 body by both encoder and decoder):
 *   CHECKSUM (10)        index:u64 checksum:u64 probe:u8
 *   REPAIR_REQUEST (11)  applied:u64
 *   types 12 and 13, in wire version 3 and later only (refused in a
 *   version 1 or 2 body by both encoder and decoder):
 *   READ_INDEX (12)      tag:u64
 *   READ_INDEX_RESULT (13) tag:u64 status:i32 index:u64
 *   types 14 and 15, in wire version 5 and later only:
 *   LEASE (14)           tag:u64 op:u8 holder:u64 id:u64 len:u32
 *                        bytes[len] (op 1 ASK, 2 COMMIT, 3 RELEASE; other
 *                        ops refused)
 *   LEASE_RESULT (15)    tag:u64 op:u8 status:i32 id:u64 index:u64
 *                        server:u64
 *
 * A body must be consumed exactly: trailing bytes are an error. Entry
 * indexes in APPEND_ENTRIES must be prev_log_index+1, +2, ... (never 0),
 * entry types NORMAL, NOOP or CONFIG (whose payload the core checks), and
 * the u8 booleans 0 or 1. A chunk must lie
 * within its file: offset + len <= total. An empty payload (entry, forward
 * or chunk) is len 0 on the wire and data == NULL in memory. */

#ifndef RAFT_MESSAGE_H
#define RAFT_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "frame.h"
#include "raft.h"

/* The wire versions this build speaks: RAFT_WIRE_VERSION_MIN to
 * RAFT_WIRE_VERSION, the highest. Two servers use the highest both speak
 * (uv.h); a connection whose ranges do not meet is refused. Test builds
 * move the range with -DRAFT_WIRE_VERSION_MAX_TEST=n (and
 * -DRAFT_WIRE_VERSION_MIN_TEST=n) to play a newer release in a rolling
 * upgrade (the Makefile's build/raftsql-testhost-next). */
#ifdef RAFT_WIRE_VERSION_MAX_TEST
#define RAFT_WIRE_VERSION RAFT_WIRE_VERSION_MAX_TEST
#else
#define RAFT_WIRE_VERSION 7
#endif
#ifdef RAFT_WIRE_VERSION_MIN_TEST
#define RAFT_WIRE_VERSION_MIN RAFT_WIRE_VERSION_MIN_TEST
#else
#define RAFT_WIRE_VERSION_MIN 1
#endif

/* raft_wire_versions_get writes the wire versions the wire codec was
 * compiled to speak (RAFT_WIRE_VERSION_MIN and RAFT_WIRE_VERSION of
 * raft/message.c, which a test build may move) into @lo and @hi, for
 * code compiled apart from it (the start line, ext/runtime/node.c). Any
 * thread. */
void raft_wire_versions_get(unsigned *lo, unsigned *hi);

/* raft_frame_type_wire_min returns the lowest wire version in which
 * frames of @type exist (1 for most, 2 for RAFT_FRAME_CHECKSUM and
 * REPAIR_REQUEST, 3 for the READ_INDEX frames), 0 for a
 * type the codec does not know. A sender checks it against the version
 * agreed with a peer (raft_uv_node_peer_wire) before it sends. Any
 * thread. */
unsigned raft_frame_type_wire_min(uint8_t type);

/* Bytes of the frame length prefix. */
#define RAFT_FRAME_HEADER 4

/* raft_frame_encoded_len returns the number of bytes raft_frame_encode
 * writes for @f: the whole frame, length prefix included; 0 when @f->type
 * is unknown. Any thread. */
size_t raft_frame_encoded_len(const struct raft_frame *f);

/* raft_frame_encoded_len_at is raft_frame_encoded_len in wire version
 * @version (raft_frame_encode_at's bytes): an APPEND_ENTRIES is 4 bytes
 * shorter before version 6. Any thread. */
size_t raft_frame_encoded_len_at(const struct raft_frame *f, unsigned version);

/* raft_frame_encode writes the frame @f into @buf, which has @len bytes (at
 * least raft_frame_encoded_len(f)). @f is only read. Any thread.
 * Errors: RAFT_INVALID (unknown type, a type newer than the version
 * written, @len too small, a core message whose
 * type, from or to differ from the frame's, entries that the decoder would
 * refuse: NULL array or non-consecutive indexes, or a chunk past its
 * file's total); RAFT_TOOBIG (the body or a payload would not fit a u32
 * length). */
int raft_frame_encode(const struct raft_frame *f, void *buf, size_t len);

/* raft_frame_encode_at is raft_frame_encode in wire version @version,
 * which must lie in [RAFT_WIRE_VERSION_MIN, RAFT_WIRE_VERSION]
 * (raft_frame_encode writes RAFT_WIRE_VERSION). Errors: as
 * raft_frame_encode; RAFT_INVALID for another version. Any thread. */
int raft_frame_encode_at(const struct raft_frame *f, unsigned version,
                         void *buf, size_t len);

/* A payload that raft_frame_encode_refs left out of the buffer: its
 * bytes belong at offset @at of the buffer (before the byte written there,
 * if any), so the frame on the wire is the buffer's bytes with each
 * referenced payload inserted at its offset, in order. */
struct raft_frame_ref {
    size_t at;            /* offset in the encoded buffer */
    struct raft_buf *buf; /* the payload (the frame's; not referenced) */
};

/* raft_frame_encoded_len_refs returns the bytes raft_frame_encode_refs
 * writes for @f in wire version @version with @ref_min:
 * raft_frame_encoded_len_at less the payloads (entries, forward,
 * snapshot chunk) of at least @ref_min bytes, whose number goes to
 * *@out_n_refs; 0 when @f->type is unknown. Any thread. */
size_t raft_frame_encoded_len_refs(const struct raft_frame *f, unsigned version,
                                   size_t ref_min, unsigned *out_n_refs);

/* raft_frame_encode_refs is raft_frame_encode_at, except that the bytes of
 * every payload of at least @ref_min bytes are not copied into @buf
 * (@len bytes, at least raft_frame_encoded_len_refs): each goes to
 * @refs (room for the count raft_frame_encoded_len_refs gave) in frame
 * order, and their number to *@out_n_refs. A sender writes the frame
 * without copying a large entry: it keeps each reference's buffer alive
 * until its write completes. @refs NULL copies every payload. Errors: as
 * raft_frame_encode_at. Any thread. */
int raft_frame_encode_refs(const struct raft_frame *f, unsigned version,
                           void *buf, size_t len, size_t ref_min,
                           struct raft_frame_ref *refs, unsigned *out_n_refs);

/* raft_frame_decode parses one frame body (the bytes after the length
 * prefix), @len bytes at @body, into @out. Entry, forward and chunk
 * payloads are copied into new bufs and the entries array is allocated:
 * release them with raft_frame_release. On failure nothing is allocated,
 * @out is untouched and @errmsg (@errmsg_len bytes) says what is wrong.
 * Errors: RAFT_FORMAT (a version outside [RAFT_WIRE_VERSION_MIN,
 * RAFT_WIRE_VERSION]), RAFT_PROTO (unknown type, a type newer than the
 * body's version,
 * truncated body, trailing bytes, non-consecutive entry indexes, unknown
 * entry type, boolean not 0 or 1, a chunk past its file's total, or more
 * entries than could fit: checked before allocating), RAFT_NOMEM.
 * @errmsg may be NULL. Any thread. */
int raft_frame_decode(const void *body, size_t len, struct raft_frame *out,
                      char *errmsg, size_t errmsg_len);

/* Payloads of at least this many bytes are sliced from the body by
 * raft_frame_decode_buf (smaller ones are copied, so that a small entry
 * kept long does not keep its whole frame alive). */
#define RAFT_FRAME_SLICE_MIN (64u * 1024)

/* raft_frame_decode_buf is raft_frame_decode of the body of @len bytes
 * that starts @body (at most its len), except that payloads of at least
 * RAFT_FRAME_SLICE_MIN bytes are not copied: they are slices of @body
 * (raft_buf_slice), which keep it alive, so a large entry costs no copy
 * on the thread that decodes it. @body is only read, and its bytes must
 * not change while a slice lives; the caller keeps its own reference.
 * Errors: as raft_frame_decode. Any thread. */
int raft_frame_decode_buf(struct raft_buf *body, size_t len,
                          struct raft_frame *out, char *errmsg,
                          size_t errmsg_len);

/* raft_frame_release drops the bufs and frees the entries array of a frame
 * filled by raft_frame_decode, and zeroes it. */
void raft_frame_release(struct raft_frame *f);

/* raft_message_release drops the bufs and frees the entries array of a
 * core message that owns them (a deep copy: each entry buf referenced and
 * the array allocated with malloc), and zeroes it. */
void raft_message_release(struct raft_message *m);

#endif /* RAFT_MESSAGE_H */
