/* The change request that a follower forwards to its leader in a FORWARD
 * frame (the payload of a write request is sql/'s "RQ"; this one starts
 * with "RM"), the leader's answer in a FORWARD_RESULT, and the words for
 * each refusal. Pure.
 *
 * Request payload, version 1, little-endian:
 *   0  2  magic "RM"          2  1  version (1)
 *   3  1  op (ext_change_op)  4  1  flags (bit 0: manual learner)
 *   5  1  reserved (0)        6  2  address length
 *   8  8  id                  16 .. address bytes (no NUL)
 * A FORWARD_RESULT of a change carries status 0 and, in index, the
 * committed entry's index (a transfer: the new leader's id); or an error
 * code and, in index, an enum ext_change_why.
 */

#include "change_codec.h"

#include <stdio.h>
#include <string.h>

#include "../../raft/byte.h"

/* Bytes of the change request header. */
#define EXT__CHANGE_HEADER 16

static bool op_known(uint8_t op)
{
    return (op >= EXT_CHANGE_ADD && op <= EXT_CHANGE_UPDATE) ||
           op == EXT_CHANGE_TRANSFER || op == EXT_CHANGE_JOIN;
}

int change_codec_encode(const struct ext_change_request *req,
                        struct raft_buf **out)
{
    size_t alen = strnlen(req->address, sizeof req->address);
    struct raft_buf *b;
    uint8_t *p;

    if (alen > RAFT_ADDRESS_MAX || !op_known(req->op)) {
        return RAFT_INVALID;
    }
    b = raft_buf_new(EXT__CHANGE_HEADER + alen);
    if (b == NULL) {
        return RAFT_NOMEM;
    }
    p = b->data;
    p[0] = 'R';
    p[1] = 'M';
    p[2] = 1;
    p[3] = req->op;
    p[4] = req->manual ? 1 : 0;
    p[5] = 0;
    p[6] = (uint8_t)(alen & 0xff);
    p[7] = (uint8_t)(alen >> 8);
    raft_byte_store_u64(p + 8, req->id);
    memcpy(p + EXT__CHANGE_HEADER, req->address, alen);
    *out = b;
    return 0;
}

int change_codec_decode(const void *data, size_t len,
                        struct ext_change_request *out)
{
    const uint8_t *p = data;
    struct ext_change_request r;
    size_t alen;

    if (len < 3 || p[0] != 'R' || p[1] != 'M') {
        return RAFT_CORRUPT;
    }
    if (p[2] != 1) {
        return RAFT_FORMAT;
    }
    if (len < EXT__CHANGE_HEADER) {
        return RAFT_CORRUPT;
    }
    alen = (size_t)p[6] | ((size_t)p[7] << 8);
    if (len != EXT__CHANGE_HEADER + alen || alen > RAFT_ADDRESS_MAX ||
        !op_known(p[3]) || (p[4] & ~1u) != 0 || p[5] != 0 ||
        memchr(p + EXT__CHANGE_HEADER, 0, alen) != NULL) {
        return RAFT_CORRUPT;
    }
    memset(&r, 0, sizeof r);
    r.op = p[3];
    r.manual = p[4] & 1;
    r.id = raft_byte_load_u64(p + 8);
    memcpy(r.address, p + EXT__CHANGE_HEADER, alen);
    *out = r;
    return 0;
}

bool change_codec_is_change(const struct raft_frame *m)
{
    const struct raft_buf *b;

    if (m->type == RAFT_FRAME_FORWARD_RESULT) {
        return (m->forward_result.request_id[1] & EXT_CHANGE_SEQ_BIT) != 0;
    }
    if (m->type != RAFT_FRAME_FORWARD) {
        return false;
    }
    b = m->forward.data;
    return b != NULL && b->len >= 2 && b->data[0] == 'R' && b->data[1] == 'M';
}

