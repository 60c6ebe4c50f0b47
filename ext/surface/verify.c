/* raft_verify()'s JSON (verify.h), with jansson. */

#include "verify.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../sql/sql.h"

/* hex64 returns @v as 16 hex digits. */
static json_t *hex64(uint64_t v)
{
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return json_string(buf);
}

/* append_name adds @name to the comma-separated list @out (@len bytes),
 * ending it with "..." once full. */
static void append_name(char *out, size_t len, const char *name)
{
    size_t used = strlen(out);
    if (used + strlen(name) + 8 < len) {
        snprintf(out + used, len - used, "%s%s", used > 0 ? ", " : "", name);
    } else if (strstr(out, "...") == NULL && used + 6 < len) {
        snprintf(out + used, len - used, ", ...");
    }
}

char *verify_json(const char *path, char *differ_out, size_t differ_len,
                  char *errmsg, size_t errmsg_len)
{
    struct sql_verify v;
    json_t *o, *differ;
    char *text;

    differ_out[0] = '\0';
    if (sql_checksum_verify(path, &v, errmsg, errmsg_len) != 0) {
        if (strstr(errmsg, "no such table: main.raftsql_applied") != NULL) {
            /* A plain database: say so, not SQLite's words. */
            snprintf(errmsg, errmsg_len,
                     "not a raftsql replica: %s has no raftsql_applied table",
                     path);
        }
        return NULL;
    }
    o = json_object();
    differ = json_array();
    if (o == NULL || differ == NULL) {
        json_decref(o);
        json_decref(differ);
        sql_verify_clear(&v);
        snprintf(errmsg, errmsg_len, "out of memory");
        return NULL;
    }
    if (!v.available) {
        json_decref(differ);
        json_object_set_new(o, "available", json_false());
        json_object_set_new(
            o, "why",
            json_string("no running checksum is stored in this database: "
                        "its node runs with checksum=off, or without "
                        "SQLite's pre-update hook (raft_status() says "
                        "which)"));
    } else {
        json_object_set_new(o, "index", json_integer((json_int_t)v.index));
        json_object_set_new(o, "equal", json_boolean(v.n_differ == 0));
        json_object_set_new(o, "stored", hex64(v.stored));
        json_object_set_new(o, "scanned", hex64(v.scanned));
        for (unsigned i = 0; i < v.n_differ; i++) {
            json_t *t = json_object();
            json_object_set_new(t, "table", json_string(v.differ[i].name));
            json_object_set_new(t, "stored", hex64(v.differ[i].stored));
            json_object_set_new(t, "scanned", hex64(v.differ[i].scanned));
            json_array_append_new(differ, t);
            append_name(differ_out, differ_len, v.differ[i].name);
        }
        json_object_set_new(o, "differ", differ);
    }
    sql_verify_clear(&v);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (text == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
    }
    return text;
}
