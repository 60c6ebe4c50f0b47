/* PRAGMA policy of raft_exec requests (private to sql/): which pragmas a
 * request may run, which become cluster-wide settings stored in the
 * database, and which are refused. The policy and the reasons are listed
 * in pragma.c. */

#ifndef SQL_PRAGMA_H
#define SQL_PRAGMA_H

#include <sqlite3ext.h>

/* What to do with a PRAGMA found in a request. */
enum sql_pragma_action {
    SQL__PRAGMA_RUN = 1, /* run it as written (query or safe setting) */
    SQL__PRAGMA_SETTING, /* store it as a cluster-wide setting */
    SQL__PRAGMA_REFUSE,  /* refuse it: SQL error naming the pragma */
};

/* pragma_classify returns the action for PRAGMA @name (as written, any
 * case) with value @value (NULL for a query without a value), written
 * with schema name @schema ("main" in PRAGMA main.x; NULL when none: the
 * table-valued form pragma_x() never has one for data_version). For
 * SQL__PRAGMA_SETTING, *@out_setting receives the setting's index for
 * pragma_setting_name and pragma_setting_apply. Pure; any thread. */
enum sql_pragma_action pragma_classify(const char *name, const char *value,
                                       const char *schema, int *out_setting);

/* pragma_bool parses @value as a boolean setting: ON, 1, TRUE, YES give 1
 * and OFF, 0, FALSE, NO give 0 (any case) into *@out. Returns 0, or -1 for
 * any other text (and then leaves *@out alone). Pure; any thread. */
int pragma_bool(const char *value, int *out);

/* pragma_setting_count returns the number of cluster-wide settings. */
int pragma_setting_count(void);

/* pragma_setting_name returns the lowercase name of setting @i (0 <= @i <
 * pragma_setting_count()). Static storage. */
const char *pragma_setting_name(int i);

/* pragma_setting_find returns the index of the setting named @name (any
 * case), or -1. Pure; any thread. */
int pragma_setting_find(const char *name);

/* pragma_setting_apply sets setting @i to @value (0 or 1) on connection
 * @db; it works inside a transaction too (foreign_keys goes through
 * sqlite3_db_config, which the PRAGMA would ignore there). The authorizer
 * of @db must allow PRAGMA statements meanwhile. Returns SQLITE_OK or a
 * SQLite error code. Thread: the one using @db. */
int pragma_setting_apply(sqlite3 *db, int i, int value);

#endif /* SQL_PRAGMA_H */
