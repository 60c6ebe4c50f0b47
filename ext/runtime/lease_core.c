/* The write lease's rules (lease_core.h): the grant, the changeset's
 * proposal under it, the commit's answer, the applier hold, and their
 * ends, as decisions on explicit inputs. lease.c runs them for the
 * node's threads; the simulation runs them on a virtual clock.
 *
 * Happy path: lease_core_ask marks the lease ASKED; lease_core_loop
 * grants it (GRANTED, the applier held above the leader's last index G)
 * and the holder waits until G is applied on its node;
 * lease_core_commit queues the changeset (QUEUED); lease_core_loop
 * checks the lease and hands the changeset back to append unstamped as
 * entry G + 1 (TAKEN while the caller proposes, then PROPOSED at
 * lease_core_proposed; the lease ends); lease_core_loop_end answers once
 * the commit index reaches G + 1; lease_core_release ends the applier
 * hold. A follower's holder does the same through LEASE frames to the
 * leader (ASK, COMMIT, RELEASE), which answers ASK and COMMIT with
 * LEASE_RESULT (lease_core_frame on both sides).
 * Failure modes: no leader, a follower, a member on an old wire, another
 * holder: refused at once. The lease expires (lease_timeout_ms after the
 * grant) or a leader change ends it: a queued commit is refused, not
 * applied; a proposed one answers outcome unknown when the leadership is
 * lost before its commit is seen. A commit the loop does not take within
 * exec_timeout_ms is withdrawn (not applied); one taken but not seen
 * committed by then is outcome unknown. A holder that never releases:
 * the hold ends lease_timeout_ms after the grant or the commit's
 * return. */

#include "lease_core.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../../raft/err.h"
#include "../../raft/message.h"

void lease_core_say(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || why_len == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

void lease_core_init(struct lease_core *c, raft_id self,
                     unsigned lease_timeout_ms, unsigned exec_timeout_ms,
                     uint64_t max_bytes)
{
    memset(c, 0, sizeof *c);
    c->self = self;
    c->timeout_ms = lease_timeout_ms;
    c->exec_timeout_ms = exec_timeout_ms;
    c->max_bytes = max_bytes;
}

void lease_core_close(struct lease_core *c)
{
    raft_buf_unref(c->payload);
    c->payload = NULL;
}

void lease_core_out_init(struct lease_core_out *out)
{
    memset(out, 0, sizeof *out);
}

bool lease_core_active(const struct lease_core *c)
{
    return c->state != LEASE_NONE || c->commit != COMMIT_NONE ||
           c->hold_id != 0 || c->release_id != 0;
}

/* end_lease ends the lease in force with @rc and @fmt's words, what a
 * commit under it is answered. */
static void end_lease(struct lease_core *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void end_lease(struct lease_core *c, int rc, const char *fmt, ...)
{
    va_list ap;
    if (c->state != LEASE_GRANTED) {
        return;
    }
    c->state = LEASE_NONE;
    c->ended_id = c->id;
    c->ended_rc = rc;
    va_start(ap, fmt);
    vsnprintf(c->ended_why, sizeof c->ended_why, fmt, ap);
    va_end(ap);
}

/* end_hold lets the applier go. */
static void end_hold(struct lease_core *c, struct lease_core_out *out)
{
    if (c->hold_id == 0) {
        return;
    }
    out->hold_end = true;
    out->hold_landed = c->landed;
    c->hold_id = 0;
    c->landed = 0;
}

/* wake wakes the loop, unless the node stops. */
static void wake(struct lease_core *c, struct lease_core_out *out)
{
    if (!c->shutdown) {
        out->wake_loop = true;
    }
}

/* add_frame returns the next frame of @out to fill, zeroed. */
static struct raft_frame *add_frame(struct lease_core_out *out)
{
    struct raft_frame *f;

    assert(out->n_send < LEASE_CORE_MAX_SENDS);
    f = &out->send[out->n_send++];
    memset(f, 0, sizeof *f);
    return f;
}

/* ---- The line (LEASE_CORE_TURN_MS) --------------------------------- */

/* line_of returns @server's slot in the line while it keeps its place
 * at @now, NULL when it has none. */
static struct lease_core_wait *line_of(struct lease_core *c, raft_id server,
                                       uint64_t now)
{
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        struct lease_core_wait *w = &c->line[i];
        if (w->server == server && now < w->last_ms + LEASE_CORE_TURN_MS) {
            return w;
        }
    }
    return NULL;
}

/* line_busy notes that @server's writer was answered busy at @now: it
 * joins the line, or keeps its place. A full line lets the stalest slot
 * go. */
static void line_busy(struct lease_core *c, raft_id server, uint64_t now)
{
    struct lease_core_wait *w = line_of(c, server, now), *free = NULL;

    if (w != NULL) {
        w->last_ms = now;
        return;
    }
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        w = &c->line[i];
        if (w->server == server || w->server == 0 ||
            now >= w->last_ms + LEASE_CORE_TURN_MS) {
            free = w;
            break;
        }
        if (free == NULL || w->last_ms < free->last_ms) {
            free = w;
        }
    }
    free->server = server;
    free->since_ms = now;
    free->last_ms = now;
}

/* line_granted lets @server's place go: it got the lease. */
static void line_granted(struct lease_core *c, raft_id server)
{
    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        if (c->line[i].server == server) {
            c->line[i].server = 0;
        }
    }
}

/* line_ahead returns a server in line before @server at @now (in line
 * the longest; ties by id), 0 when @server's writer may have the lease.
 * A server not in line comes after every one in it. */
