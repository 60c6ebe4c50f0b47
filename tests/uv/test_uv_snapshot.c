/* Unit tests of snapshot streaming (raft/uv_snapshot.c): the follower
 * receiving chunks into a temporary file, verifying and installing it
 * through the storage; the leader creating a snapshot and streaming it in
 * checksummed chunks within a window, with its stall, abort, unreachable
 * and lost-leadership paths; repairs (REPAIR_REQUEST answered with a fresh
 * snapshot, an install at a handed-out index reported as a compaction).
 * A real core and driver run on the fakes of
 * tests/uv/fake.h; the test plays the peer, or links two drivers. */

#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "tests/uv/fake.h"

static const raft_id TWO[] = {1, 2};
static const raft_id PEER_1[] = {1};
static const raft_id PEER_2[] = {2};

/* A snapshot file as a leader would send it. */
struct file {
    uint8_t bytes[4096]; /* its content */
    size_t len;          /* bytes */
    uint64_t sum;        /* XXH64 of them */
};

static void make_file(struct file *fl, size_t len, uint8_t seed)
{
    assert_true(len <= sizeof fl->bytes);
    for (size_t i = 0; i < len; i++) {
        fl->bytes[i] = (uint8_t)(seed + i * 7);
    }
    fl->len = len;
    fl->sum = XXH64(fl->bytes, len, 0);
}

/* inject_chunk sends the follower @f the chunk of @fl at @offset, @len
 * bytes long, from leader 1 in @term, with checksum @sum, of a snapshot
 * through (@index, @last_term). */
static void inject_chunk(struct fake *f, raft_term term, raft_index index,
                         raft_term last_term, const struct file *fl,
                         uint64_t offset, size_t len, uint64_t sum)
{
    struct raft_frame fr;
    memset(&fr, 0, sizeof fr);
    fr.type = RAFT_FRAME_SNAPSHOT_CHUNK;
    fr.from = 1;
    fr.to = f->id;
    fr.snapshot_chunk.term = term;
    fr.snapshot_chunk.last_index = index;
    fr.snapshot_chunk.last_term = last_term;
    fr.snapshot_chunk.total = fl->len;
    fr.snapshot_chunk.offset = offset;
    fr.snapshot_chunk.checksum = sum;
    if (len > 0) {
        fr.snapshot_chunk.data = raft_buf_copy(fl->bytes + offset, len);
        assert_non_null(fr.snapshot_chunk.data);
    }
    fake_inject(f, &fr);
    raft_buf_unref(fr.snapshot_chunk.data);
}

/* send_file sends the whole of @fl in chunks of 1000 bytes. */
static void send_file(struct fake *f, raft_term term, raft_index index,
                      raft_term last_term, const struct file *fl, uint64_t sum)
{
    for (uint64_t off = 0; off < fl->len; off += 1000) {
        size_t len = fl->len - off < 1000 ? fl->len - off : 1000;
        inject_chunk(f, term, index, last_term, fl, off, len, sum);
    }
}

/* result returns the @nth (0-based) chunk result the driver sent, NULL
 * when none (mutex held). */
static const struct raft_snapshot_chunk_result *result(const struct fake *f,
                                                       unsigned nth)
{
    for (unsigned i = 0; i < f->n_sent; i++) {
        if (f->sent[i].f.type == RAFT_FRAME_SNAPSHOT_CHUNK_RESULT &&
            nth-- == 0) {
            return &f->sent[i].f.snapshot_chunk_result;
        }
    }
    return NULL;
}

/* is_result says whether the @nth chunk result is (@offset, @status). */
static bool is_result(const struct fake *f, unsigned nth, uint64_t offset,
                      int status)
{
    const struct raft_snapshot_chunk_result *r = result(f, nth);
    return r != NULL && r->offset == offset && r->status == status;
}

/* append_at returns the first append call whose first entry is @first
 * (mutex held). */
static const struct fake_call *append_at(const struct fake *f, raft_index first)
{
    for (unsigned i = 0; i < f->n_calls; i++) {
        if (f->calls[i].op == FAKE_APPEND && f->calls[i].first == first) {
            return &f->calls[i];
        }
    }
    return NULL;
}

/* n_files counts the files in directory @dir. */
static unsigned n_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    }
    closedir(d);
    return n;
}

/* wait_files waits up to FAKE_WAIT_MS for directory @dir to hold @n
 * files: the driver removes snapshot files on its thread pool
 * (raft/uv_remove.c), after the event a test waits for. */
static void wait_files(const char *dir, unsigned n)
{
    struct timespec dl, nap = {.tv_sec = 0, .tv_nsec = 1000000};
    unsigned seen;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += FAKE_WAIT_MS / 1000;
    for (;;) {
        struct timespec now;
        if ((seen = n_files(dir)) == n) {
            return;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > dl.tv_sec ||
            (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) {
            break;
        }
        nanosleep(&nap, NULL);
    }
    fail_msg("%s holds %u files after %d ms, not %u", dir, seen, FAKE_WAIT_MS,
             n);
}

/* ---- Follower ------------------------------------------------------------ */

/* start_follower_with starts server 2 of {1, 2}, @f initialized
 * (fake_init); the test leads as 1. */
static void start_follower_with(struct fake *f, bool no_snapshots)
{
    struct fake_opts o = {
        .peers = PEER_1, .n_peers = 1, .no_snapshots = no_snapshots};
    fake_start(f, fake_core(2, TWO, 2, 60000), &o);
    FAKE_WAIT(f, f->obs.n_ticks > 0);
}

/* start_follower starts server 2 of {1, 2}; the test leads as 1. */
static void start_follower(struct fake *f, bool no_snapshots)
{
    fake_init(f, 2);
    start_follower_with(f, no_snapshots);
}

/* begin starts the follower and makes @fl, a file of 2500 bytes (three
 * chunks). */
static void begin(struct fake *f, struct file *fl, uint8_t seed)
{
    make_file(fl, 2500, seed);
    start_follower(f, false);
}

/* deliver sends @fl whole (in term 3, a snapshot through (10, 2)) with
 * checksum @sum, and waits for the answer to each of its three chunks. */
static void deliver(struct fake *f, const struct file *fl, uint64_t sum)
{
    unsigned n;
    fake_lock(f);
    n = fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT);
    fake_unlock(f);
    send_file(f, 3, 10, 2, fl, sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == n + 3);
}

