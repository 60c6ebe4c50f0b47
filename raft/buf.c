/* Reference-counted payload buffers (see buf.h). */

#include "buf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct raft_buf *raft_buf_new(size_t len)
{
    struct raft_buf *b = malloc(sizeof *b + len);
    if (b == NULL) {
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->len = len;
    b->data = b->own;
    b->parent = NULL;
    return b;
}

struct raft_buf *raft_buf_slice(struct raft_buf *parent, size_t off, size_t len)
{
    struct raft_buf *root = parent->parent != NULL ? parent->parent : parent;
    struct raft_buf *b = malloc(sizeof *b);

    if (b == NULL) {
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->len = len;
    b->data = parent->data + off;
    b->parent = raft_buf_ref(root);
    return b;
}

unsigned raft_buf_holders(const struct raft_buf *b)
{
    unsigned n = atomic_load_explicit(&b->refs, memory_order_acquire);

    if (b->parent != NULL &&
        atomic_load_explicit(&b->parent->refs, memory_order_acquire) > 1) {
        return UINT_MAX; /* other slices, or the buffer itself, are held */
    }
    return n;
}

struct raft_buf *raft_buf_resize(struct raft_buf *b, size_t len)
{
    struct raft_buf *p = realloc(b, sizeof *p + len);

    if (p == NULL) {
        return NULL;
    }
    p->len = len;
    p->data = p->own;
    return p;
}

struct raft_buf *raft_buf_copy(const void *p, size_t len)
{
    struct raft_buf *b = raft_buf_new(len);
    if (b != NULL && len > 0) {
        memcpy(b->data, p, len);
    }
    return b;
}

struct raft_buf *raft_buf_ref(struct raft_buf *b)
{
    if (b != NULL) {
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    }
    return b;
}

void raft_buf_unref(struct raft_buf *b)
{
    if (b != NULL &&
        atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        raft_buf_unref(b->parent);
        free(b);
    }
}