static raft_id line_ahead(struct lease_core *c, raft_id server, uint64_t now)
{
    const struct lease_core_wait *me = line_of(c, server, now);
    const struct lease_core_wait *first = NULL;

    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        const struct lease_core_wait *w = &c->line[i];
        if (w->server == 0 || w->server == server ||
            now >= w->last_ms + LEASE_CORE_TURN_MS) {
            continue;
        }
        if (first == NULL || w->since_ms < first->since_ms ||
            (w->since_ms == first->since_ms && w->server < first->server)) {
            first = w;
        }
    }
    if (first == NULL || (me != NULL && (me->since_ms < first->since_ms ||
                                         (me->since_ms == first->since_ms &&
                                          server < first->server)))) {
        return 0;
    }
    return first->server;
}

unsigned lease_core_line(const struct lease_core *c, uint64_t now,
                         raft_id *servers, uint64_t *waited_ms, unsigned max)
{
    struct lease_core_wait in[RAFT_MAX_SERVERS];
    unsigned n = 0;

    for (unsigned i = 0; i < RAFT_MAX_SERVERS; i++) {
        const struct lease_core_wait *w = &c->line[i];
        unsigned j;
        if (w->server == 0 || now >= w->last_ms + LEASE_CORE_TURN_MS) {
            continue;
        }
        /* Insertion by place: since, then id (line_ahead's order). */
        for (j = n; j > 0 && (in[j - 1].since_ms > w->since_ms ||
                              (in[j - 1].since_ms == w->since_ms &&
                               in[j - 1].server > w->server));
             j--) {
            in[j] = in[j - 1];
        }
        in[j] = *w;
        n++;
    }
    n = n < max ? n : max;
    for (unsigned i = 0; i < n; i++) {
        servers[i] = in[i].server;
        waited_ms[i] = now - in[i].since_ms;
    }
    return n;
}

/* ---- The holder ---------------------------------------------------- */

void lease_core_describe(const struct lease_core *c, uint64_t now, char *why,
                         size_t why_len)
{
    if (c->state == LEASE_GRANTED && c->holder_server != c->self) {
        lease_core_say(why, why_len,
                       "the write lease is held by a connection of server %llu "
                       "(lease %llu, for %llu ms)",
                       (unsigned long long)c->holder_server,
                       (unsigned long long)c->id,
                       (unsigned long long)(now - c->granted_ms));
    } else if (c->state == LEASE_GRANTED) {
        lease_core_say(
            why, why_len,
            "the write lease is held by connection %llu (lease %llu, for "
            "%llu ms)",
            (unsigned long long)c->holder, (unsigned long long)c->id,
            (unsigned long long)(now - c->granted_ms));
    } else if (c->state == LEASE_ASKED) {
        lease_core_say(why, why_len,
                       "the write lease is being granted to connection %llu",
                       (unsigned long long)c->holder);
    } else if (c->hold_id != 0) {
        lease_core_say(
            why, why_len,
            "the write lease's last holder (lease %llu) has not finished "
            "its commit yet",
            (unsigned long long)c->hold_id);
    } else {
        lease_core_say(why, why_len,
                       "the last write lease's commit (of server %llu) is "
                       "not answered yet",
                       (unsigned long long)c->commit_from);
    }
}

int lease_core_ask(struct lease_core *c, uint64_t holder, bool attached,
                   uint64_t now, char *why, size_t why_len,
                   struct lease_core_out *out)
{
    if (c->shutdown) {
        lease_core_say(why, why_len, "the node is stopping");
        return RAFT_SHUTDOWN;
    }
    /* Not while a commit is out either (a follower's, on the leader):
     * this node takes one commit at a time, so a lease granted now would
     * have its commit refused. */
    c->ask_leaderless = false;
    if (c->state != LEASE_NONE || c->hold_id != 0 || c->commit != COMMIT_NONE) {
        lease_core_describe(c, now, why, why_len);
        line_busy(c, c->self, now); /* kept by a leader only */
        return RAFT_BUSY;
    }
    if (!attached) {
        c->ask_leaderless = true;
        lease_core_say(why, why_len, "the node is starting");
        return RAFT_BUSY;
    }
    c->state = LEASE_ASKED;
    c->holder = holder;
    c->call_tag++;
    c->call_to = 0;
    wake(c, out);
    return 0;
}

bool lease_core_asking(const struct lease_core *c)
{
    return c->state == LEASE_ASKED && !c->shutdown;
}

int lease_core_ask_end(struct lease_core *c, char *why, size_t why_len,
                       uint64_t *out_id, raft_index *out_grant_index)
{
    if (c->state == LEASE_ASKED) {
        c->state = LEASE_NONE;
        c->ask_leaderless = true;
        if (c->shutdown) {
            lease_core_say(why, why_len, "the node is stopping");
            return RAFT_SHUTDOWN;
        }
        if (c->call_to != 0) {
            lease_core_say(
                why, why_len,
                "the leader (server %llu) did not answer the lease ask "
                "within exec_timeout_ms (%u ms)",
                (unsigned long long)c->call_to, c->exec_timeout_ms);
        } else {
            lease_core_say(
                why, why_len,
                "the node's loop did not answer within exec_timeout_ms "
                "(%u ms)",
                c->exec_timeout_ms);
        }
        return RAFT_BUSY;
    }
    if (c->ask_rc != 0) {
        lease_core_say(why, why_len, "%s", c->ask_why);
        return c->ask_rc;
    }
    *out_id = c->id;
    *out_grant_index = c->grant_index;
    return 0;
}

bool lease_core_ask_leaderless(const struct lease_core *c)
{
    return c->ask_leaderless;
}