/* A complete transfer is written to a temporary file, verified and
 * installed through the storage off the loop thread; the core then
 * acknowledges the snapshot to the leader (once the term it adopted is
 * durable) and takes entries after it. */
static void test_receive_and_install(void **state)
{
    struct fake *f = fake_a(state);
    const struct fake_sent *ack;
    const struct fake_call *c;
    struct file fl;
    begin(f, &fl, 1);
    deliver(f, &fl, fl.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 10);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_MSG_APPEND_ENTRIES_RESULT) == 1);
    fake_lock(f);
    assert_true(is_result(f, 0, 1000, 0) && is_result(f, 1, 2000, 0) &&
                is_result(f, 2, 2500, 0));
    assert_int_equal(result(f, 2)->last_index, 10);
    c = fake_last_call(f, FAKE_INSTALL);
    assert_true(c != NULL && c->rc == 0 && c->index == 10 && c->term == 2);
    assert_true(f->loop_known && !c->on_loop);
    assert_int_equal(f->installed_len, fl.len);
    assert_memory_equal(f->installed, fl.bytes, fl.len);
    ack = fake_last_sent(f, RAFT_MSG_APPEND_ENTRIES_RESULT);
    assert_non_null(ack);
    assert_true(ack->f.to == 1 && ack->seq > c->seq);
    /* The acknowledgement adopted term 3: it waited for it to be durable. */
    c = fake_last_call(f, FAKE_APPEND);
    assert_true(c != NULL && c->has_hs && c->hs.term == 3 && c->n == 0);
    assert_true(ack->seq > c->seq);
    assert_true(ack->f.message.append_entries_result.success);
    assert_int_equal(ack->f.message.append_entries_result.last_log_index, 10);
    assert_int_equal(ack->f.message.append_entries_result.term, 3);
    assert_int_equal(f->obs.stats.n_snapshots_installed, 1);
    assert_int_equal(
        fake_logged(f, RAFT_LOG_INFO, "installed snapshot at index 10 from 1"),
        1);
    fake_unlock(f);
    wait_files(f->dir, 0);

    fake_inject_append(f, 1, 3, 10, 2, "after", 11);
    FAKE_WAIT(f, f->n_applied == 1);
    FAKE_CHECK(f, fake_last_call(f, FAKE_APPEND)->first == 11 &&
                      fake_last_call(f, FAKE_APPEND)->rc == 0 &&
                      f->applied[0].index == 11 &&
                      strcmp(f->applied[0].data, "after") == 0);
}

/* The received file, as large as the database, is removed on the thread
 * pool once installed, never on the loop thread: on a file system
 * mounted with discard its unlink took over a second, without a
 * heartbeat (raft/uv_remove.c). Its name is free at once: while the
 * removal is held, a new transfer takes it. */
static void test_installed_file_removed_off_loop(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 1);
    fake_lock(f);
    f->hold_remove = true;
    fake_unlock(f);
    deliver(f, &fl, fl.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 10 && f->remove_held);
    inject_chunk(f, 3, 20, 2, &fl, 0, 1000, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 4);
    FAKE_CHECK(f, is_result(f, 3, 1000, 0) && f->remove_held);
    /* The file being removed, and the new transfer's. */
    assert_int_equal(n_files(f->dir), 2);
    fake_release_remove(f);
    wait_files(f->dir, 1);
    FAKE_CHECK(f, f->n_removes == 1 && f->n_removes_on_loop == 0);
}

/* What the loop thread saw of a file removed while a transfer reads it. */
struct held_seen {
    char path[PATH_MAX];
    bool renamed;      /* gone from its name at once */
    bool held;         /* kept for the transfer */
    bool queued;       /* a removal job was started */
    unsigned n_before; /* files in the directory then */
};

/* hold_for_transfer makes server 2's transfer slot 0 read a file of
 * 3000 bytes, then removes that file (on the loop thread). */
