/* SQLite's own modules with shadow tables (shadow.h). The suffixes are
 * those of each module's xShadowName (https://sqlite.org/vtab.html). */

#include "shadow.h"

#include <string.h>
#include <strings.h>

/* The modules and their shadow tables' suffixes, NULL-ended. */
static const struct {
    const char *module;
    const char *suffixes[6];
} modules[] = {
    {"fts3", {"content", "segments", "segdir", "docsize", "stat", NULL}},
    {"fts4", {"content", "segments", "segdir", "docsize", "stat", NULL}},
    {"fts5", {"data", "idx", "content", "docsize", "config", NULL}},
    {"rtree", {"node", "parent", "rowid", NULL}},
    {"rtree_i32", {"node", "parent", "rowid", NULL}},
    {"geopoly", {"node", "parent", "rowid", NULL}},
};

/* is_space tells whether @c separates words of SQL. */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

/* is_word tells whether @c may be part of a bare SQL word. */
static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

void shadow_module(const char *sql, size_t len, char *out, size_t out_len)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 1; i + 6 < len; i++) {
        if (!is_space(sql[i - 1]) || strncasecmp(sql + i, "USING", 5) != 0 ||
            !is_space(sql[i + 5])) {
            continue;
        }
        i += 5;
        while (i < len && is_space(sql[i])) {
            i++;
        }
        while (i < len && n + 1 < out_len && is_word(sql[i])) {
            out[n++] = sql[i++];
        }
        out[n] = '\0';
        return;
    }
}

bool shadow_known(const char *module)
{
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
        if (strcasecmp(module, modules[i].module) == 0) {
            return true;
        }
    }
    return false;
}

bool shadow_suffix(const char *module, const char *suffix)
{
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
        if (strcasecmp(module, modules[i].module) != 0) {
            continue;
        }
        for (size_t k = 0; modules[i].suffixes[k] != NULL; k++) {
            if (strcasecmp(suffix, modules[i].suffixes[k]) == 0) {
                return true;
            }
        }
    }
    return false;
}