bool lease_core_in_force(const struct lease_core *c, uint64_t id, char *why,
                         size_t why_len)
{
    bool in_force = c->state == LEASE_GRANTED && c->id == id;
    if (!in_force) {
        lease_core_say(why, why_len, "%s", c->ended_why);
    }
    return in_force;
}

/* refuse_commit words why lease @id takes no commit. */
static int refuse_commit(const struct lease_core *c, uint64_t id, char *why,
                         size_t why_len)
{
    if (c->shutdown) {
        lease_core_say(why, why_len, "not applied: the node is stopping");
        return RAFT_SHUTDOWN;
    }
    if (id != 0 && id == c->ended_id) {
        lease_core_say(why, why_len, "not applied: %s", c->ended_why);
        return c->ended_rc;
    }
    lease_core_say(why, why_len, "not applied: lease %llu is not in force",
                   (unsigned long long)id);
    return RAFT_INVALID;
}

int lease_core_commit(struct lease_core *c, uint64_t id, struct raft_buf *buf,
                      char *why, size_t why_len, struct lease_core_out *out)
{
    int rc;

    if (c->shutdown || c->state != LEASE_GRANTED || c->id != id ||
        c->commit != COMMIT_NONE) {
        rc = refuse_commit(c, id, why, why_len);
        if (c->state == LEASE_GRANTED && c->id == id) {
            end_lease(c, rc, "its commit was refused");
        }
        return rc;
    }
    c->commit = COMMIT_QUEUED;
    c->commit_seq++;
    c->commit_id = id;
    c->commit_from = c->self;
    c->commit_remote = false;
    c->payload = buf;
    wake(c, out);
    return 0;
}

bool lease_core_commit_waiting(const struct lease_core *c)
{
    return c->commit != COMMIT_DONE && !c->shutdown;
}

/* commit_answer is the holder's answer after its wait (wait_commit in
 * lease.c before the split). */
static int commit_answer(struct lease_core *c, bool interrupted, char *why,
                         size_t why_len, struct lease_core_out *out)
{
    if (c->commit == COMMIT_DONE) {
        lease_core_say(why, why_len, "%s", c->commit_why);
        return c->commit_rc;
    }
    if (c->commit == COMMIT_QUEUED) {
        /* The loop never took it: withdrawn, nothing appended. */
        if (c->state == LEASE_GRANTED && c->granted_by != c->self) {
            c->release_id = c->id;
            c->release_to = c->granted_by;
            wake(c, out);
        }
        end_lease(c, RAFT_CANCELED, "its commit was withdrawn");
        if (interrupted) {
            lease_core_say(why, why_len, "interrupted: not applied");
            return RAFT_CANCELED;
        }
        if (c->shutdown) {
            lease_core_say(why, why_len, "not applied: the node is stopping");
            return RAFT_SHUTDOWN;
        }
        lease_core_say(
            why, why_len,
            "not applied: the leader's loop did not take the changeset "
            "within exec_timeout_ms (%u ms)",
            c->exec_timeout_ms);
        return RAFT_TIMEOUT;
    }
    lease_core_say(
        why, why_len,
        "%soutcome unknown: %s; the transaction will be applied on all "
        "nodes or on none",
        interrupted ? "interrupted: " : "",
        interrupted   ? "the caller gave up after the entry was proposed"
        : c->shutdown ? "the node is stopping"
                      : "no commit seen within exec_timeout_ms");
    return RAFT_UNKNOWN;
}

int lease_core_commit_end(struct lease_core *c, uint64_t id, bool interrupted,
                          uint64_t now, char *why, size_t why_len,
                          struct lease_core_out *out)
{
    int rc = commit_answer(c, interrupted, why, why_len, out);

    if (rc == 0) {
        c->done_id = id;
        c->done_index = c->grant_index + 1;
    }
    /* The lease ends with the call, whatever the outcome; the hold stays
     * until the holder's release (or lease_timeout_ms from now). */
    if (c->state == LEASE_GRANTED && c->id == id) {
        end_lease(c, RAFT_INVALID, "its commit ended it");
    }
    c->commit = COMMIT_NONE;
    raft_buf_unref(c->payload);
    c->payload = NULL;
    if (c->hold_id == id) {
        c->hold_deadline_ms = now + c->timeout_ms;
    }
    wake(c, out);
    return rc;
}

void lease_core_release(struct lease_core *c, uint64_t id,
                        raft_index *out_wait_for, struct lease_core_out *out)
{
    *out_wait_for = 0;
    if (id != 0 && c->done_id == id) {
        *out_wait_for = c->done_index;
        c->done_id = 0;
    }
    if (c->commit == COMMIT_NONE && id != 0) {
        if (c->state == LEASE_GRANTED && c->id == id &&
            c->holder_server == c->self) {
            if (c->granted_by != c->self) {
                /* The leader ends it at its RELEASE (or at its
                 * lease_timeout_ms, when that frame is lost). */
                c->release_id = id;
                c->release_to = c->granted_by;
            }
            end_lease(c, RAFT_INVALID, "lease %llu was released",
                      (unsigned long long)id);
        }
        if (c->hold_id == id) {
            end_hold(c, out);
        }
        wake(c, out); /* requests held back may go */
    }
}

bool lease_core_end(struct lease_core *c, uint64_t now, char *why,
                    size_t why_len, struct lease_core_out *out)
{
    if (c->state != LEASE_GRANTED || c->granted_by != c->self ||
        c->commit == COMMIT_TAKEN) {
        return false;
    }
    lease_core_describe(c, now, why, why_len);
    end_lease(c, RAFT_INVALID,
              "an operator ended the lease (raft_lease_end) before its "
              "commit");
    if (c->commit == COMMIT_NONE && c->hold_id == c->id) {
        end_hold(c, out); /* its holder wrote nothing that counts */
    }
    wake(c, out); /* requests held back go */
    return true;
}