static void hold_for_transfer(struct fake *f, void *arg)
{
    struct held_seen *h = arg;
    struct raft_uv_snapshot_send *s = &f->d->sends[0];
    struct stat st;
    FILE *fp = fopen(h->path, "wb");
    int fd;
    /* No cmocka assertion here: this runs on the loop thread. */
    if (fp == NULL) {
        return;
    }
    for (int i = 0; i < 3000; i++) {
        fputc(i & 0xff, fp);
    }
    fclose(fp);
    fd = open(h->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    s->fd = fd;
    s->active = true;
    raft_uv_remove_file(f->d, h->path);
    h->renamed = stat(h->path, &st) != 0;
    h->held = f->d->held[0].used && stat(f->d->held[0].path, &st) == 0 &&
              st.st_size == 3000;
    h->queued = f->d->removal_running;
    h->n_before = n_files(f->dir);
}

/* A file a transfer still reads is renamed and held, never shortened
 * under it; once the transfer's descriptor is closed (here by the next
 * tick: a follower drops its transfers), it is removed as any other. */
static void test_file_read_by_transfer_held(void **state)
{
    struct fake *f = fake_a(state);
    struct held_seen h;
    struct file fl;
    begin(f, &fl, 1);
    memset(&h, 0, sizeof h);
    snprintf(h.path, sizeof h.path, "%s/snapshot-2-9.db", f->dir);
    fake_on_loop(f, hold_for_transfer, &h);
    assert_true(h.renamed && h.held && !h.queued);
    assert_int_equal(h.n_before, 1);
    wait_files(f->dir, 0);
    FAKE_CHECK(f, f->n_removes == 1 && f->n_removes_on_loop == 0);
}

/* A file an earlier life left half removed (killed between the rename
 * and the unlink) is removed at start, on the thread pool. */
static void test_leftover_removal_finished(void **state)
{
    struct fake *f = fake_a(state);
    char path[PATH_MAX];
    FILE *fp;
    fake_init(f, 2);
    snprintf(path, sizeof path, "%s/removing-2-1-1.db", f->dir);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("left by an earlier life", fp);
    fclose(fp);
    start_follower_with(f, false);
    wait_files(f->dir, 0);
    FAKE_CHECK(
        f, f->n_removes == 1 && f->n_removes_on_loop == 0 &&
               fake_logged(f, RAFT_LOG_INFO, "left by an earlier run") == 1);
}

/* A snapshot whose bytes do not match its checksum is refused without
 * reaching the storage, and the leader is told RAFT_CORRUPT; a good copy
 * sent again installs. */
static void test_bad_checksum_refused(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 2);
    deliver(f, &fl, fl.sum + 1);
    FAKE_CHECK(f, is_result(f, 0, 1000, 0) && is_result(f, 1, 2000, 0) &&
                      is_result(f, 2, 0, RAFT_CORRUPT));
    FAKE_CHECK(f, fake_n_calls(f, FAKE_INSTALL, -1) == 0);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN, "checksum mismatch") == 1 &&
                      fake_logged(f, RAFT_LOG_WARN, "snapshot refused") == 1);
    FAKE_CHECK(f, !f->obs.failed && f->obs.snapshot_index == 0);
    wait_files(f->dir, 0);

    send_file(f, 3, 10, 2, &fl, fl.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 10);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_INSTALL, 0) == 1);
}

/* A chunk out of order (no transfer begun, or not the next byte) is
 * answered RAFT_INVALID with the offset expected, and the transfer goes
 * on from there. */
static void test_out_of_order_chunk(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 3);
    inject_chunk(f, 3, 10, 2, &fl, 1000, 1000, fl.sum);
    inject_chunk(f, 3, 10, 2, &fl, 0, 1000, fl.sum);
    inject_chunk(f, 3, 10, 2, &fl, 2000, 500, fl.sum);
    inject_chunk(f, 3, 10, 2, &fl, 1000, 1000, fl.sum);
    inject_chunk(f, 3, 10, 2, &fl, 2000, 500, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 5);
    FAKE_CHECK(f, is_result(f, 0, 0, RAFT_INVALID) &&
                      is_result(f, 1, 1000, 0) &&
                      is_result(f, 2, 1000, RAFT_INVALID) &&
                      is_result(f, 3, 2000, 0) && is_result(f, 4, 2500, 0));
    FAKE_CHECK(f, f->obs.snapshot_index == 10);
}

/* A chunk of a term older than the follower's is answered
 * RAFT_NOTLEADER and nothing is written. */
static void test_stale_term_refused(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 4);
    fake_inject_append(f, 1, 5, 0, 0, NULL, 0);
    FAKE_WAIT(f, f->obs.term == 5);
    inject_chunk(f, 4, 10, 2, &fl, 0, 1000, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 1);
    FAKE_CHECK(f,
               is_result(f, 0, 0, RAFT_NOTLEADER) && result(f, 0)->term == 5);
    assert_int_equal(n_files(f->dir), 0);
}

/* A snapshot the storage refuses as corrupt leaves the driver running and
 * is reported to the leader with that code. */
static void test_install_refused_by_store(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 5);
    fake_fail(f, FAKE_INSTALL, RAFT_CORRUPT, 1);
    deliver(f, &fl, fl.sum);
    FAKE_CHECK(f, is_result(f, 2, 0, RAFT_CORRUPT));
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN,
                              "snapshot refused: fake: injected") == 1);
    FAKE_CHECK(f, !f->obs.failed && f->obs.snapshot_index == 0);
    send_file(f, 3, 10, 2, &fl, fl.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 10);
}

/* A snapshot the storage could not install without changing anything (a
 * full disk under the database: RAFT_BUSY) leaves the driver running and
 * is sent again (a full database disk during an install must not stop
 * the node until it is restarted). */
static void test_install_busy_retried(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 5);
    fake_fail(f, FAKE_INSTALL, RAFT_BUSY, 1);
    deliver(f, &fl, fl.sum);
    FAKE_CHECK(f, is_result(f, 2, 0, RAFT_BUSY));
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN,
                              "snapshot not installed, "
                              "the leader sends it again") == 1);
    FAKE_CHECK(f, !f->obs.failed && f->obs.snapshot_index == 0);
    send_file(f, 3, 10, 2, &fl, fl.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 10);
}

/* An install that fails with an I/O error stops the driver (the state
 * machine may be ahead of the log): an ERROR is logged, the leader gets
 * RAFT_IOERR, and later chunks are refused. */
static void test_install_failure_stops(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 6);
    fake_fail(f, FAKE_INSTALL, RAFT_IOERR, 1);
    deliver(f, &fl, fl.sum);
    FAKE_CHECK(f, is_result(f, 2, 0, RAFT_IOERR) && f->obs.failed);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_ERROR, "log write failed") == 1);
    inject_chunk(f, 3, 10, 2, &fl, 0, 1000, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 4);
    FAKE_CHECK(f, is_result(f, 3, 0, RAFT_INVALID));
}

/* Chunks that arrive while the install runs get no answer; the install's
 * own answer follows it. */
