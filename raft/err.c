/* Texts for the project-wide error codes declared in err.h. */

#include "err.h"

const char *raft_strerror(int rc)
{
    switch (rc) {
        case 0:
            return "ok";
#define RAFT__ERR_CASE(name, num, text) \
    case num:                           \
        return text;
            RAFT_ERRORS(RAFT__ERR_CASE)
#undef RAFT__ERR_CASE
        default:
            return "unknown error";
    }
}