bool lease_core_holds_back(const struct lease_core *c)
{
    return c->state == LEASE_GRANTED;
}

void lease_core_shutdown(struct lease_core *c, struct lease_core_out *out)
{
    c->shutdown = true;
    end_lease(c, RAFT_SHUTDOWN, "the node is stopping");
    if (c->commit != COMMIT_NONE && c->commit_from != c->self) {
        /* A follower's: it hears no answer, and says outcome unknown. */
        c->commit = COMMIT_NONE;
        raft_buf_unref(c->payload);
        c->payload = NULL;
    } else if (c->commit == COMMIT_TAKEN || c->commit == COMMIT_PROPOSED) {
        c->commit = COMMIT_DONE;
        c->commit_rc = RAFT_UNKNOWN;
        lease_core_say(
            c->commit_why, sizeof c->commit_why,
            "outcome unknown: the node is stopping; the transaction will be "
            "applied on all nodes or on none");
    }
    end_hold(c, out);
    out->wake_holders = true;
}

/* ---- The loop ------------------------------------------------------ */

/* send_result sends follower @to the answer to its lease call @tag of
 * @op. */
static void send_result(struct lease_core *c, const struct lease_core_env *env,
                        struct lease_core_out *out, raft_id to, uint64_t tag,
                        uint8_t op, int status, uint64_t id, raft_index index,
                        raft_id server)
{
    struct raft_frame *f;

    if (env->peer_wire(env->arg, to) <
        raft_frame_type_wire_min(RAFT_FRAME_LEASE_RESULT)) {
        return; /* it asked on a wire we cannot answer on now: it asks
                   again, or its wait ends */
    }
    f = add_frame(out);
    f->type = RAFT_FRAME_LEASE_RESULT;
    f->from = c->self;
    f->to = to;
    f->lease_result.tag = tag;
    f->lease_result.op = op;
    f->lease_result.status = status;
    f->lease_result.id = id;
    f->lease_result.index = index;
    f->lease_result.server = server;
}

/* send_call sends the leader @to this node's holder's lease call: @op
 * with @tag, for @holder or lease @id, with changeset @data (may be
 * NULL, borrowed). Returns 0, or RAFT_FORMAT when @to's wire version has
 * no LEASE frames (0: not known yet, RAFT_BUSY). */
static int send_call(struct lease_core *c, const struct lease_core_env *env,
                     struct lease_core_out *out, raft_id to, uint8_t op,
                     uint64_t tag, uint64_t holder, uint64_t id,
                     struct raft_buf *data)
{
    unsigned wire = env->peer_wire(env->arg, to);
    struct raft_frame *f;

    if (wire == 0) {
        return RAFT_BUSY;
    }
    if (wire < raft_frame_type_wire_min(RAFT_FRAME_LEASE)) {
        return RAFT_FORMAT;
    }
    f = add_frame(out);
    f->type = RAFT_FRAME_LEASE;
    f->from = c->self;
    f->to = to;
    f->lease.tag = tag;
    f->lease.op = op;
    f->lease.holder = holder;
    f->lease.id = id;
    f->lease.data = data;
    return 0; /* lost: sent again */
}

/* done_of returns the leader's last answer to follower @from's commit,
 * NULL when none is kept. */
static struct lease_core_done *done_of(struct lease_core *c, raft_id from)
{
    unsigned i;

    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        if (c->rdone[i].from == from) {
            return &c->rdone[i];
        }
    }
    return NULL;
}

/* done_slot returns the slot for follower @from's next answer: its own,
 * a free one, or the one of the oldest lease (whose id rdone_forgot then
 * remembers). */
static struct lease_core_done *done_slot(struct lease_core *c, raft_id from)
{
    struct lease_core_done *d = done_of(c, from);
    unsigned i;

    if (d != NULL) {
        return d;
    }
    d = &c->rdone[0];
    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        if (c->rdone[i].from == 0) {
            return &c->rdone[i];
        }
        if (c->rdone[i].id < d->id) {
            d = &c->rdone[i];
        }
    }
    if (d->id > c->rdone_forgot) {
        c->rdone_forgot = d->id;
    }
    return d;
}

/* answer_commit answers the waiting commit with @rc and @fmt's words: a
 * holder of this node wakes; a follower's gets a LEASE_RESULT and the
 * commit is over here. */
static void answer_commit(struct lease_core *c,
                          const struct lease_core_env *env,
                          struct lease_core_out *out, int rc, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));

static void answer_commit(struct lease_core *c,
                          const struct lease_core_env *env,
                          struct lease_core_out *out, int rc, const char *fmt,
                          ...)
{
    va_list ap;
    if (c->commit_from != c->self) {
        struct lease_core_done *d = done_slot(c, c->commit_from);
        d->from = c->commit_from;
        d->id = c->commit_id;
        d->rc = rc;
        d->index = rc == 0 ? c->index : 0;
        send_result(c, env, out, c->commit_from, c->commit_tag,
                    RAFT_LEASE_COMMIT, rc, c->commit_id, d->index, 0);
        c->commit = COMMIT_NONE;
        raft_buf_unref(c->payload);
        c->payload = NULL;
        return;
    }
    c->commit = COMMIT_DONE;
    c->commit_rc = rc;
    va_start(ap, fmt);
    vsnprintf(c->commit_why, sizeof c->commit_why, fmt, ap);
    va_end(ap);
    out->wake_holders = true;
}

/* may_grant says whether this leader may grant a lease now, and when not
 * sets *@rc and @why. */