static void test_chunks_during_install_ignored(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 7);
    fake_hold(f, FAKE_INSTALL);
    send_file(f, 3, 10, 2, &fl, fl.sum);
    FAKE_WAIT(f, f->held[FAKE_INSTALL]);
    inject_chunk(f, 3, 10, 2, &fl, 0, 1000, fl.sum);
    fake_barrier(f);
    FAKE_CHECK(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 2);
    fake_release(f, FAKE_INSTALL);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 3);
    FAKE_CHECK(f, is_result(f, 2, 2500, 0) && f->obs.snapshot_index == 10);
}

/* A chunk at offset 0 of another snapshot restarts the transfer: chunks
 * of the old one are then refused, and the new one installs. */
static void test_new_snapshot_restarts(void **state)
{
    struct fake *f = fake_a(state);
    struct file old, new;
    make_file(&old, 2500, 8);
    make_file(&new, 1500, 9);
    start_follower(f, false);
    inject_chunk(f, 3, 10, 2, &old, 0, 1000, old.sum);
    inject_chunk(f, 3, 12, 3, &new, 0, 1000, new.sum);
    inject_chunk(f, 3, 10, 2, &old, 1000, 1000, old.sum);
    inject_chunk(f, 3, 12, 3, &new, 1000, 500, new.sum);
    FAKE_WAIT(f, f->obs.snapshot_index == 12);
    FAKE_CHECK(f, is_result(f, 0, 1000, 0) && is_result(f, 1, 1000, 0) &&
                      is_result(f, 2, 1000, RAFT_INVALID) &&
                      result(f, 2)->last_index == 10);
    FAKE_CHECK(f, f->installed_len ==
                          new.len &&memcmp(f->installed, new.bytes, new.len) ==
                          0 &&
                      fake_last_call(f, FAKE_INSTALL)->index == 12);
}

/* A driver whose storage cannot install snapshots refuses every chunk
 * with RAFT_INVALID. */
static void test_no_install_function(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    make_file(&fl, 500, 10);
    start_follower(f, true);
    inject_chunk(f, 3, 10, 2, &fl, 0, 500, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 1);
    FAKE_CHECK(f, is_result(f, 0, 0, RAFT_INVALID));
    assert_int_equal(n_files(f->dir), 0);
}

/* Stopping in the middle of a receive removes the temporary file. */
static void test_stop_removes_incoming(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 11);
    inject_chunk(f, 3, 10, 2, &fl, 0, 1000, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 1);
    assert_int_equal(n_files(f->dir), 1);
    fake_stop(f);
    assert_int_equal(n_files(f->dir), 0);
}

/* A follower that cannot create its temporary file answers RAFT_IOERR
 * and logs a warning. */
static void test_incoming_file_error(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    begin(f, &fl, 12);
    assert_int_equal(rmdir(f->dir), 0);
    inject_chunk(f, 3, 10, 2, &fl, 0, 1000, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 1);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    FAKE_CHECK(f, is_result(f, 0, 0, RAFT_IOERR) && !f->obs.failed);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN, "/incoming-2.db: ") == 1);
}

/* An install received while a write runs waits in the queue behind it and
 * runs alone after it; the log then continues after the snapshot. */
static void test_install_queued_behind_write(void **state)
{
    struct fake *f = fake_a(state);
    const struct fake_call *w, *in;
    struct file fl;
    begin(f, &fl, 13);
    fake_hold(f, FAKE_APPEND);
    fake_inject_append(f, 1, 3, 0, 0, "old", 0);
    FAKE_WAIT(f, f->held[FAKE_APPEND]);
    send_file(f, 3, 10, 2, &fl, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 2);
    fake_barrier(f);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_INSTALL, -1) == 0);
    fake_release(f, FAKE_APPEND);
    FAKE_WAIT(f, f->obs.snapshot_index == 10 &&
                     fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == 3);
    fake_lock(f);
    w = append_at(f, 1);
    in = fake_last_call(f, FAKE_INSTALL);
    assert_true(w != NULL && w->rc == 0 && in != NULL && in->rc == 0);
    assert_true(w->seq < in->seq);
    assert_int_equal(f->log_first, 11);
    fake_unlock(f);
    fake_inject_append(f, 1, 3, 10, 2, "new", 11);
    FAKE_WAIT(f, f->n_applied == 1 && f->applied[0].index == 11);
}

/* ---- Leader -------------------------------------------------------------- */

/* Length of the leader's snapshot: 11 chunks of 1000 bytes, the last
 * short. */
#define SNAP_LEN 10500

/* leader_init prepares server 1 of {1, 2}, whose log was compacted into a
 * snapshot through (10, 1) and holds entries 11 and 12 of term 1; the
 * test plays server 2 (f->peer), whose log is empty. Set f->peer's
 * behaviour, then call leader_start. */
static void leader_init(struct fake *f)
{
    fake_init(f, 1);
    fake_store_log(f, 11, 12, 1);
    fake_snapshot(f, SNAP_LEN, 10, 1);
    f->hook = fake_peer_hook;
    f->peer.id = 2;
}

/* leader_core_ms returns server @id's core of leader_init's log, with an
 * election timeout of @election_ms. */
static struct raft *leader_core_ms(raft_id id, unsigned election_ms)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {.term = 1};
    struct raft_entry e[2];
    struct raft *r = NULL;
    memset(e, 0, sizeof e);
    for (unsigned i = 0; i < 2; i++) {
        e[i].term = 1;
        e[i].index = 11 + i;
        e[i].type = RAFT_ENTRY_NORMAL;
    }
    fake_config(&cfg, id, TWO, 2, election_ms);
    assert_int_equal(raft_restore(&cfg, &hs, 10, 1, e, 2, 10, &r), 0);
    return r;
}

/* leader_core returns server @id's core of leader_init's log (an election
 * timeout of 50 ms: against the test's peer, which answers at once). */
static struct raft *leader_core(raft_id id)
{
    return leader_core_ms(id, 50);
}

