/* PRAGMA policy of raft_exec requests (see pragma.h).
 *
 * A request runs on every node, so a PRAGMA in it must either change the
 * replicated database file in the same way everywhere or be refused:
 *
 * - Cluster-wide settings: foreign_keys, recursive_triggers,
 *   case_sensitive_like, reverse_unordered_selects. They are connection
 *   flags that change the results of later statements, so setting one is
 *   not run: the value (ON/1/TRUE/YES or OFF/0/FALSE/NO) is stored in
 *   raftsql_settings inside the request's savepoint, and applied to the
 *   apply connection once the request has succeeded, taking effect from
 *   the next request on. Stored values are re-applied on open; a setting
 *   never stored has SQLite's documented default (OFF for all four), not
 *   the build's, so that nodes built differently agree.
 * - Database-scoped pragmas stored in the file: user_version and
 *   application_id run as written.
 * - Queries: a PRAGMA without a value runs (its rows are discarded) only
 *   when it is a read-only query whose answer is the same on every node:
 *   the settings above, user_version, application_id, encoding,
 *   journal_mode, page_size, schema_version, and the introspection
 *   pragmas below. The same holds for their table-valued forms
 *   (pragma_table_info(...)), whose rows a request can store. Any other
 *   query form is refused: some answer with what is local to a node
 *   (database_list gives the file's path; function_list, module_list,
 *   collation_list, pragma_list what this build and process registered),
 *   some have side effects that differ per node or break the apply
 *   transaction (wal_checkpoint, optimize, shrink_memory,
 *   incremental_vacuum...).
 *   PRAGMA <schema>.data_version runs too, as FTS5 asks it from inside
 *   its statements: its rows are discarded, and reading it changes
 *   nothing. Its table-valued form (pragma_data_version(), whose answer
 *   differs per node and could be stored) has no schema name and stays
 *   refused.
 *   Read-only pragmas taking an argument run too: table_info, table_xinfo,
 *   table_list, index_info, index_xinfo, index_list, foreign_key_list,
 *   foreign_key_check, integrity_check, quick_check.
 * - Everything else with a value is refused (journal_mode, synchronous,
 *   cache_size, busy_timeout, temp_store, mmap_size, locking_mode,
 *   writable_schema, defer_foreign_keys, page_size, auto_vacuum,
 *   max_page_count, wal_autocheckpoint and any unknown name):
 *   they are connection-scoped or local to a node, or would break the
 *   apply connection's own transaction handling. */

#include "pragma.h"

#include "sql.h"

#include <stddef.h>
#include <strings.h>

SQLITE_EXTENSION_INIT3

static const char *const settings[] = {
    "foreign_keys",
    "recursive_triggers",
    "case_sensitive_like",
    "reverse_unordered_selects",
};

#define SQL__PRAGMA_N_SETTINGS ((int)(sizeof settings / sizeof settings[0]))

static const char *const with_value_ok[] = {
    "user_version",     "application_id",    "table_info",      "table_xinfo",
    "table_list",       "index_info",        "index_xinfo",     "index_list",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
};

/* Read-only queries allowed without a value (besides with_value_ok and
 * the settings). */
static const char *const query_ok[] = {
    "encoding",
    "journal_mode",
    "page_size",
    "schema_version",
};

static int in_list(const char *name, const char *const *list, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcasecmp(name, list[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

int pragma_setting_count(void)
{
    return SQL__PRAGMA_N_SETTINGS;
}

const char *pragma_setting_name(int i)
{
    return settings[i];
}

int pragma_setting_find(const char *name)
{
    int i;

    for (i = 0; i < SQL__PRAGMA_N_SETTINGS; i++) {
        if (strcasecmp(name, settings[i]) == 0) {
            return i;
        }
    }
    return -1;
}

enum sql_pragma_action pragma_classify(const char *name, const char *value,
                                       const char *schema, int *out_setting)
{
    int i;

    if (value == NULL) {
        if ((schema != NULL && strcasecmp(name, "data_version") == 0) ||
            pragma_setting_find(name) >= 0 ||
            in_list(name, query_ok, sizeof query_ok / sizeof query_ok[0]) ||
            in_list(name, with_value_ok,
                    sizeof with_value_ok / sizeof with_value_ok[0])) {
            return SQL__PRAGMA_RUN;
        }
        return SQL__PRAGMA_REFUSE;
    }
    i = pragma_setting_find(name);
    if (i >= 0) {
        *out_setting = i;
        return SQL__PRAGMA_SETTING;
    }
    if (in_list(name, with_value_ok,
                sizeof with_value_ok / sizeof with_value_ok[0])) {
        return SQL__PRAGMA_RUN;
    }
    return SQL__PRAGMA_REFUSE;
}

int pragma_bool(const char *value, int *out)
{
    static const char *const on[] = {"on", "1", "true", "yes"};
    static const char *const off[] = {"off", "0", "false", "no"};

    if (in_list(value, on, 4)) {
        *out = 1;
        return 0;
    }
    if (in_list(value, off, 4)) {
        *out = 0;
        return 0;
    }
    return -1;
}

int pragma_setting_apply(sqlite3 *db, int i, int value)
{
    char *sql;
    int rc;

    if (i == 0) {
        return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FKEY, value,
                                 (int *)NULL);
    }
    sql = sqlite3_mprintf("PRAGMA %s=%d", settings[i], value ? 1 : 0);
    if (sql == NULL) {
        return SQLITE_NOMEM;
    }
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_free(sql);
    return rc;
}

int sql_setting_count(void)
{
    return pragma_setting_count();
}

const char *sql_setting_name(int i)
{
    return pragma_setting_name(i);
}

int sql_setting_apply(struct sqlite3 *db, int i, int value)
{
    return pragma_setting_apply(db, i, value);
}