static bool may_grant(struct lease_core *c, const struct lease_core_env *env,
                      int *rc, char *why, size_t why_len)
{
    *rc = 0;
    if (c->shutdown) {
        *rc = RAFT_SHUTDOWN;
        lease_core_say(why, why_len, "the node is stopping");
    } else if (env->change_waiting) {
        /* Asked again shortly, as for a lease held (lease.c). */
        *rc = RAFT_BUSY;
        lease_core_say(why, why_len,
                       "a membership change waits to be appended first (it "
                       "goes once the lease in force ends)");
    } else if (env->gate(env->arg, why, why_len) != 0) {
        *rc = RAFT_FORMAT;
    }
    return *rc == 0;
}

/* grant_to makes the lease GRANTED, by this leader, to @holder of
 * @server. */
static void grant_to(struct lease_core *c, const struct lease_core_env *env,
                     raft_id server, uint64_t holder)
{
    line_granted(c, server);
    c->n_grants++;
    c->term = env->term;
    c->id = (c->term << 32) | (c->n_grants & 0xffffffffu);
    c->grant_index = env->last_index;
    c->granted_ms = env->now_ms;
    c->state = LEASE_GRANTED;
    c->holder = holder;
    c->holder_server = server;
    c->granted_by = c->self;
    if (c->first_id == 0) {
        c->first_id = c->id;
    }
}

/* hold_from holds the applier above @grant_index for this node's holder
 * of lease @id (the previous hold ended before an ask is taken:
 * lease_core_ask). */
static void hold_from(struct lease_core *c, uint64_t id, raft_index grant_index,
                      uint64_t now, struct lease_core_out *out)
{
    c->hold_id = id;
    c->landed = 0;
    c->hold_deadline_ms = now + c->timeout_ms;
    out->hold = true;
    out->hold_from = grant_index + 1;
}

/* answer_ask ends this node's holder's ask with @rc (0: granted), words
 * in ask_why. */
static void answer_ask(struct lease_core *c, int rc, struct lease_core_out *out)
{
    c->ask_rc = rc;
    if (rc != 0) {
        c->state = LEASE_NONE;
    }
    out->wake_holders = true;
}

/* ask_on_loop moves this node's holder's ask: granted here when this
 * node leads, sent to the leader when another leads. */
static void ask_on_loop(struct lease_core *c, const struct lease_core_env *env,
                        struct lease_core_out *out)
{
    raft_id leader = env->leader;
    uint64_t now = env->now_ms;
    int rc;

    if (env->leading) {
        if (may_grant(c, env, &rc, c->ask_why, sizeof c->ask_why)) {
            raft_id ahead = line_ahead(c, c->self, now);
            if (ahead != 0) {
                rc = RAFT_BUSY;
                lease_core_say(c->ask_why, sizeof c->ask_why,
                               "a writer of server %llu waits for the write "
                               "lease first (it goes in turn)",
                               (unsigned long long)ahead);
                line_busy(c, c->self, now);
            } else {
                grant_to(c, env, c->self, c->holder);
                hold_from(c, c->id, c->grant_index, now, out);
            }
        }
        answer_ask(c, rc, out);
        return;
    }
    if (c->shutdown) {
        lease_core_say(c->ask_why, sizeof c->ask_why, "the node is stopping");
        answer_ask(c, RAFT_SHUTDOWN, out);
        return;
    }
    if (leader == 0 || leader == c->self) {
        lease_core_say(c->ask_why, sizeof c->ask_why, "no leader yet");
        c->ask_leaderless = true;
        answer_ask(c, RAFT_BUSY, out);
        return;
    }
    if (c->call_to == leader && now < c->call_sent_ms + EXT__LEASE_RESEND_MS) {
        return; /* its answer is on its way */
    }
    rc = send_call(c, env, out, leader, RAFT_LEASE_ASK, c->call_tag, c->holder,
                   0, NULL);
    if (rc == RAFT_FORMAT) {
        lease_core_say(
            c->ask_why, sizeof c->ask_why,
            "the leader (server %llu) speaks wire version %u, which has no "
            "write lease calls (wire version %u and later): plain SQL "
            "writes go through its node only; upgrade it first",
            (unsigned long long)leader, env->peer_wire(env->arg, leader),
            raft_frame_type_wire_min(RAFT_FRAME_LEASE));
        answer_ask(c, RAFT_FORMAT, out);
        return;
    }
    if (rc == 0) {
        c->call_to = leader;
        c->call_sent_ms = now;
    }
}

/* take_commit checks the queued commit against the lease in force and
 * returns its payload (a reference) to propose, or NULL when refused
 * (answered). */
static struct raft_buf *take_commit(struct lease_core *c,
                                    const struct lease_core_env *env,
                                    struct lease_core_out *out)
{
    if (c->state != LEASE_GRANTED || c->id != c->commit_id) {
        char why[sizeof c->commit_why];
        int rc = refuse_commit(c, c->commit_id, why, sizeof why);
        answer_commit(c, env, out, rc, "%s", why);
        return NULL;
    }
    if (env->last_index != c->grant_index) {
        end_lease(c, RAFT_NOTLEADER,
                  "a membership change was appended after the grant (it "
                  "waited %u ms for the lease to end, the most a change "
                  "waits): retry the transaction",
                  LEASE_CORE_CHANGE_WAIT_MS);
        answer_commit(c, env, out, RAFT_NOTLEADER, "not applied: %s",
                      c->ended_why);
        return NULL;
    }
    c->commit = COMMIT_TAKEN;
    return raft_buf_ref(c->payload);
}

