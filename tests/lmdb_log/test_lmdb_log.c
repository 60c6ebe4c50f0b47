/* Tests of the durable Raft log on LMDB (lmdb_log/lmdb_log.h): reads and
 * bounds, conflicting suffixes, hard state, reopen, checksums, map growth,
 * the "log full" ceiling, and compaction, the snapshot boundary,
 * reset, the bounded file size and the version 1 upgrade. Each test runs
 * in a fresh mkdtemp directory that its teardown removes. Randomized tests
 * print their seed; set LMDB_LOG_TEST_SEED to replay one. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lmdb_log/internal.h"
#include "lmdb_log/lmdb_log.h"

#define MIB (1024u * 1024u)
#define DEFAULT_MAX (64u * MIB)

/* What the log should hold: e[i] is the entry of index snap + 1 + i (so
 * e[i] is index i + 1 until a compaction or reset moves the boundary). */
struct model {
    struct raft_entry *e;      /* expected entries, owning their data */
    raft_index last;           /* last expected index, snap when empty */
    size_t cap;                /* slots allocated in @e */
    struct raft_hard_state hs; /* expected hard state */
    raft_index snap;           /* expected snapshot boundary index */
    raft_term snap_term;       /* and its term */
};

/* One test's directory, open log and model (freed by the teardown, even
 * after a failed assertion). */
struct fixture {
    char dir[256];        /* the mkdtemp directory of this test */
    struct lmdb_log *log; /* the open log, or NULL */
    struct model m;       /* what the log should hold */
};

static void model_free(struct model *m);

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");

    if (f == NULL) {
        return -1;
    }
    snprintf(f->dir, sizeof f->dir, "%s/lmdb_log_test.XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    lmdb_log_close(f->log);
    model_free(&f->m);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void open_log(struct fixture *f, uint64_t max_bytes)
{
    char msg[256] = "";
    int rc = lmdb_log_open(f->dir, max_bytes, &f->log, msg, sizeof msg);

    if (rc != 0) {
        fail_msg("lmdb_log_open: %d %s", rc, msg);
    }
}

static void reopen_log(struct fixture *f, uint64_t max_bytes)
{
    lmdb_log_close(f->log);
    f->log = NULL;
    open_log(f, max_bytes);
}

/* The payload byte @i of the entry @index written in @term. */
static uint8_t payload_byte(raft_index index, raft_term term, size_t i)
{
    return (uint8_t)(index * 131u + term * 17u + i * 7u + (i >> 8));
}

static struct raft_buf *make_payload(raft_index index, raft_term term,
                                     size_t len)
{
    struct raft_buf *b;

    if (len == 0) {
        return NULL;
    }
    b = raft_buf_new(len);
    assert_non_null(b);
    for (size_t i = 0; i < len; i++) {
        b->data[i] = payload_byte(index, term, i);
    }
    return b;
}

/* Fills @es with @n entries from index @start, all of @term, with
 * generated payloads of @len bytes (NULL data when @len is 0). */
static void make_entries(struct raft_entry *es, raft_index start, unsigned n,
                         raft_term term, size_t len)
{
    for (unsigned i = 0; i < n; i++) {
        es[i].index = start + i;
        es[i].term = term;
        es[i].type = RAFT_ENTRY_NORMAL;
        es[i].data = make_payload(start + i, term, len);
    }
}

static void drop_entries(struct raft_entry *es, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        raft_buf_unref(es[i].data);
        es[i].data = NULL;
    }
}

static void assert_entry_equal(const struct raft_entry *got,
                               const struct raft_entry *want)
{
    size_t got_len = got->data != NULL ? got->data->len : 0;
    size_t want_len = want->data != NULL ? want->data->len : 0;

    assert_int_equal(got->index, want->index);
    assert_int_equal(got->term, want->term);
    assert_int_equal(got->type, want->type);
    assert_int_equal(got_len, want_len);
    if (want_len == 0) {
        /* The contract: an empty payload reads back as NULL data. */
        assert_null(got->data);
    } else {
        assert_memory_equal(got->data->data, want->data->data, want_len);
    }
}

static void model_truncate(struct model *m, raft_index index)
{
    while (m->last >= index && m->last > m->snap) {
        raft_buf_unref(m->e[m->last - m->snap - 1].data);
        m->last--;
    }
}

/* Drops the expected entries through @index (index <= m->last), which
 * becomes the boundary. */
static void model_compact(struct model *m, raft_index index)
{
    size_t drop;

    if (index <= m->snap) {
        return;
    }
    assert_true(index <= m->last);
    drop = (size_t)(index - m->snap);
    m->snap_term = m->e[drop - 1].term;
    for (size_t i = 0; i < drop; i++) {
        raft_buf_unref(m->e[i].data);
    }
    memmove(m->e, m->e + drop, (size_t)(m->last - index) * sizeof *m->e);
    m->snap = index;
}

/* Expects an empty log after the boundary (@index, @term). */
static void model_reset(struct model *m, raft_index index, raft_term term)
{
    model_truncate(m, m->snap + 1);
    m->snap = index;
    m->snap_term = term;
    m->last = index;
}

static void model_append(struct model *m, const struct raft_hard_state *hs,
                         const struct raft_entry *es, unsigned n)
{
    if (hs != NULL) {
        m->hs = *hs;
    }
    if (n == 0) {
        return;
    }
    model_truncate(m, es[0].index);
    assert_int_equal(es[0].index, m->last + 1);
    for (unsigned i = 0; i < n; i++) {
        size_t at = (size_t)(m->last - m->snap);
        if (at == m->cap) {
            m->cap = m->cap == 0 ? 64 : m->cap * 2;
            m->e = realloc(m->e, m->cap * sizeof *m->e);
            assert_non_null(m->e);
        }
        m->e[at] = es[i];
        m->e[at].data = raft_buf_ref(es[i].data);
        m->last++;
    }
}