static void leader_start(struct fake *f, uint64_t stall_ms)
{
    struct fake_opts o = {.peers = PEER_2,
                          .n_peers = 1,
                          .chunk_bytes = 1000,
                          .stall_ms = stall_ms};
    fake_start(f, leader_core(1), &o);
}

/* The leader creates the snapshot on the thread pool and streams it in
 * chunks of chunk_bytes, with its checksum, never more than the window
 * ahead of the acknowledgements; the transfer then ends and the follower
 * is replicated from the entry after the snapshot. */
static void test_stream_snapshot(void **state)
{
    struct fake *f = fake_a(state);
    const struct fake_sent *s = NULL;
    const struct fake_call *c;
    leader_init(f);
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    fake_lock(f);
    assert_int_equal(f->peer.len, SNAP_LEN);
    assert_memory_equal(f->peer.buf, f->snap, SNAP_LEN);
    assert_int_equal(f->peer.n_starts, 1);
    assert_int_equal(f->peer.n_chunks, 11);
    assert_int_equal(f->peer.max_window, 4 * 1000);
    c = fake_last_call(f, FAKE_CREATE);
    assert_true(fake_n_calls(f, FAKE_CREATE, -1) == 1 && c->rc == 0);
    assert_true(f->loop_known && !c->on_loop);
    for (unsigned i = 0; i < f->n_sent && s == NULL; i++) {
        if (f->sent[i].f.type == RAFT_FRAME_SNAPSHOT_CHUNK) {
            s = &f->sent[i];
        }
    }
    assert_non_null(s);
    assert_int_equal(s->f.to, 2);
    assert_int_equal(s->f.snapshot_chunk.last_index, 10);
    assert_int_equal(s->f.snapshot_chunk.last_term, 1);
    assert_int_equal(s->f.snapshot_chunk.total, SNAP_LEN);
    assert_int_equal(s->f.snapshot_chunk.checksum, XXH64(f->snap, SNAP_LEN, 0));
    assert_int_equal(s->f.snapshot_chunk.term, f->obs.term);
    assert_int_equal(s->f.snapshot_chunk.data->len, 1000);
    assert_int_equal(fake_logged(f, RAFT_LOG_INFO,
                                 "sending snapshot at index 10 (10500 "
                                 "bytes) to 2"),
                     1);
    assert_int_equal(
        fake_logged(f, RAFT_LOG_INFO, "snapshot at index 10 installed on 2"),
        1);
    fake_unlock(f);
    FAKE_WAIT(f, f->peer.last >= 13 && f->obs.commit >= 13);
}

/* mono_ms reads CLOCK_MONOTONIC in ms, the loop clock's source. */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A writer proposing an entry every 20 ms on a leader until told to
 * stop. */
struct proposer {
    struct fake *f;
    bool stop; /* atomic */
    pthread_t th;
};

static void *proposer_main(void *arg)
{
    struct proposer *p = arg;
    while (!__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST)) {
        raft_index index;
        (void)fake_propose(p->f, "w", &index);
        usleep(20 * 1000);
    }
    return NULL;
}

/* paced_start starts leader 1 with snapshot_rate @rate and chunks of
 * 1000 bytes, its snapshot creation held: once it leads, with @writes, it
 * took a write, and a tick saw it, before the creation goes on; returns
 * the loop clock (ms) before the start. */
static uint64_t paced_start(struct fake *f, uint64_t rate, bool writes)
{
    struct fake_opts o = {.peers = PEER_2,
                          .n_peers = 1,
                          .chunk_bytes = 1000,
                          .snapshot_rate = rate};
    uint64_t t0 = mono_ms();
    unsigned ticks;

    leader_init(f);
    fake_hold(f, FAKE_CREATE);
    fake_start(f, leader_core(1), &o);
    FAKE_WAIT(f, f->held[FAKE_CREATE] && f->obs.role == RAFT_LEADER);
    if (writes) {
        raft_index index;
        assert_int_equal(fake_propose(f, "w", &index), 0);
        fake_lock(f);
        ticks = f->obs.n_ticks;
        fake_unlock(f);
        FAKE_WAIT(f, f->obs.n_ticks > ticks + 1);
    }
    fake_release(f, FAKE_CREATE);
    return t0;
}

/* While the leader takes writes a transfer is paced (snapshot_rate_bytes):
 * its first chunk goes at once and then no more than the pace allows: at
 * 20,000 bytes a second, the last of 10,500 bytes in chunks of 1,000 (the
 * one at offset 10,000) cannot go before 450 ms after the transfer began,
 * so the install comes no sooner; the window still holds. */
static void test_paced_transfer(void **state)
{
    struct fake *f = fake_a(state);
    struct proposer p = {.f = f};
    uint64_t t0 = paced_start(f, 20000, true);

    assert_int_equal(pthread_create(&p.th, NULL, proposer_main, &p), 0);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    __atomic_store_n(&p.stop, true, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_join(p.th, NULL), 0);
    assert_true(mono_ms() - t0 >= 450);
    FAKE_CHECK(f, f->peer.len == SNAP_LEN && f->peer.n_chunks == 11 &&
                      f->peer.max_window <= 4 * 1000);
}

/* With no writes to protect, the same transfer is not paced: at 2,000
 * bytes a second it would take 4.75 s at least; it takes a few ms. */
static void test_unpaced_without_writes(void **state)
{
    struct fake *f = fake_a(state);
    uint64_t t0 = paced_start(f, 2000, false);
    uint64_t t1;

    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    t1 = mono_ms();
    assert_true(t1 - t0 < 4000);
    FAKE_CHECK(f, f->peer.len == SNAP_LEN && f->peer.n_chunks == 11);
}

/* Without acknowledgements the leader sends one window of chunks and no
 * more; a second later it sends the window again from the last
 * acknowledged byte. */
