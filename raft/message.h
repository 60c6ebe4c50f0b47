/* The wire codec: one encoder and one bounds-checked decoder for every
 * message type of raft.h. Pure code (no I/O); the libuv transport frames
 * what it produces.
 *
 * Wire format, version 1, all integers little-endian:
 *
 *   frame   := len:u32 body            len = bytes of body, <= max frame
 *   body    := version:u8 (=1) type:u8 from:u64 to:u64 fields
 *   REQUEST_VOTE         term:u64 last_log_index:u64 last_log_term:u64
 *                        pre_vote:u8
 *   REQUEST_VOTE_RESULT  term:u64 vote_granted:u8 pre_vote:u8
 *   APPEND_ENTRIES       term:u64 prev_log_index:u64 prev_log_term:u64
 *                        leader_commit:u64 seq:u64 n_entries:u32 entry*
 *     entry              term:u64 index:u64 type:u8 len:u32 bytes[len]
 *   APPEND_ENTRIES_RESULT term:u64 success:u8 reject_index:u64
 *                        last_log_index:u64 conflict_index:u64 seq:u64
 *   FORWARD              request_id:u64[2] len:u32 bytes[len]
 *   FORWARD_RESULT       request_id:u64[2] status:i32 index:u64 term:u64
 *   SNAPSHOT_CHUNK       term:u64 last_index:u64 last_term:u64 total:u64
 *                        offset:u64 checksum:u64 len:u32 bytes[len]
 *   SNAPSHOT_CHUNK_RESULT term:u64 last_index:u64 offset:u64 status:i32
 *
 * A body must be consumed exactly: trailing bytes are an error. Entry
 * indexes in APPEND_ENTRIES must be prev_log_index+1, +2, ... (never 0),
 * entry types NORMAL or NOOP, and the u8 booleans 0 or 1. A chunk must lie
 * within its file: offset + len <= total. An empty payload (entry, forward
 * or chunk) is len 0 on the wire and data == NULL in memory. */

#ifndef RAFT_MESSAGE_H
#define RAFT_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "raft.h"

/* Version byte of the wire format. */
#define RAFT_WIRE_VERSION 1

/* Bytes of the frame length prefix. */
#define RAFT_FRAME_HEADER 4

/* raft_message_encoded_len returns the number of bytes raft_message_encode
 * writes for @m: the whole frame, length prefix included; 0 when @m->type
 * is unknown. */
size_t raft_message_encoded_len(const struct raft_message *m);

/* raft_message_encode writes the frame of @m into @buf, which has @len
 * bytes (at least raft_message_encoded_len(m)).
 * Errors: RAFT_INVALID (unknown type, @len too small, entries that the
 * decoder would refuse: NULL array or non-consecutive indexes, or a chunk
 * past its file's total); RAFT_TOOBIG
 * (the body or a payload would not fit a u32 length). */
int raft_message_encode(const struct raft_message *m, void *buf, size_t len);

/* raft_message_decode parses one frame body (the bytes after the length
 * prefix), @len bytes at @body, into @out. Entry, forward and chunk
 * payloads are copied into new bufs and the entries array is allocated:
 * release them with raft_message_release. On failure nothing is
 * allocated and @errmsg (@errmsg_len bytes) says what is wrong.
 * Errors: RAFT_FORMAT (unknown version), RAFT_PROTO (unknown type,
 * truncated body, trailing bytes, non-consecutive entry indexes, unknown
 * entry type, boolean not 0 or 1, a chunk past its file's total, or more
 * entries than could fit: checked before allocating), RAFT_NOMEM.
 * @errmsg may be NULL. Any thread. */
int raft_message_decode(const void *body, size_t len, struct raft_message *out,
                        char *errmsg, size_t errmsg_len);

/* raft_message_release drops the bufs and frees the entries array of a
 * message filled by raft_message_decode, and zeroes it. */
void raft_message_release(struct raft_message *m);

/* raft_message_term returns the term a Raft RPC carries (RequestVote,
 * AppendEntries and their results; 0 for the other types). */
raft_term raft_message_term(const struct raft_message *m);

#endif /* RAFT_MESSAGE_H */