static void model_free(struct model *m)
{
    model_truncate(m, m->snap + 1);
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* Checks that @l holds exactly what @m expects: bounds, hard state and
 * every entry. */
static void model_check(struct lmdb_log *l, const struct model *m)
{
    struct raft_hard_state hs;
    struct raft_entry *es = NULL;
    raft_index first;
    raft_index last;
    raft_index snap = 99;
    raft_term snap_term = 99;
    unsigned n = 0;

    assert_int_equal(lmdb_log_hard_state(l, &hs), 0);
    assert_int_equal(hs.term, m->hs.term);
    assert_int_equal(hs.vote, m->hs.vote);
    assert_int_equal(lmdb_log_snapshot(l, &snap, &snap_term), 0);
    assert_int_equal(snap, m->snap);
    assert_int_equal(snap_term, m->snap_term);
    assert_int_equal(lmdb_log_bounds(l, &first, &last), 0);
    assert_int_equal(first, m->snap + 1);
    assert_int_equal(last, m->last);
    assert_int_equal(lmdb_log_entries(l, m->snap + 1, m->last, 0, &es, &n), 0);
    assert_int_equal(n, m->last - m->snap);
    for (unsigned i = 0; i < n; i++) {
        assert_entry_equal(&es[i], &m->e[i]);
    }
    lmdb_log_entries_free(es, n);
}

/* Appends @n generated entries from @start in @term with @len-byte
 * payloads, plus @hs; on success records them in @m. Returns the result
 * of lmdb_log_append. */
static int append_gen(struct lmdb_log *l, struct model *m,
                      const struct raft_hard_state *hs, raft_index start,
                      unsigned n, raft_term term, size_t len)
{
    struct raft_entry *es = calloc(n > 0 ? n : 1, sizeof *es);
    int rc;

    assert_non_null(es);
    make_entries(es, start, n, term, len);
    rc = lmdb_log_append(l, hs, es, n);
    if (rc == 0) {
        model_append(m, hs, es, n);
    }
    drop_entries(es, n);
    free(es);
    return rc;
}

static bool contains(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* Reads the whole file @path into a new buffer; *@out_len is its size. */
static uint8_t *slurp(const char *path, size_t *out_len)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf;
    long len;

    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    len = ftell(fp);
    assert_true(len > 0);
    rewind(fp);
    buf = malloc((size_t)len);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    *out_len = (size_t)len;
    return buf;
}

static void spill(const char *path, const uint8_t *buf, size_t len)
{
    FILE *fp = fopen(path, "r+b");

    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* Offsets of the occurrences of @pat in @buf (up to @max of them) go into
 * @at; returns how many there are in all. */
static unsigned find_all(const uint8_t *buf, size_t len, const void *pat,
                         size_t pat_len, size_t *at, unsigned max)
{
    unsigned n = 0;

    for (size_t i = 0; i + pat_len <= len; i++) {
        if (memcmp(buf + i, pat, pat_len) == 0) {
            if (n < max) {
                at[n] = i;
            }
            n++;
        }
    }
    return n;
}

/* XORs the byte @delta bytes after every occurrence of @pat in the data
 * file of @dir with @mask; returns the number of occurrences. */
static unsigned patch_data_file(const char *dir, const void *pat,
                                size_t pat_len, size_t delta, uint8_t mask)
{
    char path[300];
    size_t len;
    size_t at[16];
    uint8_t *buf;
    unsigned n;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    buf = slurp(path, &len);
    n = find_all(buf, len, pat, pat_len, at, 16);
    assert_true(n <= 16);
    for (unsigned i = 0; i < n; i++) {
        assert_true(at[i] + delta < len);
        buf[at[i] + delta] ^= mask;
    }
    spill(path, buf, len);
    free(buf);
    return n;
}

/* The seed of a randomized test: LMDB_LOG_TEST_SEED or @fallback. */
static uint64_t test_seed(uint64_t fallback)
{
    const char *s = getenv("LMDB_LOG_TEST_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : fallback;

    print_message("[   SEED   ] %llu (replay with LMDB_LOG_TEST_SEED)\n",
                  (unsigned long long)seed);
    return seed;
}

static uint64_t next_rand(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* A new log is empty: first index 1, last 0, hard state zero, no message. */
static void test_new_log(void **state)
{
    struct fixture *f = *state;
    struct raft_hard_state hs = {7, 7};
    struct raft_entry *es = (void *)1;
    raft_index first = 99;
    raft_index last = 99;
    unsigned n = 99;

    open_log(f, DEFAULT_MAX);
    assert_string_equal(lmdb_log_errmsg(f->log), "");
    assert_int_equal(lmdb_log_bounds(f->log, &first, &last), 0);
    assert_int_equal(first, 1);
    assert_int_equal(last, 0);
    assert_int_equal(lmdb_log_hard_state(f->log, &hs), 0);
    assert_int_equal(hs.term, 0);
    assert_int_equal(hs.vote, 0);
    assert_int_equal(lmdb_log_entries(f->log, 1, 1, 0, &es, &n), RAFT_NOTFOUND);
    assert_ptr_equal(es, (void *)1);
    assert_int_equal(lmdb_log_entries(f->log, 1, 0, 0, &es, &n), 0);
    assert_null(es);
    assert_int_equal(n, 0);
}

/* Appended entries read back by range; bounds follow; ranges reaching
 * outside the stored ones give RAFT_NOTFOUND and leave the outputs alone. */
static void test_append_read_range(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_entry *es = NULL;
    raft_index first;
    raft_index last;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 6, 1, 40), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 7, 4, 2, 17), 0);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_bounds(f->log, &first, &last), 0);
    assert_int_equal(first, 1);
    assert_int_equal(last, 10);

    assert_int_equal(lmdb_log_entries(f->log, 4, 8, 0, &es, &n), 0);
    assert_int_equal(n, 5);
    for (unsigned i = 0; i < n; i++) {
        assert_entry_equal(&es[i], &m->e[3 + i]);
    }
    lmdb_log_entries_free(es, n);
    assert_int_equal(lmdb_log_entries(f->log, 10, 10, 0, &es, &n), 0);
    assert_int_equal(n, 1);
    assert_entry_equal(&es[0], &m->e[9]);
    lmdb_log_entries_free(es, n);

    es = NULL;
    n = 42;
    assert_int_equal(lmdb_log_entries(f->log, 0, 3, 0, &es, &n), RAFT_NOTFOUND);
    assert_int_equal(lmdb_log_entries(f->log, 8, 11, 0, &es, &n),
                     RAFT_NOTFOUND);
    assert_true(contains(lmdb_log_errmsg(f->log), "[8, 11]"));
    assert_int_equal(lmdb_log_entries(f->log, 11, 11, 0, &es, &n),
                     RAFT_NOTFOUND);
    assert_int_equal(lmdb_log_entries(f->log, 5, UINT64_MAX, 0, &es, &n),
                     RAFT_NOTFOUND);
    assert_null(es);
    assert_int_equal(n, 42);
}