static void test_window_resent(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.chunk_silent = true;
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.n_chunks >= 5);
    FAKE_CHECK(f, f->peer.chunk_offs[0] == 0 && f->peer.chunk_offs[1] == 1000 &&
                      f->peer.chunk_offs[2] == 2000 &&
                      f->peer.chunk_offs[3] == 3000 &&
                      f->peer.chunk_offs[4] == 0);
    FAKE_CHECK(f, f->peer.max_window == 4 * 1000);
}

/* A snapshot the follower refuses is sent again from offset 0; after
 * three refusals in a row the transfer is abandoned (WARN, and
 * SNAPSHOT_FAILED to the core), and the core's next offer reuses the
 * same file. */
static void test_refused_snapshot_retried(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.n_refuse = 3;
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    FAKE_CHECK(f, f->peer.n_refused == 3 && f->peer.n_starts == 4);
    FAKE_CHECK(f,
               fake_logged(f, RAFT_LOG_WARN, "snapshot to 2 abandoned: ") == 1);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_CREATE, -1) == 1);
}

/* A transfer that makes no progress (the peer's queue refuses chunks)
 * is abandoned once its stall timeout passed. */
static void test_stalled_transfer_abandoned(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.busy_after = 2;
    leader_start(f, 200);
    FAKE_WAIT(f, fake_logged(f, RAFT_LOG_WARN,
                             "snapshot to 2 abandoned: no progress") >= 1);
    FAKE_CHECK(f, f->peer.n_chunks == 2 && !f->peer.installed &&
                      f->obs.stats.n_snapshots_sent == 0);
}

/* A connected follower that never answers is abandoned after the stall
 * timeout although the window is sent again every second (before, each
 * re-send counted as progress and the transfer went on for ever). */
static void test_silent_peer_abandoned(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.chunk_silent = true;
    leader_start(f, 2500);
    FAKE_WAIT(f, fake_logged(f, RAFT_LOG_WARN,
                             "snapshot to 2 abandoned: no progress") >= 1);
    FAKE_CHECK(f, f->peer.n_chunks >= 8 && !f->peer.installed);
}

/* A follower that takes longer than the stall timeout to verify and
 * install the complete file (it answers the last chunk only then) is
 * waited for: once every chunk is sent, the stall timeout grows by the
 * file's size over the install rate. Before, a join of 5 GB was
 * abandoned at 30 s while its install ran, and sent again
 * (bench/scale.sh at 4 GB). */
static void test_slow_install_waited_for(void **state)
{
    struct fake *f = fake_a(state);
    struct fake_opts o = {.peers = PEER_2,
                          .n_peers = 1,
                          .chunk_bytes = 1000,
                          .stall_ms = 900,
                          .install_rate = 1000}; /* SNAP_LEN: 10.5 s more */
    leader_init(f);
    f->peer.installing = true;
    fake_start(f, leader_core(1), &o);
    /* The last chunk sent twice again, a second apart, without its
     * answer: more than two stall timeouts. (A stall timeout of 300 ms
     * ran out under load while the chunks before were still in flight,
     * before the install's allowance applies: a flaky test.) */
    FAKE_WAIT(f, f->peer.n_last >= 3);
    FAKE_CHECK(f,
               fake_logged(f, RAFT_LOG_WARN, "snapshot to 2 abandoned") == 0 &&
                   f->peer.n_starts == 1);
    fake_lock(f);
    f->peer.installing = false;
    fake_unlock(f);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    FAKE_CHECK(f,
               fake_logged(f, RAFT_LOG_WARN, "snapshot to 2 abandoned") == 0 &&
                   f->peer.n_starts == 1);
}

/* The install's allowance is bounded: a follower that never answers the
 * last chunk is abandoned once the stall timeout and the file's install
 * time at the install rate have passed. */
static void test_endless_install_abandoned(void **state)
{
    struct fake *f = fake_a(state);
    struct fake_opts o = {.peers = PEER_2,
                          .n_peers = 1,
                          .chunk_bytes = 1000,
                          .stall_ms = 300,
                          .install_rate = 15000}; /* SNAP_LEN: 0.7 s more */
    leader_init(f);
    f->peer.installing = true;
    fake_start(f, leader_core(1), &o);
    FAKE_WAIT(f, fake_logged(f, RAFT_LOG_WARN,
                             "snapshot to 2 abandoned: no progress") >= 1);
    FAKE_CHECK(f, f->peer.n_last >= 1 && !f->peer.installed);
}

/* A broken connection to the follower aborts its transfer at the next
 * tick. */
static void test_unreachable_aborts(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.chunk_silent = true;
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.n_chunks >= 4);
    fake_lock(f);
    f->down[2] = true;
    fake_unlock(f);
    FAKE_WAIT(f, fake_logged(f, RAFT_LOG_WARN,
                             "snapshot to 2 abandoned: connection lost") == 1);
    FAKE_CHECK(f, !f->peer.installed);
}

/* What a transfer's state is, read on the loop thread. */
struct send_state {
    bool active; /* sending */
    bool wanted; /* asked for */
};

static void read_send(struct fake *f, void *arg)
{
    struct send_state *s = arg;
    s->active = f->d->sends[0].active;
    s->wanted = f->d->sends[0].wanted;
}

/* A leader that lost its leadership abandons its transfers at the next
 * tick, without a warning. */
static void test_lost_leadership_abandons(void **state)
{
    struct fake *f = fake_a(state);
    struct send_state s = {true, true};
    raft_term term;
    unsigned ticks;
    leader_init(f);
    f->peer.chunk_silent = true;
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.n_chunks >= 4);
    fake_on_loop(f, read_send, &s);
    assert_true(s.active && s.wanted);
    fake_lock(f);
    f->peer.deny_votes = true;
    term = f->obs.term;
    fake_unlock(f);
    fake_inject_append(f, 2, term + 1, 0, 0, NULL, 0);
    FAKE_WAIT(f, f->obs.role == RAFT_FOLLOWER && f->obs.leader == 2);
    fake_lock(f);
    ticks = f->obs.n_ticks;
    fake_unlock(f);
    FAKE_WAIT(f, f->obs.n_ticks >= ticks + 2);
    fake_on_loop(f, read_send, &s);
    assert_false(s.active);
    assert_false(s.wanted);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN, "abandoned") == 0);
    FAKE_CHECK(f, f->obs.stats.snapshot_peer == 0);
}

