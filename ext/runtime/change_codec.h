/* The change request a follower forwards to its leader (change.c), its
 * payload codec, and the words for each refusal (change_codec.c has the
 * byte layout). Pure: any thread. */

#ifndef EXT_CHANGE_CODEC_H
#define EXT_CHANGE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "../../raft/raft.h"

/* Request sequence numbers of changes carry this bit (write requests
 * never do), so that the answers of both are told apart. */
#define EXT_CHANGE_SEQ_BIT (1ULL << 63)

/* What a change request asks. 1..5 are enum raft_change_kind. */
enum ext_change_op {
    EXT_CHANGE_ADD = 1,       /* add @id at @address as a learner */
    EXT_CHANGE_REMOVE = 2,    /* remove @id */
    EXT_CHANGE_PROMOTE = 3,   /* make learner @id a voter */
    EXT_CHANGE_DEMOTE = 4,    /* make voter @id a learner */
    EXT_CHANGE_UPDATE = 5,    /* give @id the address @address */
    EXT_CHANGE_TRANSFER = 10, /* hand leadership to voter @id, 0: the
                                 most caught-up one */
    EXT_CHANGE_JOIN = 11,     /* a joining node's own request: add @id at
                                 @address as a learner to promote */
};

/* Why a leader refused a request, beside the error code: the leader
 * knows, and tells the node that forwarded it (change.c). */
enum ext_change_why {
    EXT_WHY_NONE = 0,
    EXT_WHY_PENDING = 1,       /* BUSY: a configuration entry uncommitted */
    EXT_WHY_TRANSFER = 2,      /* BUSY: a leadership transfer runs */
    EXT_WHY_NOT_READY = 3,     /* BUSY: no entry of the term committed yet */
    EXT_WHY_MEMBER = 4,        /* INVALID: ADD of a member */
    EXT_WHY_FULL = 5,          /* INVALID: RAFT_MAX_SERVERS servers */
    EXT_WHY_LAST_VOTER = 6,    /* INVALID: REMOVE or DEMOTE the last voter */
    EXT_WHY_VOTER = 7,         /* INVALID: PROMOTE of a voter */
    EXT_WHY_LEARNER = 8,       /* INVALID: DEMOTE of a learner */
    EXT_WHY_NOT_MEMBER = 9,    /* NOTFOUND: no such member */
    EXT_WHY_SELF = 10,         /* INVALID: TRANSFER to the leader itself */
    EXT_WHY_TO_LEARNER = 11,   /* INVALID: TRANSFER to a learner */
    EXT_WHY_NO_VOTER = 12,     /* NOTFOUND: TRANSFER with no other voter */
    EXT_WHY_ABANDONED = 13,    /* TIMEOUT: the transfer was abandoned */
    EXT_WHY_LOST = 14,         /* UNKNOWN: leadership lost before commit */
    EXT_WHY_ADDRESS = 15,      /* INVALID: an address too long */
    EXT_WHY_ADDRESS_USED = 16, /* INVALID: ADD or UPDATE to an address
                                  another member has */
    EXT_WHY_UNREACHED = 17,    /* BUSY: PROMOTE of a learner that holds
                                  nothing yet (raft.h, CHANGE) */
    EXT_WHY_BEHIND = 18,       /* BUSY: PROMOTE of a learner that has not
                                  caught up (raft_progress caught_up) */
};

/* One request. */
struct ext_change_request {
    uint8_t op;                         /* enum ext_change_op */
    bool manual;                        /* ADD: stays a learner (no
                                           automatic promotion) */
    raft_id id;                         /* the server concerned, 0 only
                                           for TRANSFER */
    char address[RAFT_ADDRESS_MAX + 1]; /* ADD, UPDATE, JOIN: "host:port" */
};

/* How a request ended. */
struct ext_change_result {
    int rc;           /* 0, or a project error code (RAFT_BUSY, ...) */
    bool unknown;     /* the outcome is unknown (timeout after it left
                          this node, or the leadership changed before it
                          committed) */
    raft_index index; /* a change: the index of its committed entry */
    raft_id leader;   /* a transfer: the new leader, 0 when unknown */
    char errmsg[512]; /* what happened, for the caller: "ok" or why */
};

/* change_codec_is_change says whether frame @m is a membership change's:
 * a FORWARD frame that carries a change request (not a write request),
 * or a FORWARD_RESULT that answers one (its request id is one change.c
 * gave out). False for any other frame. Pure. */
bool change_codec_is_change(const struct raft_frame *m);

/* change_codec_encode writes @req as a FORWARD payload into a new buf
 * (*@out, one reference, the caller's). Errors: RAFT_INVALID (an
 * address too long), RAFT_NOMEM. Pure; any thread. */
int change_codec_encode(const struct ext_change_request *req,
                        struct raft_buf **out);

/* change_codec_decode reads the @len bytes at @p into *@out (written
 * only on success). Errors: RAFT_CORRUPT (bad magic, truncated, trailing
 * bytes, an unknown op, an address with a NUL byte or too long),
 * RAFT_FORMAT (an unknown version). Pure; any thread. */
int change_codec_decode(const void *p, size_t len,
                        struct ext_change_request *out);

/* change_codec_describe writes into @buf (@len bytes) what the failure @rc of
 * request @req means, in words; @why is the leader's reason (enum
 * ext_change_why) and @leader the leader known
 * (0: none). Pure. */
void change_codec_describe(const struct ext_change_request *req, int rc,
                           unsigned why, raft_id leader, char *buf, size_t len);

/* change_codec_already says whether the refusal @status (with reason
 * @why, from leader @from) of request @q, forwarded again after an
 * answer was lost, means that an earlier copy did it: ADD of a member,
 * REMOVE of a non-member, PROMOTE of a voter, DEMOTE of a learner, a
 * TRANSFER to @from refused by @from as the leader already. Pure. */
bool change_codec_already(const struct ext_change_request *q, int status,
                          uint64_t why, raft_id from);

#endif /* EXT_CHANGE_CODEC_H */