/* entries() stops once the payloads would exceed max_bytes, but always
 * returns at least one entry; 0 means no limit. */
static void test_entries_max_bytes(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_entry *es = NULL;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 10, 3, 100), 0);

    assert_int_equal(lmdb_log_entries(f->log, 2, 10, 250, &es, &n), 0);
    assert_int_equal(n, 2);
    assert_entry_equal(&es[0], &m->e[1]);
    assert_entry_equal(&es[1], &m->e[2]);
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_entries(f->log, 2, 10, 300, &es, &n), 0);
    assert_int_equal(n, 3);
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_entries(f->log, 2, 10, 1, &es, &n), 0);
    assert_int_equal(n, 1);
    assert_entry_equal(&es[0], &m->e[1]);
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_entries(f->log, 1, 10, 0, &es, &n), 0);
    assert_int_equal(n, 10);
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_entries(f->log, 1, 10, 1000, &es, &n), 0);
    assert_int_equal(n, 10);
    lmdb_log_entries_free(es, n);
}

/* An append starting inside the log replaces the conflicting suffix (paper
 * Fig. 2, receiver rule 3), even when the new suffix is shorter. */
static void test_conflicting_append(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 10, 1, 30), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 6, 3, 2, 31), 0);
    assert_int_equal(m->last, 8);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 9, 2, 2, 0), 0);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 1, 3, 5), 0);
    assert_int_equal(m->last, 1);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* truncate_suffix deletes from an index on; past the end it changes
 * nothing; from index 1 it empties the log, which then takes appends at 1
 * again. */
static void test_truncate_suffix(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 10, 1, 12), 0);
    assert_int_equal(lmdb_log_truncate_suffix(f->log, 7), 0);
    model_truncate(m, 7);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_truncate_suffix(f->log, 100), 0);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 7, 2, 4, 9), 0);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_truncate_suffix(f->log, 1), 0);
    model_truncate(m, 1);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 3, 5, 9), 0);
    model_check(f->log, m);
}

/* The hard state is stored alone or with entries, a NULL one is left as
 * is, and both survive reopening. */
static void test_hard_state(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_hard_state hs1 = {3, 2};
    struct raft_hard_state hs2 = {4, 0};
    struct raft_hard_state hs3 = {UINT64_MAX, UINT64_MAX - 1};

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, &hs1, 1, 0, 0, 0), 0);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);

    assert_int_equal(append_gen(f->log, m, &hs2, 1, 5, 4, 20), 0);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 6, 2, 4, 20), 0);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);

    assert_int_equal(append_gen(f->log, m, &hs3, 1, 0, 0, 0), 0);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    /* No hard state and no entries: nothing to do, nothing changes. */
    assert_int_equal(lmdb_log_append(f->log, NULL, NULL, 0), 0);
    model_check(f->log, m);
}

/* A seeded random mix of appends (with conflicts), truncations and hard
 * state updates, closing and reopening now and then, always reads back
 * exactly what was committed. */
static void test_reopen_random(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    uint64_t seed = test_seed(20240601);
    uint64_t s = seed | 1;
    raft_term term = 1;

    open_log(f, DEFAULT_MAX);
    for (unsigned step = 0; step < 120; step++) {
        unsigned op = (unsigned)(next_rand(&s) % 100);
        if (op < 55) {
            raft_index lo = m->last > 4 ? m->last - 4 : 1;
            raft_index start = lo + next_rand(&s) % (m->last + 2 - lo);
            unsigned n = 1 + (unsigned)(next_rand(&s) % 8);
            size_t len =
                (size_t)(next_rand(&s) % 4 == 0 ? 0 : next_rand(&s) % 300);
            struct raft_hard_state hs = {term, next_rand(&s) % 4};
            bool with_hs = next_rand(&s) % 2 == 0;
            if (next_rand(&s) % 5 == 0) {
                term++;
            }
            assert_int_equal(append_gen(f->log, m, with_hs ? &hs : NULL, start,
                                        n, term, len),
                             0);
        } else if (op < 65) {
            raft_index at = 1 + next_rand(&s) % (m->last + 1);
            assert_int_equal(lmdb_log_truncate_suffix(f->log, at), 0);
            model_truncate(m, at);
        } else if (op < 80) {
            struct raft_hard_state hs = {++term, next_rand(&s) % 4};
            assert_int_equal(append_gen(f->log, m, &hs, 1, 0, 0, 0), 0);
        } else {
            reopen_log(f, DEFAULT_MAX);
        }
        model_check(f->log, m);
    }
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* Entries without payload (data NULL, or a zero-length buf) and of either
 * type round-trip, with NULL data on the way back. */
static void test_empty_payload(void **state)
{
    struct fixture *f = *state;
    struct raft_entry es[3];
    struct raft_entry *got = NULL;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    make_entries(es, 1, 3, 2, 0);
    es[0].type = RAFT_ENTRY_NOOP;
    es[2].data = raft_buf_new(0);
    assert_non_null(es[2].data);
    assert_int_equal(lmdb_log_append(f->log, NULL, es, 3), 0);
    reopen_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_entries(f->log, 1, 3, 0, &got, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(got[0].type, RAFT_ENTRY_NOOP);
    assert_int_equal(got[1].type, RAFT_ENTRY_NORMAL);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(got[i].index, i + 1);
        assert_int_equal(got[i].term, 2);
        assert_null(got[i].data);
    }
    lmdb_log_entries_free(got, n);
    drop_entries(es, 3);
}

/* A 1 MiB payload between small ones round-trips, also after reopening. */
static void test_large_payload(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 2, 1, 10), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 3, 1, 1, MIB), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 4, 2, 1, 10), 0);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* Appends five entries whose payloads are the given texts, in one append. */
static void append_texts(struct lmdb_log *l, const char *const *texts,
                         unsigned n)
{
    struct raft_entry es[8];

    assert_true(n <= 8);
    for (unsigned i = 0; i < n; i++) {
        es[i].index = i + 1;
        es[i].term = 1;
        es[i].type = RAFT_ENTRY_NORMAL;
        es[i].data = raft_buf_copy(texts[i], strlen(texts[i]));
        assert_non_null(es[i].data);
    }
    assert_int_equal(lmdb_log_append(l, NULL, es, n), 0);
    drop_entries(es, n);
}

