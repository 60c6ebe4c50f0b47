/* Little-endian integer helpers with bounds checks, used by the wire codec.
 * A reader and a writer walk a byte range; every get/put checks the bytes
 * left first and fails (returns false) without touching memory otherwise. */

#ifndef RAFT_BYTE_H
#define RAFT_BYTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A cursor reading a byte range.
 * Invariant: @left bytes at @p are readable. */
struct raft_byte_reader {
    const uint8_t *p; /* next byte to read */
    size_t left;      /* bytes left to read */
};

/* A cursor writing into a byte range.
 * Invariant: @left bytes at @p are writable. */
struct raft_byte_writer {
    uint8_t *p;  /* next byte to write */
    size_t left; /* bytes left to write */
};

/* raft_byte_reader_init returns a reader over the @len bytes at @p. */
static inline struct raft_byte_reader raft_byte_reader_init(const void *p,
                                                            size_t len)
{
    struct raft_byte_reader r = {(const uint8_t *)p, len};
    return r;
}

/* raft_byte_writer_init returns a writer over the @len bytes at @p. */
static inline struct raft_byte_writer raft_byte_writer_init(void *p, size_t len)
{
    struct raft_byte_writer w = {(uint8_t *)p, len};
    return w;
}

/* raft_byte_load_u32 reads a little-endian u32 at @p (4 bytes, unchecked:
 * the caller knows they are there). */
static inline uint32_t raft_byte_load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* raft_byte_load_u64 reads a little-endian u64 at @p (8 bytes, unchecked). */
static inline uint64_t raft_byte_load_u64(const uint8_t *p)
{
    return (uint64_t)raft_byte_load_u32(p) | (uint64_t)raft_byte_load_u32(p + 4)
                                                 << 32;
}

/* raft_byte_store_u32 writes @v little-endian at @p (4 bytes, unchecked). */
static inline void raft_byte_store_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* raft_byte_store_u64 writes @v little-endian at @p (8 bytes, unchecked). */
static inline void raft_byte_store_u64(uint8_t *p, uint64_t v)
{
    raft_byte_store_u32(p, (uint32_t)v);
    raft_byte_store_u32(p + 4, (uint32_t)(v >> 32));
}

/* raft_byte_get_u8 reads one byte into *@out. Returns false, with *@out
 * untouched, when no byte is left. */
static inline bool raft_byte_get_u8(struct raft_byte_reader *r, uint8_t *out)
{
    if (r->left < 1) {
        return false;
    }
    *out = r->p[0];
    r->p += 1;
    r->left -= 1;
    return true;
}

/* raft_byte_get_u32 reads a little-endian u32 into *@out. Returns false,
 * with *@out untouched, when fewer than 4 bytes are left. */
static inline bool raft_byte_get_u32(struct raft_byte_reader *r, uint32_t *out)
{
    if (r->left < 4) {
        return false;
    }
    *out = raft_byte_load_u32(r->p);
    r->p += 4;
    r->left -= 4;
    return true;
}

/* raft_byte_get_u64 reads a little-endian u64 into *@out. Returns false,
 * with *@out untouched, when fewer than 8 bytes are left. */
static inline bool raft_byte_get_u64(struct raft_byte_reader *r, uint64_t *out)
{
    if (r->left < 8) {
        return false;
    }
    *out = raft_byte_load_u64(r->p);
    r->p += 8;
    r->left -= 8;
    return true;
}

/* raft_byte_get_bytes points *@out at the next @len bytes (inside the
 * reader's range, not copied) and skips them. Returns false, with *@out
 * untouched, when fewer than @len bytes are left. */
static inline bool raft_byte_get_bytes(struct raft_byte_reader *r, size_t len,
                                       const uint8_t **out)
{
    if (r->left < len) {
        return false;
    }
    *out = r->p;
    r->p += len;
    r->left -= len;
    return true;
}

/* raft_byte_put_u8 writes one byte. Returns false when no room is left. */
static inline bool raft_byte_put_u8(struct raft_byte_writer *w, uint8_t v)
{
    if (w->left < 1) {
        return false;
    }
    w->p[0] = v;
    w->p += 1;
    w->left -= 1;
    return true;
}

/* raft_byte_put_u32 writes @v little-endian. Returns false when fewer than
 * 4 bytes of room are left. */
static inline bool raft_byte_put_u32(struct raft_byte_writer *w, uint32_t v)
{
    if (w->left < 4) {
        return false;
    }
    raft_byte_store_u32(w->p, v);
    w->p += 4;
    w->left -= 4;
    return true;
}

/* raft_byte_put_u64 writes @v little-endian. Returns false when fewer than
 * 8 bytes of room are left. */
static inline bool raft_byte_put_u64(struct raft_byte_writer *w, uint64_t v)
{
    if (w->left < 8) {
        return false;
    }
    raft_byte_store_u64(w->p, v);
    w->p += 8;
    w->left -= 8;
    return true;
}

/* raft_byte_put_bytes copies the @len bytes at @p (@p may be NULL when @len
 * is 0). Returns false when fewer than @len bytes of room are left. */
static inline bool raft_byte_put_bytes(struct raft_byte_writer *w,
                                       const void *p, size_t len)
{
    if (w->left < len) {
        return false;
    }
    if (len > 0) {
        memcpy(w->p, p, len);
    }
    w->p += len;
    w->left -= len;
    return true;
}

#endif /* RAFT_BYTE_H */
