/* A joining node's side of join= (change.c owns one): the JOIN request it
 * sends until it is a member, under a request id unique to this start,
 * and the refusals it hears, logged and kept for member_why. */

#ifndef EXT_CHANGE_JOIN_H
#define EXT_CHANGE_JOIN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "config.h"

/* Room for a refusal's text, NUL included. */
#define EXT__JOIN_WHY_MAX 256

/* The JOIN state of one node. Fields belong to change_join.c. */
struct ext_change_join {
    raft_id self;                         /* this server */
    unsigned pace_ms;                     /* between two JOINs */
    char advertise[RAFT_ADDRESS_MAX + 1]; /* this node's address, ""
                                              without join= */
    char host[EXT_ADDRESS_MAX + 1];       /* join= host */
    uint16_t port;                        /* join= port, 0 without */
    bool probed;                          /* the join= address is dialled */
    bool was_member;                      /* was in a configuration */
    uint64_t next_at;                     /* loop clock of the next JOIN */
    uint64_t rid[2];                      /* the JOINs' request id: this
                                              server, EXT_CHANGE_SEQ_BIT and
                                              62 random bits of this start */
    pthread_mutex_t mu;                   /* guards @why */
    char why[EXT__JOIN_WHY_MAX];          /* last refusal heard, "" (mu) */
};

/* change_join_init sets up @j for node @cfg (copied: id, pace, join=
 * address, advertised address) and draws the request id (getrandom, else
 * the wall clock). Cannot fail. Before any other call; any thread. */
void change_join_init(struct ext_change_join *j, const struct ext_config *cfg);

/* change_join_close releases what change_join_init set up. After every
 * other call. */
void change_join_close(struct ext_change_join *j);

/* change_join_tick sends this node's JOIN, at most once per pace, while
 * it is not a member and never was one since it started: to its leader
 * when it knows one, else to every connected peer (the join= member, once
 * it dialled back), which passes it on. It first dials the join= address.
 * Failures to send are retried at the next pace. Loop thread of @d. */
void change_join_tick(struct ext_change_join *j, struct raft_uv_node *d);

/* change_join_answer takes FORWARD_RESULT @m when it answers this node's
 * JOIN (returns true; else false, nothing done): a refusal is logged at
 * WARN through @d once per distinct text and kept for change_join_why; an
 * acceptance clears it. Loop thread of @d. */
bool change_join_answer(struct ext_change_join *j, struct raft_uv_node *d,
                        const struct raft_frame *m);

/* change_join_why copies into @buf (@len bytes, NUL-terminated) the last
 * refusal heard, in words, "" for none. Any thread. */
void change_join_why(struct ext_change_join *j, char *buf, size_t len);

#endif /* EXT_CHANGE_JOIN_H */