/* A flipped payload byte in data.mdb is caught by the checksum: reading
 * that index gives RAFT_CORRUPT naming it; its neighbours still read. */
static void test_checksum_mismatch(void **state)
{
    struct fixture *f = *state;
    static const char *const texts[] = {
        "plain-payload-one", "plain-payload-two", "CORRUPT-ME-PAYLOAD-3",
        "plain-payload-four", "plain-payload-five"};
    struct raft_entry *es = NULL;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    append_texts(f->log, texts, 5);
    lmdb_log_close(f->log);
    f->log = NULL;
    assert_true(patch_data_file(f->dir, texts[2], strlen(texts[2]), 11, 0x20) >=
                1);
    open_log(f, DEFAULT_MAX);

    assert_int_equal(lmdb_log_entries(f->log, 3, 3, 0, &es, &n), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "index 3"));
    assert_true(contains(lmdb_log_errmsg(f->log), "checksum"));
    assert_int_equal(lmdb_log_entries(f->log, 1, 5, 0, &es, &n), RAFT_CORRUPT);
    assert_null(es);
    assert_int_equal(lmdb_log_entries(f->log, 1, 2, 0, &es, &n), 0);
    assert_int_equal(n, 2);
    lmdb_log_entries_free(es, n);
    assert_int_equal(lmdb_log_entries(f->log, 4, 5, 0, &es, &n), 0);
    assert_int_equal(n, 2);
    lmdb_log_entries_free(es, n);
}

/* Two values of the same term and size swapped between their keys in
 * data.mdb fail the check: the checksum binds a value to its index. */
static void test_value_moved_to_other_key(void **state)
{
    struct fixture *f = *state;
    static const char *const texts[] = {
        "SWAP-FIRST-AAAAAAAA", "SWAP-SECOND-BBBBBBB", "untouched-third"};
    char path[300];
    size_t len;
    size_t a;
    size_t b;
    size_t vlen = 21 + strlen(texts[0]);
    uint8_t tmp[64];
    uint8_t *buf;
    struct raft_entry *es = NULL;
    unsigned n = 0;

    assert_int_equal(strlen(texts[0]), strlen(texts[1]));
    open_log(f, DEFAULT_MAX);
    append_texts(f->log, texts, 3);
    lmdb_log_close(f->log);
    f->log = NULL;

    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    buf = slurp(path, &len);
    assert_int_equal(find_all(buf, len, texts[0], strlen(texts[0]), &a, 1), 1);
    assert_int_equal(find_all(buf, len, texts[1], strlen(texts[1]), &b, 1), 1);
    /* A value starts 13 bytes before its payload (term, type, length). */
    a -= 13;
    b -= 13;
    memcpy(tmp, buf + a, vlen);
    memcpy(buf + a, buf + b, vlen);
    memcpy(buf + b, tmp, vlen);
    spill(path, buf, len);
    free(buf);

    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_entries(f->log, 1, 1, 0, &es, &n), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "index 1"));
    assert_int_equal(lmdb_log_entries(f->log, 2, 2, 0, &es, &n), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "index 2"));
    assert_int_equal(lmdb_log_entries(f->log, 3, 3, 0, &es, &n), 0);
    assert_int_equal(n, 1);
    lmdb_log_entries_free(es, n);
}

/* A flipped byte in the stored term makes open fail with RAFT_CORRUPT,
 * naming the record, instead of handing out a wrong term. */
static void test_corrupt_meta(void **state)
{
    struct fixture *f = *state;
    struct raft_hard_state hs = {0x1122334455667788ull, 2};
    static const uint8_t pat[] = {'t',  'e',  'r',  'm',  0x88, 0x77,
                                  0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
    struct lmdb_log *l = (void *)1;
    char msg[256] = "";

    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_append(f->log, &hs, NULL, 0), 0);
    lmdb_log_close(f->log);
    f->log = NULL;
    assert_true(patch_data_file(f->dir, pat, sizeof pat, 5, 0x01) >= 1);
    assert_int_equal(lmdb_log_open(f->dir, DEFAULT_MAX, &l, msg, sizeof msg),
                     RAFT_CORRUPT);
    assert_ptr_equal(l, (void *)1);
    assert_true(contains(msg, "\"term\""));
}

/* The map starts small and doubles on MDB_MAP_FULL, within one append
 * too, without losing or half-writing anything; reopening keeps it all. */
static void test_map_growth(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    char msg[256] = "";
    uint64_t map0;
    uint64_t map;

    assert_int_equal(lmdb_log_open_sized(f->dir, 32 * 1024, DEFAULT_MAX,
                                         &f->log, msg, sizeof msg),
                     0);
    map0 = lmdb_log_map_bytes(f->log);
    assert_true(map0 < 1 * MIB);
    /* One append far larger than the map: several doublings in one call. */
    assert_int_equal(append_gen(f->log, m, NULL, 1, 3, 1, 700 * 1024), 0);
    map = lmdb_log_map_bytes(f->log);
    assert_true(map >= 2 * MIB);
    assert_true(map <= lmdb_log_max_bytes(f->log));
    model_check(f->log, m);
    for (unsigned i = 0; i < 20; i++) {
        assert_int_equal(
            append_gen(f->log, m, NULL, m->last + 1, 4, 2, 40 * 1024), 0);
    }
    assert_true(lmdb_log_map_bytes(f->log) > map);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* With a 1 MiB ceiling appends eventually fail with RAFT_NOSPACE and a
 * "log full" message naming log_max_mb; the failed appends (including one
 * whose hard state and conflicting suffix would have changed the log) left
 * nothing behind; the hard state alone and truncation still work, and the
 * freed space takes new entries. */
static void test_log_full(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_hard_state hs = {1, 1};
    struct raft_hard_state big_hs;
    int rc = 0;
    unsigned i;

    open_log(f, 1 * MIB);
    for (i = 0; i < 1000; i++) {
        hs.term = i + 1;
        rc = append_gen(f->log, m, &hs, m->last + 1, 4, hs.term, 3000);
        if (rc != 0) {
            break;
        }
    }
    assert_int_equal(rc, RAFT_NOSPACE);
    assert_true(i > 10);
    assert_true(contains(lmdb_log_errmsg(f->log), "log full"));
    assert_true(contains(lmdb_log_errmsg(f->log), "log_max_mb"));
    model_check(f->log, m);

    /* Certain to fail: 1.2 MiB over the last 3 entries, with a new term. */
    big_hs.term = 1000;
    big_hs.vote = 3;
    assert_int_equal(
        append_gen(f->log, m, &big_hs, m->last - 2, 3, 1000, 400 * 1024),
        RAFT_NOSPACE);
    model_check(f->log, m);
    reopen_log(f, 1 * MIB);
    model_check(f->log, m);

    /* Term and vote still persist, so the node can keep voting. */
    hs.term = 2000;
    hs.vote = 2;
    assert_int_equal(append_gen(f->log, m, &hs, 1, 0, 0, 0), 0);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_truncate_suffix(f->log, m->last / 2), 0);
    model_truncate(m, m->last / 2);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, m->last + 1, 4, 2000, 3000),
                     0);
    reopen_log(f, 1 * MIB);
    model_check(f->log, m);
}

