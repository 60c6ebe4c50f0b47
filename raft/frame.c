/* Frames (frame.h): carrying the core's messages in frames and taking them
 * out again. */

#include "frame.h"

#include <string.h>

/* is_message_type says whether @type is one of enum raft_message_type. */
static bool is_message_type(uint8_t type)
{
    return (type >= RAFT_MSG_REQUEST_VOTE &&
            type <= RAFT_MSG_APPEND_ENTRIES_RESULT) ||
           type == RAFT_MSG_TIMEOUT_NOW;
}

void raft_frame_wrap(const struct raft_message *m, struct raft_frame *out)
{
    memset(out, 0, sizeof *out);
    out->from = m->from;
    out->to = m->to;
    out->message = *m;
    /* Any other type stays 0, which the codec refuses: the body of a core
     * message must never be read as one of the runtime's. */
    if (is_message_type(m->type)) {
        out->type = m->type;
    }
}

bool raft_frame_is_message(const struct raft_frame *f)
{
    return is_message_type(f->type);
}

bool raft_frame_unwrap(const struct raft_frame *f, struct raft_message *out)
{
    if (!is_message_type(f->type)) {
        return false;
    }
    *out = f->message;
    return true;
}