void lease_core_proposed(struct lease_core *c, const struct lease_core_env *env,
                         uint64_t seq, int rc, raft_index index, raft_term term,
                         struct lease_core_out *out)
{
    if (rc == 0) {
        /* Whatever its holder does now, the applier's hold knows it. */
        if (c->hold_id == c->id) {
            c->landed = index;
        }
        end_lease(c, RAFT_INVALID, "its changeset was proposed");
    } else {
        end_lease(c, rc, "the leader could not append the changeset: %s",
                  raft_strerror(rc));
    }
    if (c->commit != COMMIT_TAKEN || c->commit_seq != seq) {
        return; /* its holder gave up: outcome unknown, told already */
    }
    if (rc == 0) {
        c->commit = COMMIT_PROPOSED;
        c->index = index;
        c->pterm = term;
    } else {
        answer_commit(c, env, out, rc, "not applied: %s", c->ended_why);
    }
}

/* check_commit answers a commit this leader proposed once the commit
 * index reaches it, or once the leadership it was proposed in is
 * lost. */
static void check_commit(struct lease_core *c, const struct lease_core_env *env,
                         struct lease_core_out *out)
{
    if (c->commit != COMMIT_PROPOSED || c->commit_remote) {
        return;
    }
    if (!env->leading || env->term != c->pterm) {
        answer_commit(c, env, out, RAFT_UNKNOWN,
                      "outcome unknown: this node stopped leading before "
                      "the entry (index %llu) was seen committed; the "
                      "transaction will be applied on all nodes or on none",
                      (unsigned long long)c->index);
    } else if (env->commit_index >= c->index) {
        answer_commit(c, env, out, 0, "committed at index %llu",
                      (unsigned long long)c->index);
    }
}

/* commit_on_loop moves the queued commit: this leader takes it (@out's
 * propose); a follower sends it to the leader that granted the lease
 * (and again while unanswered). */
static void commit_on_loop(struct lease_core *c,
                           const struct lease_core_env *env,
                           struct lease_core_out *out)
{
    raft_id to = c->granted_by;
    uint64_t now = env->now_ms;

    if (c->commit == COMMIT_QUEUED && c->commit_from == c->self &&
        c->state == LEASE_GRANTED && to != c->self) {
        /* It leaves this node: outcome unknown unless answered. The
         * lease in force here ends; the leader's ends at the append. */
        c->commit = COMMIT_PROPOSED;
        c->commit_remote = true;
        c->call_tag++;
        c->call_to = 0;
        if (c->hold_id == c->id) {
            c->landed = c->grant_index + 1;
        }
        end_lease(c, RAFT_INVALID, "its changeset went to the leader");
        c->commit_to = to;
    }
    if (c->commit == COMMIT_PROPOSED && c->commit_remote &&
        (c->call_to == 0 || now >= c->call_sent_ms + EXT__LEASE_RESEND_MS)) {
        /* Always to the server that granted it: only it can say whether
         * it appended the changeset. */
        if (send_call(c, env, out, c->commit_to, RAFT_LEASE_COMMIT, c->call_tag,
                      0, c->commit_id, c->payload) == 0) {
            c->call_to = c->commit_to;
            c->call_sent_ms = now;
        }
        return;
    }
    if (c->commit == COMMIT_QUEUED) {
        struct raft_buf *buf = take_commit(c, env, out);
        if (buf != NULL) {
            out->propose = buf;
            out->propose_seq = c->commit_seq;
        }
    }
}

void lease_core_loop(struct lease_core *c, const struct lease_core_env *env,
                     struct lease_core_out *out)
{
    uint64_t now = env->now_ms;
    bool ended;

    if (c->release_id != 0) {
        /* Lost or refused: the leader's lease_timeout_ms ends it. */
        (void)send_call(c, env, out, c->release_to, RAFT_LEASE_RELEASE, 0, 0,
                        c->release_id, NULL);
        c->release_id = 0;
    }
    if (c->state == LEASE_GRANTED) {
        /* A lease this node granted ends when it stops leading; one a
         * leader granted this node's holder, when this node sees a new
         * term (a new leader, maybe this node). */
        ended = c->granted_by == c->self ? !env->leading || env->term != c->term
                                         : env->leading || env->term != c->term;
        if (ended) {
            end_lease(c, RAFT_NOTLEADER,
                      "a leader change ended the lease (lease %llu)",
                      (unsigned long long)c->id);
        }
    }
    if (c->state == LEASE_GRANTED && c->granted_by == c->self &&
        c->commit == COMMIT_NONE && env->leading &&
        env->last_index != c->grant_index) {
        /* A membership change went after its wait
         * (LEASE_CORE_CHANGE_WAIT_MS): this lease's commit can only be
         * refused now, so it ends here, and the next writer need not
         * wait for its holder (its applier hold, if of this node, stays
         * until its release: its connection may hold the write lock). */
        end_lease(c, RAFT_NOTLEADER,
                  "a membership change was appended after the grant (it "
                  "waited %u ms for the lease to end, the most a change "
                  "waits): retry the transaction",
                  LEASE_CORE_CHANGE_WAIT_MS);
        wake(c, out);
    }
    if (c->state == LEASE_GRANTED && c->granted_by == c->self &&
        c->holder_server != c->self && c->commit == COMMIT_NONE &&
        env->peer_wire != NULL &&
        env->peer_wire(env->arg, c->holder_server) == 0) {
        /* The holder's server is not connected (it stopped, crashed or
         * restarted, or is cut off): its holder cannot commit, or not in
         * time; every other writer would wait for lease_timeout_ms. */
        end_lease(c, RAFT_INVALID,
                  "the holder's server %llu is no longer connected (it "
                  "stopped, crashed or is cut off)",
                  (unsigned long long)c->holder_server);
    }
    if (c->state == LEASE_GRANTED && c->commit != COMMIT_TAKEN &&
        now >= c->granted_ms + c->timeout_ms) {
        end_lease(c, RAFT_TIMEOUT,
                  "the lease expired after lease_timeout_ms (%u ms)",
                  c->timeout_ms);
        if (c->commit == COMMIT_NONE && c->hold_id == c->id) {
            end_hold(c, out); /* its holder wrote nothing that counts */
        }
    }
    if (c->state == LEASE_ASKED) {
        ask_on_loop(c, env, out);
    }
    commit_on_loop(c, env, out);
}