/* Gaps after the log, non-consecutive indexes and index 0 are refused
 * with RAFT_INVALID, and the refused call changes nothing (not even the
 * hard state it carried). A too small ceiling is refused at open. */
static void test_invalid_args(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_hard_state hs = {9, 9};
    struct raft_entry es[3];
    struct lmdb_log *l = (void *)1;
    char msg[256] = "";

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 5, 1, 8), 0);

    assert_int_equal(append_gen(f->log, m, &hs, 7, 2, 1, 8), RAFT_INVALID);
    assert_true(contains(lmdb_log_errmsg(f->log), "gap"));
    model_check(f->log, m);

    make_entries(es, 6, 3, 1, 8);
    es[2].index = 9;
    assert_int_equal(lmdb_log_append(f->log, &hs, es, 3), RAFT_INVALID);
    assert_true(contains(lmdb_log_errmsg(f->log), "consecutive"));
    es[1].index = 6;
    es[2].index = 7;
    assert_int_equal(lmdb_log_append(f->log, &hs, es, 3), RAFT_INVALID);
    drop_entries(es, 3);
    model_check(f->log, m);

    assert_int_equal(append_gen(f->log, m, &hs, 0, 1, 1, 8), RAFT_INVALID);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_truncate_suffix(f->log, 1), 0);
    model_truncate(m, 1);
    assert_int_equal(append_gen(f->log, m, NULL, 2, 1, 1, 8), RAFT_INVALID);
    model_check(f->log, m);

    lmdb_log_close(f->log);
    f->log = NULL;
    assert_int_equal(lmdb_log_open(f->dir, 4096, &l, msg, sizeof msg),
                     RAFT_INVALID);
    assert_ptr_equal(l, (void *)1);
    assert_true(contains(msg, "log_max_mb"));
}

/* A log written by an unknown format version is refused with RAFT_FORMAT
 * and a message naming both versions. */
static void test_unknown_format(void **state)
{
    struct fixture *f = *state;
    static const uint8_t pat[] = {'f', 'o', 'r', 'm', 'a', 't', 2, 0, 0, 0};
    struct lmdb_log *l = (void *)1;
    char msg[256] = "";

    open_log(f, DEFAULT_MAX);
    lmdb_log_close(f->log);
    f->log = NULL;
    /* Version 2 becomes version 3. */
    assert_true(patch_data_file(f->dir, pat, sizeof pat, 6, 0x01) >= 1);
    assert_int_equal(lmdb_log_open(f->dir, DEFAULT_MAX, &l, msg, sizeof msg),
                     RAFT_FORMAT);
    assert_ptr_equal(l, (void *)1);
    assert_true(contains(msg, "version 3"));
    assert_true(contains(msg, "version 2"));
}

/* Open creates a missing directory with mode 0700 and fails with
 * RAFT_IOERR (and a message) when it cannot. */
static void test_open_directory(void **state)
{
    struct fixture *f = *state;
    struct lmdb_log *l = (void *)1;
    char sub[300];
    char bad[320];
    char msg[256] = "";
    struct stat st;
    FILE *fp;

    snprintf(sub, sizeof sub, "%s/node1", f->dir);
    assert_int_equal(lmdb_log_open(sub, DEFAULT_MAX, &l, msg, sizeof msg), 0);
    lmdb_log_close(l);
    assert_int_equal(stat(sub, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);

    l = (void *)1;
    snprintf(bad, sizeof bad, "%s/missing/node2", f->dir);
    assert_int_equal(lmdb_log_open(bad, DEFAULT_MAX, &l, msg, sizeof msg),
                     RAFT_IOERR);
    assert_ptr_equal(l, (void *)1);
    assert_true(contains(msg, "mkdir"));

    snprintf(bad, sizeof bad, "%s/file", f->dir);
    fp = fopen(bad, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(lmdb_log_open(bad, DEFAULT_MAX, &l, msg, sizeof msg),
                     RAFT_IOERR);
    assert_ptr_equal(l, (void *)1);
    assert_true(msg[0] != '\0');
}

/* What the reader thread of test_concurrent_reads shares with the test. */
struct reader {
    struct lmdb_log *log; /* the log being written */
    atomic_bool stop;     /* set when the writer is done */
    unsigned n_reads;     /* successful full reads */
    int failure;          /* first unexpected result, 0 if none */
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    struct raft_entry *es;
    raft_index first;
    raft_index last;
    unsigned n;

    while (!atomic_load(&r->stop) && r->failure == 0) {
        if (lmdb_log_bounds(r->log, &first, &last) != 0 ||
            lmdb_log_entries(r->log, first, last, 0, &es, &n) != 0) {
            r->failure = 1;
            break;
        }
        for (unsigned i = 0; i < n; i++) {
            const struct raft_entry *e = &es[i];
            if (e->data == NULL || e->data->len != 16 * 1024 ||
                e->data->data[100] != payload_byte(e->index, 1, 100)) {
                r->failure = 2;
            }
        }
        lmdb_log_entries_free(es, n);
        r->n_reads++;
    }
    return NULL;
}

/* Readers on another thread see consistent entries while the writer
 * appends and the map grows (is remapped) several times under them. */
static void test_concurrent_reads(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct reader r = {0};
    pthread_t th;
    char msg[256] = "";
    uint64_t map0;

    assert_int_equal(lmdb_log_open_sized(f->dir, 64 * 1024, DEFAULT_MAX,
                                         &f->log, msg, sizeof msg),
                     0);
    map0 = lmdb_log_map_bytes(f->log);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 1, 1, 16 * 1024), 0);
    r.log = f->log;
    atomic_init(&r.stop, false);
    assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
    for (unsigned i = 0; i < 50; i++) {
        assert_int_equal(
            append_gen(f->log, m, NULL, m->last + 1, 4, 1, 16 * 1024), 0);
    }
    atomic_store(&r.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.failure, 0);
    assert_true(r.n_reads > 0);
    assert_true(lmdb_log_map_bytes(f->log) >= 32 * map0);
    model_check(f->log, m);
}