/* A snapshot that cannot be made is logged, the transfer abandoned, and
 * the core's next offer makes it again. */
static void test_create_failure_retried(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    fake_fail(f, FAKE_CREATE, RAFT_IOERR, 1);
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.installed);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_CREATE, RAFT_IOERR) == 1 &&
                      fake_n_calls(f, FAKE_CREATE, 0) == 1);
    FAKE_CHECK(f,
               fake_logged(f, RAFT_LOG_WARN, "snapshot: fake: injected") == 1 &&
                   fake_logged(f, RAFT_LOG_WARN,
                               "snapshot to 2 abandoned: the snapshot "
                               "could not be made") == 1);
}

/* A snapshot file an earlier life of the node left (killed while it
 * sent one: the names count from 1 in each life) does not fail the
 * first snapshot of this life: it is replaced. */
static void test_leftover_snapshot_file_replaced(void **state)
{
    struct fake *f = fake_a(state);
    char path[PATH_MAX];
    FILE *fp;
    leader_init(f);
    snprintf(path, sizeof path, "%s/snapshot-1-1.db", f->dir);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("left by an earlier life", fp);
    fclose(fp);
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.installed);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_CREATE, -1) == 1 &&
                      fake_n_calls(f, FAKE_CREATE, 0) == 1);
    fake_lock(f);
    assert_memory_equal(f->peer.buf, f->snap, SNAP_LEN);
    fake_unlock(f);
}

/* Stopping in the middle of a transfer closes it and removes the
 * leader's snapshot file. */
static void test_stop_removes_snapshot(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.chunk_silent = true;
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.n_chunks >= 1);
    assert_int_equal(n_files(f->dir), 1);
    fake_stop(f);
    assert_int_equal(n_files(f->dir), 0);
}

/* A snapshot file that no longer joins the log (compacted past it) is
 * replaced by a new one for the next transfer, and the old file removed;
 * one that still joins it is reused. */
static void test_snapshot_replaced_after_compaction(void **state)
{
    struct fake *f = fake_a(state);
    unsigned ticks;
    leader_init(f);
    leader_start(f, 0);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    FAKE_WAIT(f, f->n_applied >= 3 && f->applied[f->n_applied - 1].index >= 13);
    fake_snapshot(f, 5000, 12, 1);
    assert_int_equal(fake_compact(f, 12), 0);
    FAKE_WAIT(f, f->obs.first == 13);
    /* The peer loses its log, and its connection once: the leader probes
     * it again and finds that it needs a snapshot. */
    fake_lock(f);
    f->peer.installed = false;
    f->peer.last = 0;
    f->down[2] = true;
    ticks = f->obs.n_ticks;
    fake_unlock(f);
    FAKE_WAIT(f, f->obs.n_ticks >= ticks + 2);
    fake_lock(f);
    f->down[2] = false;
    fake_unlock(f);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 2);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_CREATE, 0) == 2 &&
                      fake_last_call(f, FAKE_CREATE)->index == 12);
    FAKE_CHECK(f, f->peer.snap_index == 12 && f->peer.len == 5000);
    wait_files(f->dir, 1);
    /* The old file went on the thread pool, not on the loop thread. */
    FAKE_CHECK(f, f->n_removes >= 1 && f->n_removes_on_loop == 0);
}

/* ---- Two drivers --------------------------------------------------------- */

/* Between two drivers, a chunk corrupted in transit makes the follower
 * refuse the snapshot by its checksum and tell the leader, which sends it
 * again; the second copy installs and replication continues after it. */
static void test_two_drivers_corrupted_chunk(void **state)
{
    struct fake_pair *x = *state;
    struct fake *a = &x->a, *b = &x->b;
    struct fake_opts oa = {.peers = PEER_2, .n_peers = 1, .chunk_bytes = 1000};
    struct fake_opts ob = {.peers = PEER_1, .n_peers = 1};
    unsigned starts = 0;
    fake_init(a, 1);
    fake_store_log(a, 11, 12, 1);
    fake_snapshot(a, SNAP_LEN, 10, 1);
    fake_init(b, 2);
    fake_link(a, b);
    a->corrupt_next_chunk = true;
    /* An election timeout of 500 ms: between two drivers on a loaded
     * machine, 50 ms of silence made the leader step down (check quorum)
     * again and again, each time before the snapshot went through
     * (snapshot_index not 10 within 5 s, twice in make unit). */
    fake_start(a, leader_core_ms(1, 500), &oa);
    fake_start(b, fake_core(2, TWO, 2, 60000), &ob);
    FAKE_WAIT(b, b->obs.snapshot_index == 10);
    FAKE_WAIT(a, a->obs.stats.n_snapshots_sent == 1);
    FAKE_CHECK(b, fake_logged(b, RAFT_LOG_WARN, "checksum mismatch") == 1 &&
                      fake_n_calls(b, FAKE_INSTALL, -1) == 1);
    FAKE_CHECK(b, b->installed_len == SNAP_LEN &&
                      memcmp(b->installed, a->snap, SNAP_LEN) == 0);
    fake_lock(a);
    for (unsigned i = 0; i < a->n_sent; i++) {
        starts += a->sent[i].f.type == RAFT_FRAME_SNAPSHOT_CHUNK &&
                  a->sent[i].f.snapshot_chunk.offset == 0;
    }
    fake_unlock(a);
    assert_int_equal(starts, 2);
    FAKE_WAIT(b, b->obs.commit >= 13 && b->n_applied >= 3);
    FAKE_CHECK(b, fake_last_call(b, FAKE_APPEND)->rc == 0 &&
                      b->applied[0].index == 11);
    FAKE_WAIT(a, a->obs.commit >= 13);
}

