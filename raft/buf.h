/* Immutable, reference-counted byte buffers: entry payloads shared by the
 * Raft core, the disk thread, the apply thread and the transport without
 * copying. The count is atomic, so references may be taken and dropped from
 * any thread; the bytes must not change once the buffer is shared. */

#ifndef RAFT_BUF_H
#define RAFT_BUF_H

#include <stdatomic.h>
#include <stddef.h>

/* A payload: @len bytes at @data, freed when the last reference goes.
 * Most own their bytes (allocated with the struct); a slice
 * (raft_buf_slice) shows part of another buffer, which it keeps alive, so
 * that a received frame's payloads need no copy.
 * Invariant: refs >= 1 while anyone holds the pointer; @data points into
 * @own, or into @parent's bytes when @parent is not NULL. */
struct raft_buf {
    atomic_uint refs;        /* number of holders */
    size_t len;              /* payload length, bytes */
    unsigned char *data;     /* payload bytes */
    struct raft_buf *parent; /* a slice's buffer (one reference), NULL */
    unsigned char own[];     /* the bytes of a buffer that is no slice */
};

/* raft_buf_new allocates a buffer of @len bytes (contents undefined) with
 * one reference owned by the caller. Returns NULL when out of memory. Any
 * thread. */
struct raft_buf *raft_buf_new(size_t len);

/* raft_buf_copy allocates a buffer holding a copy of @len bytes at @p (@p may
 * be NULL when @len is 0), one reference owned by the caller. Returns NULL
 * when out of memory. Any thread. */
struct raft_buf *raft_buf_copy(const void *p, size_t len);

/* raft_buf_slice returns a buffer of the @len bytes at offset @off of
 * @parent, without copying them: it holds a reference to @parent (its
 * root, when @parent is itself a slice) until it is freed. @off + @len
 * must lie within @parent. Returns NULL when out of memory. Any thread. */
struct raft_buf *raft_buf_slice(struct raft_buf *parent, size_t off,
                                size_t len);

/* raft_buf_resize changes the length of @b, which must be no slice and
 * have no other holder (refs 1: its bytes are being filled), to @len
 * bytes, keeping the first min(old, @len) bytes; @b is invalid afterwards
 * unless NULL is returned. Returns the buffer, or NULL when out of memory
 * (then @b is unchanged). Any thread. */
struct raft_buf *raft_buf_resize(struct raft_buf *b, size_t len);

/* raft_buf_ref takes one more reference to @b (NULL is allowed and ignored)
 * and returns @b. Any thread. */
struct raft_buf *raft_buf_ref(struct raft_buf *b);

/* raft_buf_holders returns how many references keep the bytes of @b
 * readable: @b's own count, or UINT_MAX for a slice whose buffer (the
 * one it shows part of) is held by others too. A caller that accounts
 * for every one of them knows every reader of the bytes, and may change
 * them in place when none reads any more (a new holder can only come
 * from those). Any thread. */
unsigned raft_buf_holders(const struct raft_buf *b);

/* raft_buf_unref drops one reference to @b, freeing it with the last one.
 * NULL is allowed and ignored. Any thread. */
void raft_buf_unref(struct raft_buf *b);

#endif /* RAFT_BUF_H */