/* ---- Compaction, snapshot boundary, reset ------------------------------ */

/* Compaction deletes the prefix through an index and records it as the
 * boundary with that entry's term; bounds start after it; reads below it
 * give RAFT_COMPACTED; compacting at or below the boundary changes
 * nothing; past the last index is refused; it all survives reopening. */
static void test_compact_prefix(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_entry *es = (void *)1;
    raft_index first;
    raft_index last;
    raft_index snap;
    raft_term snap_term;
    unsigned n = 7;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_snapshot(f->log, &snap, &snap_term), 0);
    assert_int_equal(snap, 0);
    assert_int_equal(snap_term, 0);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 4, 1, 50), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 5, 4, 2, 50), 0);
    assert_int_equal(append_gen(f->log, m, NULL, 9, 12, 3, 50), 0);
    assert_int_equal(lmdb_log_compact(f->log, 0), 0);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_compact(f->log, 6), 0);
    model_compact(m, 6);
    assert_int_equal(m->snap_term, 2);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_bounds(f->log, &first, &last), 0);
    assert_int_equal(first, 7);
    assert_int_equal(last, 20);

    assert_int_equal(lmdb_log_entries(f->log, 3, 9, 0, &es, &n),
                     RAFT_COMPACTED);
    assert_true(contains(lmdb_log_errmsg(f->log), "compacted"));
    assert_int_equal(lmdb_log_entries(f->log, 6, 6, 0, &es, &n),
                     RAFT_COMPACTED);
    assert_ptr_equal(es, (void *)1);
    assert_int_equal(n, 7);
    assert_int_equal(lmdb_log_entries(f->log, 7, 21, 0, &es, &n),
                     RAFT_NOTFOUND);

    /* At or below the boundary: nothing changes. */
    assert_int_equal(lmdb_log_compact(f->log, 6), 0);
    assert_int_equal(lmdb_log_compact(f->log, 2), 0);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_compact(f->log, 21), RAFT_INVALID);
    assert_true(contains(lmdb_log_errmsg(f->log), "21"));
    model_check(f->log, m);

    /* Committed entries below the boundary cannot be truncated away. */
    assert_int_equal(lmdb_log_truncate_suffix(f->log, 6), RAFT_INVALID);
    assert_true(contains(lmdb_log_errmsg(f->log), "boundary"));
    model_check(f->log, m);
    /* Appends may not start below the first index. */
    assert_int_equal(append_gen(f->log, m, NULL, 6, 2, 4, 5), RAFT_INVALID);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_compact(f->log, 12), 0);
    model_compact(m, 12);
    assert_int_equal(m->snap_term, 3);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    /* A conflicting suffix right after the boundary still replaces. */
    assert_int_equal(append_gen(f->log, m, NULL, 13, 3, 4, 9), 0);
    model_check(f->log, m);
}

/* Compacting every entry leaves an empty log whose first index is the
 * boundary + 1; truncating what follows the boundary does too; both take
 * an append at exactly boundary + 1 and refuse a gap. */
static void test_compact_all_then_append(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    raft_index first;
    raft_index last;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 10, 2, 30), 0);
    assert_int_equal(lmdb_log_compact(f->log, 10), 0);
    model_compact(m, 10);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_bounds(f->log, &first, &last), 0);
    assert_int_equal(first, 11);
    assert_int_equal(last, 10);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 12, 1, 2, 5), RAFT_INVALID);
    assert_true(contains(lmdb_log_errmsg(f->log), "gap"));
    assert_int_equal(append_gen(f->log, m, NULL, 11, 5, 3, 30), 0);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_truncate_suffix(f->log, 11), 0);
    model_truncate(m, 11);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_bounds(f->log, &first, &last), 0);
    assert_int_equal(first, 11);
    assert_int_equal(last, 10);
    assert_int_equal(append_gen(f->log, m, NULL, 11, 2, 4, 30), 0);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* reset empties the log and sets the boundary of an installed snapshot
 * (ahead of or behind the log), so that appends continue right after it;
 * mismatched arguments are refused and change nothing. */
static void test_reset(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_hard_state hs = {7, 3};
    struct raft_entry *es = NULL;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, &hs, 1, 10, 1, 40), 0);
    assert_int_equal(lmdb_log_compact(f->log, 4), 0);
    model_compact(m, 4);

    assert_int_equal(lmdb_log_reset(f->log, 5, 0), RAFT_INVALID);
    assert_int_equal(lmdb_log_reset(f->log, 0, 5), RAFT_INVALID);
    assert_int_equal(lmdb_log_reset(f->log, UINT64_MAX, 5), RAFT_INVALID);
    model_check(f->log, m);

    assert_int_equal(lmdb_log_reset(f->log, 100, 6), 0);
    model_reset(m, 100, 6);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_entries(f->log, 50, 50, 0, &es, &n),
                     RAFT_COMPACTED);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    assert_int_equal(append_gen(f->log, m, NULL, 101, 3, 7, 40), 0);
    model_check(f->log, m);

    /* A snapshot behind the log replaces it all the same. */
    assert_int_equal(lmdb_log_reset(f->log, 50, 5), 0);
    model_reset(m, 50, 5);
    assert_int_equal(append_gen(f->log, m, NULL, 51, 2, 7, 40), 0);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* A seeded random mix of appends, truncations, compactions, resets and
 * reopens always reads back exactly what the model expects. */
