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

/* A scan under way through its gate (verify_json). */
struct verify_pass {
    const struct sql_copy_gate *gate;
    bool open; /* the gate is held */
};

/* verify_pass_end ends @p's hold of its gate, once. */
static void verify_pass_end(struct verify_pass *p)
{
    if (p->open) {
        p->open = false;
        p->gate->end(p->gate->arg);
    }
}

/* verify_snapshot, the scan's snapshot hook: its read transaction began,
 * so the gate goes. */
static void verify_snapshot(void *data, uint64_t index)
{
    (void)index;
    verify_pass_end(data);
}

char *verify_json(const char *path, const struct sql_copy_gate *gate,
                  char *differ_out, size_t differ_len, char *errmsg,
                  size_t errmsg_len)
{
    struct sql_verify_hooks hooks = {NULL, verify_snapshot, NULL};
    struct verify_pass pass = {gate, false};
    struct sql_verify v;
    json_t *o, *differ;
    char *text;
    int rc;

    differ_out[0] = '\0';
    hooks.data = &pass;
    if (gate != NULL) {
        if (gate->begin(gate->arg, errmsg, errmsg_len) != 0) {
            return NULL;
        }
        pass.open = true;
    }
    rc = sql_checksum_verify_hooked(path, &hooks, &v, errmsg, errmsg_len);
    verify_pass_end(&pass);
    if (rc != 0) {
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
