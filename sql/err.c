/* Texts of the error codes of sql/ (err.h), and its message formatter. */

#include "err.h"

#include <stdarg.h>
#include <stdio.h>

/* The text of each code, by number. */
static const char *const err_texts[] = {[SQL_ERR__NONE] = "ok",
#define SQL__ERR_TEXT(name, text) [SQL_ERR_##name] = text,
                                        SQL_ERRORS(SQL__ERR_TEXT)
#undef SQL__ERR_TEXT
};

const char *sql_strerror(int rc)
{
    if (rc < 0 || (size_t)rc >= sizeof err_texts / sizeof err_texts[0]) {
        return "unknown error";
    }
    return err_texts[rc];
}

void sql_errmsgf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (buf != NULL && len > 0) {
        vsnprintf(buf, len, fmt, ap);
    }
    va_end(ap);
}