void lease_core_loop_end(struct lease_core *c, const struct lease_core_env *env,
                         struct lease_core_out *out)
{
    check_commit(c, env, out);
    if (c->hold_id != 0 && c->state != LEASE_GRANTED &&
        c->commit == COMMIT_NONE && env->now_ms >= c->hold_deadline_ms) {
        end_hold(c, out); /* its holder never released it */
    }
}

/* ---- A follower's calls, on the leader ----------------------------- */

/* on_ask takes follower @from's ask for its holder @holder (tag @tag). */
static void on_ask(struct lease_core *c, const struct lease_core_env *env,
                   struct lease_core_out *out, raft_id from, uint64_t tag,
                   uint64_t holder)
{
    char why[256];
    int rc;

    if (!env->leading) {
        send_result(c, env, out, from, tag, RAFT_LEASE_ASK, RAFT_NOTLEADER, 0,
                    0, 0);
        return;
    }
    if (c->state == LEASE_GRANTED && c->granted_by == c->self &&
        c->holder_server == from && c->holder == holder) {
        /* Its answer was lost: the same grant again. */
        send_result(c, env, out, from, tag, RAFT_LEASE_ASK, 0, c->id,
                    c->grant_index, 0);
        return;
    }
    if (c->state != LEASE_NONE || c->hold_id != 0 || c->commit != COMMIT_NONE) {
        send_result(c, env, out, from, tag, RAFT_LEASE_ASK, RAFT_BUSY, 0, 0,
                    c->state == LEASE_GRANTED ? c->holder_server : c->self);
        line_busy(c, from, env->now_ms);
        return;
    }
    if (!may_grant(c, env, &rc, why, sizeof why)) {
        send_result(c, env, out, from, tag, RAFT_LEASE_ASK, rc, 0, 0, 0);
        return;
    }
    if (line_ahead(c, from, env->now_ms) != 0) {
        /* Another server's writer is in line before it: server 0, as
         * for a change waiting (the follower's words say both). */
        send_result(c, env, out, from, tag, RAFT_LEASE_ASK, RAFT_BUSY, 0, 0, 0);
        line_busy(c, from, env->now_ms);
        return;
    }
    grant_to(c, env, from, holder);
    send_result(c, env, out, from, tag, RAFT_LEASE_ASK, 0, c->id,
                c->grant_index, 0);
}

/* remembers says whether this leader knows that no changeset of lease
 * @id is in its log unless it says so: @id was granted in this node's
 * life (a lease is granted by its term's leader only, and ids increase
 * across lives), and its answer, if any, was not let go. A changeset
 * this life appended under @id is under way (commit) or answered (rdone,
 * or rdone_forgot): "not applied" is true for any other. */
static bool remembers(const struct lease_core *c, uint64_t id)
{
    return c->first_id != 0 && id >= c->first_id && id > c->rdone_forgot;
}

/* on_commit takes follower @from's commit @f (a changeset under its
 * lease; @changeset_ok: its data is one). */
static void on_commit(struct lease_core *c, const struct lease_core_env *env,
                      struct lease_core_out *out, raft_id from,
                      const struct raft_lease_request *f, bool changeset_ok)
{
    const struct lease_core_done *d = done_of(c, from);
    size_t len = f->data != NULL ? f->data->len : 0;
    char why[256];
    int rc;

    if (d != NULL && d->id == f->id && f->id != 0) {
        /* Its answer was lost: the same answer again. */
        send_result(c, env, out, from, f->tag, RAFT_LEASE_COMMIT, d->rc, f->id,
                    d->index, 0);
        return;
    }
    if (c->commit != COMMIT_NONE && c->commit_from == from &&
        c->commit_id == f->id) {
        c->commit_tag = f->tag; /* under way: answered when done */
        return;
    }
    if (c->state != LEASE_GRANTED || c->granted_by != c->self ||
        c->holder_server != from || c->id != f->id ||
        c->commit != COMMIT_NONE) {
        rc = refuse_commit(c, f->id, why, sizeof why);
        if (rc != RAFT_SHUTDOWN && !remembers(c, f->id)) {
            /* Granted in an earlier life of this node, or answered and
             * forgotten: its changeset may be in the log. */
            rc = RAFT_UNKNOWN;
        }
        send_result(c, env, out, from, f->tag, RAFT_LEASE_COMMIT, rc, f->id, 0,
                    0);
        return;
    }
    if (f->data == NULL || !changeset_ok || len > c->max_bytes) {
        rc = len > c->max_bytes ? RAFT_TOOBIG : RAFT_INVALID;
        end_lease(c, rc, "its commit was refused");
        send_result(c, env, out, from, f->tag, RAFT_LEASE_COMMIT, rc, f->id, 0,
                    0);
        return;
    }
    c->commit = COMMIT_QUEUED;
    c->commit_seq++;
    c->commit_id = f->id;
    c->commit_from = from;
    c->commit_tag = f->tag;
    c->commit_remote = false;
    c->payload = raft_buf_ref(f->data);
}