static void test_compact_random(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    uint64_t seed = test_seed(20261129);
    uint64_t s = seed | 1;
    raft_term term = 1;

    open_log(f, DEFAULT_MAX);
    for (unsigned step = 0; step < 200; step++) {
        unsigned op = (unsigned)(next_rand(&s) % 100);
        if (op < 50) {
            raft_index lo = m->last > m->snap + 4 ? m->last - 4 : m->snap + 1;
            raft_index start = lo + next_rand(&s) % (m->last + 2 - lo);
            unsigned n = 1 + (unsigned)(next_rand(&s) % 8);
            if (next_rand(&s) % 5 == 0) {
                term++;
            }
            assert_int_equal(append_gen(f->log, m, NULL, start, n, term,
                                        (size_t)(next_rand(&s) % 200)),
                             0);
        } else if (op < 60 && m->last > m->snap) {
            raft_index at = m->snap + 1 + next_rand(&s) % (m->last - m->snap);
            assert_int_equal(lmdb_log_truncate_suffix(f->log, at), 0);
            model_truncate(m, at);
        } else if (op < 85) {
            raft_index at = next_rand(&s) % (m->last + 1);
            assert_int_equal(lmdb_log_compact(f->log, at), 0);
            model_compact(m, at);
        } else if (op < 90) {
            raft_index at = m->last + next_rand(&s) % 10;
            if (at == 0) {
                at = 1;
            }
            assert_int_equal(lmdb_log_reset(f->log, at, term), 0);
            model_reset(m, at, term);
        } else {
            reopen_log(f, DEFAULT_MAX);
        }
        model_check(f->log, m);
    }
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* The size of the data file of @dir, bytes. */
static uint64_t data_file_size(const char *dir)
{
    char path[300];
    struct stat st;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* Under a steady load with periodic compaction LMDB reuses the freed pages:
 * over 100 rounds that append 128 KiB each (12.5 MiB in all) and compact
 * all but 256 entries, the data file never grows past 1.5x its size after
 * the first 25 rounds (and stays well below what was written), and the
 * retained entries read back intact. */
static void test_compaction_bounds_file(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    uint64_t early = 0;
    uint64_t size = 0;
    uint64_t biggest = 0;

    open_log(f, DEFAULT_MAX);
    for (unsigned round = 0; round < 100; round++) {
        assert_int_equal(append_gen(f->log, m, NULL, m->last + 1, 128, 1, 1024),
                         0);
        if (m->last > 256) {
            assert_int_equal(lmdb_log_compact(f->log, m->last - 256), 0);
            model_compact(m, m->last - 256);
        }
        size = data_file_size(f->dir);
        if (round == 24) {
            early = size;
        }
        if (round >= 25 && size > biggest) {
            biggest = size;
        }
    }
    print_message(
        "data.mdb: %llu bytes after 25 rounds, at most %llu "
        "after 100 (%llu bytes of payload appended)\n",
        (unsigned long long)early, (unsigned long long)biggest,
        (unsigned long long)(100ull * 128 * 1024));
    assert_true(early > 0);
    assert_true(biggest <= early + early / 2);
    assert_true(biggest < 100ull * 128 * 1024 / 8);
    model_check(f->log, m);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* With a 1 MiB ceiling: appends fail with RAFT_NOSPACE ("log full"),
 * reads keep working while full, and compaction frees space so that
 * appends work again, several times over. */
static void test_log_full_compaction(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    struct raft_entry *es = NULL;
    unsigned n = 0;
    int rc = 0;

    open_log(f, 1 * MIB);
    for (unsigned cycle = 0; cycle < 3; cycle++) {
        unsigned added = 0;
        for (unsigned i = 0; i < 1000; i++) {
            rc = append_gen(f->log, m, NULL, m->last + 1, 8, 1 + cycle, 3000);
            if (rc != 0) {
                break;
            }
            added++;
        }
        assert_int_equal(rc, RAFT_NOSPACE);
        assert_true(added > 10);
        assert_true(contains(lmdb_log_errmsg(f->log), "log full"));

        /* Reads keep working while the log is full. */
        model_check(f->log, m);
        assert_int_equal(lmdb_log_entries(f->log, m->last, m->last, 0, &es, &n),
                         0);
        assert_int_equal(n, 1);
        lmdb_log_entries_free(es, n);

        assert_int_equal(lmdb_log_compact(f->log, m->last - 8), 0);
        model_compact(m, m->last - 8);
        model_check(f->log, m);
        assert_int_equal(
            append_gen(f->log, m, NULL, m->last + 1, 4, 1 + cycle, 3000), 0);
        model_check(f->log, m);
    }
    reopen_log(f, 1 * MIB);
    model_check(f->log, m);
}

/* A corrupt entry in a compacted log: the message names its index, the
 * entries before it still read, and compacting through it is refused
 * (its term cannot be trusted) without deleting anything; compacting up to
 * just before it works. */
static void test_corrupt_entry_compacted_log(void **state)
{
    struct fixture *f = *state;
    static const char *const texts[] = {"entry-one-xxxxxx", "entry-two-xxxxxx",
                                        "entry-three-xxxx", "entry-four-xxxxx",
                                        "entry-five-xxxxx", "BROKEN-SIX-xxxxx",
                                        "entry-seven-xxxx", "entry-eight-xxxx"};
    struct raft_entry *es = NULL;
    raft_index snap;
    raft_term snap_term;
    unsigned n = 0;

    open_log(f, DEFAULT_MAX);
    append_texts(f->log, texts, 8);
    assert_int_equal(lmdb_log_compact(f->log, 2), 0);
    lmdb_log_close(f->log);
    f->log = NULL;
    assert_true(patch_data_file(f->dir, texts[5], strlen(texts[5]), 3, 0x04) >=
                1);
    open_log(f, DEFAULT_MAX);

    assert_int_equal(lmdb_log_entries(f->log, 3, 8, 0, &es, &n), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "index 6"));
    assert_true(contains(lmdb_log_errmsg(f->log), "checksum"));
    assert_null(es);
    assert_int_equal(lmdb_log_entries(f->log, 3, 5, 0, &es, &n), 0);
    assert_int_equal(n, 3);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(es[i].index, 3 + i);
        assert_int_equal(es[i].data->len, strlen(texts[2 + i]));
        assert_memory_equal(es[i].data->data, texts[2 + i],
                            strlen(texts[2 + i]));
    }
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_compact(f->log, 6), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "index 6"));
    assert_int_equal(lmdb_log_snapshot(f->log, &snap, &snap_term), 0);
    assert_int_equal(snap, 2);
    assert_int_equal(snap_term, 1);
    assert_int_equal(lmdb_log_entries(f->log, 3, 3, 0, &es, &n), 0);
    lmdb_log_entries_free(es, n);

    assert_int_equal(lmdb_log_compact(f->log, 5), 0);
    assert_int_equal(lmdb_log_entries(f->log, 7, 8, 0, &es, &n), 0);
    assert_int_equal(n, 2);
    lmdb_log_entries_free(es, n);
}