/* reason_text returns the words for @why about server @id. */
static void reason_text(unsigned why, raft_id id, char *buf, size_t len)
{
    unsigned long long i = (unsigned long long)id;
    switch (why) {
        case EXT_WHY_PENDING:
            snprintf(buf, len,
                     "another membership change is pending (not committed "
                     "yet); one change at a time: retry once it commits");
            break;
        case EXT_WHY_TRANSFER:
            snprintf(buf, len, "a leadership transfer is running; retry");
            break;
        case EXT_WHY_NOT_READY:
            snprintf(buf, len,
                     "the new leader has not committed an entry of its "
                     "term yet; retry in a moment");
            break;
        case EXT_WHY_UNREACHED:
            snprintf(buf, len,
                     "server %llu has not received the log yet, and a "
                     "majority of the voters must hold it: retry once it "
                     "caught up",
                     i);
            break;
        case EXT_WHY_BEHIND:
            snprintf(buf, len,
                     "server %llu has not caught up with the leader's log "
                     "(or is not answering): a lagging voter stalls "
                     "commits once another fails; retry once it caught up",
                     i);
            break;
        case EXT_WHY_MEMBER:
            snprintf(buf, len, "server %llu is a member already", i);
            break;
        case EXT_WHY_FULL:
            snprintf(buf, len, "the configuration is full (%d servers)",
                     RAFT_MAX_SERVERS);
            break;
        case EXT_WHY_LAST_VOTER:
            snprintf(buf, len, "server %llu is the last voter", i);
            break;
        case EXT_WHY_VOTER:
            snprintf(buf, len, "server %llu is a voter already", i);
            break;
        case EXT_WHY_LEARNER:
            snprintf(buf, len, "server %llu is a learner already", i);
            break;
        case EXT_WHY_NOT_MEMBER:
            snprintf(buf, len, "unknown id: server %llu is not a member", i);
            break;
        case EXT_WHY_SELF:
            snprintf(buf, len, "server %llu is the leader already", i);
            break;
        case EXT_WHY_TO_LEARNER:
            snprintf(buf, len,
                     "server %llu is a learner; only a voter can lead", i);
            break;
        case EXT_WHY_NO_VOTER:
            snprintf(buf, len,
                     "there is no other voter to lead (or none this leader "
                     "reaches)");
            break;
        case EXT_WHY_ABANDONED:
            snprintf(buf, len,
                     "the transfer was abandoned: no new leader within an "
                     "election timeout (or the connection to the voter it "
                     "picked broke, with no other voter reached)");
            break;
        case EXT_WHY_LOST:
            snprintf(buf, len,
                     "outcome unknown: the leadership changed before the "
                     "change committed; check raft_members");
            break;
        case EXT_WHY_ADDRESS:
            snprintf(buf, len, "the address is longer than %d bytes",
                     RAFT_ADDRESS_MAX);
            break;
        case EXT_WHY_ADDRESS_USED:
            snprintf(buf, len,
                     "the address is that of another member: each server "
                     "needs its own (see raft_members)");
            break;
        default:
            buf[0] = '\0';
            break;
    }
}

void change_codec_describe(const struct ext_change_request *req, int rc,
                           unsigned why, raft_id leader, char *buf, size_t len)
{
    char r[256];

    reason_text(why, req->id, r, sizeof r);
    if (r[0] != '\0') {
        snprintf(buf, len, "%s", r);
    } else if (rc == RAFT_NOTLEADER) {
        snprintf(buf, len, "no leader known; retry once one is elected");
    } else if (rc == RAFT_BUSY) {
        snprintf(buf, len,
                 "another membership change or leadership transfer is "
                 "pending on this node");
    } else if (rc == RAFT_NOTFOUND) {
        snprintf(buf, len, "unknown id: server %llu is not a member",
                 (unsigned long long)req->id);
    } else {
        snprintf(buf, len, "%s", raft_strerror(rc));
    }
    if (leader != 0 && rc == RAFT_NOTLEADER) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, " (the leader is server %llu)",
                 (unsigned long long)leader);
    }
}

bool change_codec_already(const struct ext_change_request *q, int status,
                          uint64_t why, raft_id from)
{
    switch (q->op) {
        case EXT_CHANGE_ADD:
        case EXT_CHANGE_JOIN:
            return status == RAFT_INVALID && why == EXT_WHY_MEMBER;
        case EXT_CHANGE_REMOVE:
            return status == RAFT_NOTFOUND;
        case EXT_CHANGE_PROMOTE:
            return status == RAFT_INVALID && why == EXT_WHY_VOTER;
        case EXT_CHANGE_DEMOTE:
            return status == RAFT_INVALID && why == EXT_WHY_LEARNER;
        case EXT_CHANGE_TRANSFER:
            return status == RAFT_INVALID && why == EXT_WHY_SELF &&
                   from == q->id;
        default:
            return false;
    }
}