/* on_release takes follower @from's release of lease @id. */
static void on_release(struct lease_core *c, raft_id from, uint64_t id)
{
    if (c->state == LEASE_GRANTED && c->granted_by == c->self &&
        c->holder_server == from && c->id == id && c->commit == COMMIT_NONE) {
        end_lease(c, RAFT_INVALID, "lease %llu was released",
                  (unsigned long long)id);
    }
}

/* ---- The leader's answers, on a follower --------------------------- */

/* on_ask_result takes the leader's answer @r to this node's ask. */
static void on_ask_result(struct lease_core *c,
                          const struct lease_core_env *env,
                          struct lease_core_out *out, raft_id from,
                          const struct raft_lease_result *r)
{
    uint64_t now = env->now_ms;

    if (c->state != LEASE_ASKED || r->tag != c->call_tag ||
        c->call_to != from) {
        if (r->status == 0 && !(c->state == LEASE_GRANTED &&
                                c->granted_by == from && c->id == r->id)) {
            /* A grant nobody waits for (its asker gave up): end it now,
             * not at the leader's lease_timeout_ms. */
            (void)send_call(c, env, out, from, RAFT_LEASE_RELEASE, 0, 0, r->id,
                            NULL);
        }
        return;
    }
    switch (r->status) {
        case 0:
            c->state = LEASE_GRANTED;
            c->holder_server = c->self;
            c->granted_by = from;
            c->id = r->id;
            c->term = r->id >> 32;
            c->grant_index = r->index;
            c->granted_ms = now;
            hold_from(c, c->id, c->grant_index, now, out);
            break;
        case RAFT_BUSY:
            if (r->server != 0) {
                lease_core_say(
                    c->ask_why, sizeof c->ask_why,
                    "the write lease is held by a connection of server %llu",
                    (unsigned long long)r->server);
            } else {
                lease_core_say(c->ask_why, sizeof c->ask_why,
                               "the write lease is held by another "
                               "connection, or goes first to a writer of "
                               "another server in line, or a membership "
                               "change waits for it at the leader (server "
                               "%llu)",
                               (unsigned long long)from);
            }
            break;
        case RAFT_NOTLEADER:
            /* It stepped down: ask the next leader. */
            c->call_to = 0;
            return;
        case RAFT_FORMAT:
            lease_core_say(
                c->ask_why, sizeof c->ask_why,
                "a member of the cluster cannot apply plain SQL writes yet "
                "(the leader, server %llu, says its wire version is too "
                "old): upgrade every node first",
                (unsigned long long)from);
            break;
        default:
            lease_core_say(c->ask_why, sizeof c->ask_why,
                           "the leader (server %llu): %s",
                           (unsigned long long)from, raft_strerror(r->status));
            break;
    }
    answer_ask(c, r->status, out);
}

/* on_commit_result takes the leader's answer @r to this node's commit. */
static void on_commit_result(struct lease_core *c,
                             const struct lease_core_env *env,
                             struct lease_core_out *out, raft_id from,
                             const struct raft_lease_result *r)
{
    unsigned long long leader = (unsigned long long)from;

    if (c->commit != COMMIT_PROPOSED || !c->commit_remote ||
        r->tag != c->call_tag || c->call_to != from) {
        return;
    }
    switch (r->status) {
        case 0:
            c->index = r->index;
            answer_commit(c, env, out, 0, "committed at index %llu",
                          (unsigned long long)r->index);
            break;
        case RAFT_UNKNOWN:
            answer_commit(c, env, out, RAFT_UNKNOWN,
                          "outcome unknown: the leader (server %llu) stopped "
                          "leading, or restarted, before it saw the entry "
                          "committed; the transaction will be applied on all "
                          "nodes or on none",
                          leader);
            break;
        case RAFT_TIMEOUT:
            answer_commit(c, env, out, RAFT_TIMEOUT,
                          "not applied: the lease expired at the leader "
                          "(server %llu) after lease_timeout_ms (%u ms)",
                          leader, c->timeout_ms);
            break;
        case RAFT_NOTLEADER:
            answer_commit(c, env, out, RAFT_NOTLEADER,
                          "not applied: the lease ended before its entry "
                          "was appended (server %llu stopped leading, or "
                          "appended a membership change that had waited "
                          "for the lease as long as a change waits): retry "
                          "the transaction",
                          leader);
            break;
        case RAFT_TOOBIG:
            answer_commit(c, env, out, RAFT_TOOBIG,
                          "not applied: the transaction exceeds the leader's "
                          "max_request_bytes (%llu here)",
                          (unsigned long long)c->max_bytes);
            break;
        default:
            answer_commit(c, env, out, r->status,
                          "not applied: the leader (server %llu) refused it: "
                          "lease %llu is not in force there (%s)",
                          leader, (unsigned long long)r->id,
                          raft_strerror(r->status));
            break;
    }
}

bool lease_core_frame(struct lease_core *c, const struct lease_core_env *env,
                      const struct raft_frame *f, bool changeset_ok,
                      struct lease_core_out *out)
{
    bool propose_now = false;

    if (f->type == RAFT_FRAME_LEASE) {
        switch (f->lease.op) {
            case RAFT_LEASE_ASK:
                on_ask(c, env, out, f->from, f->lease.tag, f->lease.holder);
                break;
            case RAFT_LEASE_COMMIT:
                on_commit(c, env, out, f->from, &f->lease, changeset_ok);
                propose_now = c->commit == COMMIT_QUEUED;
                break;
            default:
                on_release(c, f->from, f->lease.id);
                break;
        }
    } else if (f->lease_result.op == RAFT_LEASE_ASK) {
        on_ask_result(c, env, out, f->from, &f->lease_result);
    } else {
        on_commit_result(c, env, out, f->from, &f->lease_result);
    }
    return propose_now;
}
