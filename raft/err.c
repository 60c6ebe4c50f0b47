/* Texts for the project-wide error codes declared in err.h. */

#include "err.h"

#include <stdarg.h>
#include <stdio.h>

const char *raft_strerror(int rc)
{
    switch (rc) {
        case 0:
            return "ok";
#define RAFT__ERR_CASE(name, num, text)                                        \
    case num:                                                                  \
        return text;
            RAFT_ERRORS(RAFT__ERR_CASE)
#undef RAFT__ERR_CASE
        default:
            return "unknown error";
    }
}

void raft_errmsgf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (buf == NULL || len == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}