/* inject_repair sends the leader @f a REPAIR_REQUEST from server 2 at
 * applied index @applied. */
static void inject_repair(struct fake *f, raft_index applied)
{
    struct raft_frame fr;
    memset(&fr, 0, sizeof fr);
    fr.type = RAFT_FRAME_REPAIR_REQUEST;
    fr.from = 2;
    fr.to = 1;
    fr.repair_request.applied = applied;
    fake_inject(f, &fr);
}

/* A leader answers a follower's REPAIR_REQUEST, although its core wants
 * no snapshot for it, with a fresh snapshot streamed as any other; one
 * that lies below the follower's applied index is made once per request
 * and not sent. */
static void test_repair_request_answered(void **state)
{
    struct fake *f = fake_a(state);
    leader_init(f);
    f->peer.last = 12; /* up to date: the core offers no snapshot */
    leader_start(f, 0);
    FAKE_WAIT(f, f->obs.role == RAFT_LEADER && f->obs.commit >= 13);
    FAKE_CHECK(f,
               fake_n_calls(f, FAKE_CREATE, -1) == 0 && f->peer.n_chunks == 0);

    inject_repair(f, 11); /* the fake's snapshots are at 10: too old */
    FAKE_WAIT(f, fake_n_calls(f, FAKE_CREATE, -1) == 1);
    FAKE_WAIT(f, fake_logged(f, RAFT_LOG_INFO, "snapshot at index 10") == 1);
    fake_barrier(f);
    usleep(50 * 1000); /* ticks pass: no new snapshot, nothing sent */
    FAKE_CHECK(f,
               fake_n_calls(f, FAKE_CREATE, -1) == 1 && f->peer.n_chunks == 0);
    FAKE_CHECK(f, fake_logged(f, RAFT_LOG_WARN,
                              "server 2 diverged and asks for a snapshot "
                              "to repair (applied 11)") == 1);
    inject_repair(f, 11);
    FAKE_WAIT(f, fake_n_calls(f, FAKE_CREATE, -1) == 2);

    inject_repair(f, 10);
    FAKE_WAIT(f, f->peer.installed && f->obs.stats.n_snapshots_sent == 1);
    FAKE_CHECK(f, f->peer.snap_index == 10 && f->peer.n_starts == 1);
    FAKE_CHECK(f, fake_n_calls(f, FAKE_CREATE, -1) <= 3);
}

/* A follower that installs a snapshot at an index its core handed out
 * already (a repair) has the core drop its log through that index, as
 * the install compacted the durable log (RAFT_EVENT_COMPACT). */
static void test_install_at_handed_index_compacts(void **state)
{
    struct fake *f = fake_a(state);
    struct file fl;
    unsigned n;
    begin(f, &fl, 4);
    fake_inject_append(f, 1, 3, 0, 0, "a", 0);
    fake_inject_append(f, 1, 3, 1, 3, "b", 0);
    fake_inject_append(f, 1, 3, 2, 3, "c", 3);
    FAKE_WAIT(f, f->n_applied == 3);
    FAKE_CHECK(f, f->obs.snapshot_index == 0 && f->obs.first == 1);
    fake_lock(f);
    n = fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT);
    fake_unlock(f);
    send_file(f, 3, 2, 3, &fl, fl.sum);
    FAKE_WAIT(f, fake_n_sent(f, RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) == n + 3);
    FAKE_WAIT(f, f->obs.snapshot_index == 2);
    FAKE_CHECK(f, f->obs.first == 3 && f->obs.last == 3 && f->obs.commit == 3 &&
                      f->n_applied == 3);
    FAKE_CHECK(f, fake_last_call(f, FAKE_INSTALL)->index == 2);
    /* The log goes on after it. */
    fake_inject_append(f, 1, 3, 3, 3, "d", 4);
    FAKE_WAIT(f, f->n_applied == 4);
    FAKE_CHECK(f, f->applied[3].index == 4);
}

/* Every test runs on a fresh struct fake_pair. */
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, fake_setup, fake_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_receive_and_install),
        TEST(test_installed_file_removed_off_loop),
        TEST(test_leftover_removal_finished),
        TEST(test_file_read_by_transfer_held),
        TEST(test_bad_checksum_refused),
        TEST(test_out_of_order_chunk),
        TEST(test_stale_term_refused),
        TEST(test_install_refused_by_store),
        TEST(test_install_failure_stops),
        TEST(test_install_busy_retried),
        TEST(test_chunks_during_install_ignored),
        TEST(test_new_snapshot_restarts),
        TEST(test_no_install_function),
        TEST(test_stop_removes_incoming),
        TEST(test_incoming_file_error),
        TEST(test_install_queued_behind_write),
        TEST(test_stream_snapshot),
        TEST(test_paced_transfer),
        TEST(test_unpaced_without_writes),
        TEST(test_window_resent),
        TEST(test_refused_snapshot_retried),
        TEST(test_stalled_transfer_abandoned),
        TEST(test_silent_peer_abandoned),
        TEST(test_slow_install_waited_for),
        TEST(test_endless_install_abandoned),
        TEST(test_unreachable_aborts),
        TEST(test_lost_leadership_abandons),
        TEST(test_create_failure_retried),
        TEST(test_leftover_snapshot_file_replaced),
        TEST(test_stop_removes_snapshot),
        TEST(test_snapshot_replaced_after_compaction),
        TEST(test_two_drivers_corrupted_chunk),
        TEST(test_repair_request_answered),
        TEST(test_install_at_handed_index_compacts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