/* A new log has no cluster id; one stored survives reopening, changes no
 * other record, and a log missing half of it is refused as corrupt. */
static void test_cluster_id(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    static const uint8_t zero[LMDB_LOG_CLUSTER_ID_LEN] = {0};
    static const char half_key[] = "cluster_id_1";
    uint8_t id[LMDB_LOG_CLUSTER_ID_LEN], got[LMDB_LOG_CLUSTER_ID_LEN];

    for (unsigned i = 0; i < sizeof id; i++) {
        id[i] = (uint8_t)(0xa0 + i);
    }
    open_log(f, DEFAULT_MAX);
    memset(got, 0xff, sizeof got);
    assert_int_equal(lmdb_log_cluster_id(f->log, got), 0);
    assert_memory_equal(got, zero, sizeof got);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 5, 1, 20), 0);
    assert_int_equal(lmdb_log_set_cluster_id(f->log, id), 0);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_cluster_id(f->log, got), 0);
    assert_memory_equal(got, id, sizeof got);
    lmdb_log_close(f->log);
    f->log = NULL;
    /* Rename the second half's key: it is not found. */
    assert_true(patch_data_file(f->dir, half_key, strlen(half_key), 11,
                                '1' ^ '9') >= 1);
    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_cluster_id(f->log, got), RAFT_CORRUPT);
    assert_true(contains(lmdb_log_errmsg(f->log), "\"cluster_id_1\""));
}

/* A new log belongs to no server; the id stored survives reopening and
 * changes no other record. */
static void test_server_id(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    uint64_t got = 99;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_server_id(f->log, &got), 0);
    assert_true(got == 0);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 5, 1, 20), 0);
    assert_int_equal(lmdb_log_set_server_id(f->log, 3), 0);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    assert_int_equal(lmdb_log_server_id(f->log, &got), 0);
    assert_true(got == 3);
}

/* A version 1 log (no snapshot records) opens, reads as having no
 * snapshot, and is upgraded to version 2 on disk. */
static void test_upgrade_version_1(void **state)
{
    struct fixture *f = *state;
    struct model *m = &f->m;
    static const uint8_t v2[] = {'f', 'o', 'r', 'm', 'a', 't', 2, 0, 0, 0};
    static const char idx_key[] = "snapshot_index";
    static const char term_key[] = "snapshot_term";
    char path[300];
    size_t len;
    size_t at;
    uint8_t *buf;

    open_log(f, DEFAULT_MAX);
    assert_int_equal(append_gen(f->log, m, NULL, 1, 5, 1, 20), 0);
    lmdb_log_close(f->log);
    f->log = NULL;
    /* Make it look like version 1: format 1 and the two snapshot records
     * renamed (keeping the key order) so that they are not found. */
    assert_true(patch_data_file(f->dir, v2, sizeof v2, 6, 0x03) >= 1);
    assert_true(
        patch_data_file(f->dir, idx_key, strlen(idx_key), 13, 'x' ^ 'y') >= 1);
    assert_true(patch_data_file(f->dir, term_key, strlen(term_key), 12,
                                'm' ^ 'n') >= 1);
    open_log(f, DEFAULT_MAX);
    model_check(f->log, m);
    lmdb_log_close(f->log);
    f->log = NULL;
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    buf = slurp(path, &len);
    assert_true(find_all(buf, len, v2, sizeof v2, &at, 1) >= 1);
    free(buf);
    open_log(f, DEFAULT_MAX);
    assert_int_equal(lmdb_log_compact(f->log, 3), 0);
    model_compact(m, 3);
    reopen_log(f, DEFAULT_MAX);
    model_check(f->log, m);
}

/* lmdb_log_defragment keeps every entry, the hard state and the boundary,
 * and ends a log that is full though nearly empty (a log of 2 MiB
 * refused a 600 KiB entry while it held one): LMDB reuses the pages
 * a write frees only two writes later and keeps a large value in
 * consecutive pages, so appending and compacting large entries one after
 * the other runs out of map; a compacted rewrite frees it all. */
static void test_defragment(void **state)
{
    struct fixture *f = *state;
    struct raft_hard_state hs = {.term = 2, .vote = 1};
    uint64_t used = 0, budget = 0;
    raft_index next = 1;
    int rc = 0;

    open_log(f, 2u << 20);
    for (int round = 0; round < 20; round++) {
        rc = append_gen(f->log, &f->m, &hs, next, 1, 2, 600 * 1024);
        if (rc != 0) {
            break;
        }
        if (next > 1) {
            assert_int_equal(lmdb_log_compact(f->log, next - 1), 0);
            model_compact(&f->m, next - 1);
        }
        next++;
    }
    assert_int_equal(rc, RAFT_NOSPACE);
    assert_int_equal(lmdb_log_usage(f->log, &used, &budget), 0);
    assert_true(used < budget / 2);
    model_check(f->log, &f->m);
    assert_int_equal(lmdb_log_defragment(f->log), 0);
    model_check(f->log, &f->m);
    /* The refused entry fits now, and more after it. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lmdb_log_compact(f->log, next - 1), 0);
        model_compact(&f->m, next - 1);
        rc = append_gen(f->log, &f->m, NULL, next, 1, 2, 600 * 1024);
        if (rc == RAFT_NOSPACE) {
            assert_int_equal(lmdb_log_defragment(f->log), 0);
            rc = append_gen(f->log, &f->m, NULL, next, 1, 2, 600 * 1024);
        }
        assert_int_equal(rc, 0);
        next++;
    }
    model_check(f->log, &f->m);
    reopen_log(f, 2u << 20);
    model_check(f->log, &f->m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_read_range, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_entries_max_bytes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conflicting_append, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_truncate_suffix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checksum_mismatch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_value_moved_to_other_key, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compact_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compact_all_then_append, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compact_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_bounds_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_full_compaction, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entry_compacted_log, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defragment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upgrade_version_1, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
