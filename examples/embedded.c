/* embedded: a C application that holds its own raftsql node, built
 * against the installed package:
 *
 *     cc embedded.c $(pkg-config --cflags --libs raftsql) -o embedded
 *
 * Usage: embedded DBFILE [PORT]
 *
 * It registers raftsql for every connection (sqlite3_auto_extension),
 * opens DBFILE, starts a one-node cluster listening on 127.0.0.1:PORT
 * (7001 by default) with raft_start, waits until the node leads, writes
 * through raft_exec (a table and a row with bound parameters), reads the
 * row back with plain SQL, shows how a program branches on an error's
 * code (a duplicate key keeps SQLite's SQLITE_CONSTRAINT_* code; a bad
 * call is RAFTSQL_INVALID), stops the node and prints "ok". Exits 0 when
 * every step did what it should, 1 otherwise (with why on stderr). A
 * second run on the same DBFILE restarts the node from its log. */

#include <raftsql.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes, reads and checks; 0 when every step went as it should. */
static int run(sqlite3 *db, int port);

int main(int argc, char **argv)
{
    sqlite3 *db = NULL;
    int port = argc > 2 ? atoi(argv[2]) : 7001;
    int rc;

    if (argc < 2 || argc > 3 || port <= 0 || port > 65535) {
        fprintf(stderr, "usage: embedded DBFILE [PORT]\n");
        return 2;
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    if (sqlite3_open(argv[1], &db) != SQLITE_OK) {
        fprintf(stderr, "embedded: %s: %s\n", argv[1], sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    rc = run(db, port);
    /* The node belongs to the process: stop it before leaving. */
    sqlite3_exec(db, "SELECT raft_stop()", NULL, NULL, NULL);
    sqlite3_close(db);
    return rc == 0 ? 0 : 1;
}

/* step1 prepares @sql on @db, binds the text @param (may be NULL) to ?1
 * and the integer @num to ?2 when the SQL has them, steps once and
 * copies column 0 as text into @out (@out_len bytes; "" for NULL or no
 * row). Returns SQLite's result: SQLITE_OK for a row or none, else the
 * statement's error code (sqlite3_extended_errcode(db) then tells the
 * kind). */
static int step1(sqlite3 *db, const char *sql, const char *param,
                 sqlite3_int64 num, char *out, size_t out_len)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    out[0] = '\0';
    if (rc == SQLITE_OK) {
        if (sqlite3_bind_parameter_count(stmt) >= 1) {
            sqlite3_bind_text(stmt, 1, param, -1, SQLITE_STATIC);
        }
        if (sqlite3_bind_parameter_count(stmt) >= 2) {
            sqlite3_bind_int64(stmt, 2, num);
        }
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            const unsigned char *v = sqlite3_column_text(stmt, 0);
            snprintf(out, out_len, "%s", v != NULL ? (const char *)v : "");
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(stmt);
    return rc;
}

static int run(sqlite3 *db, int port)
{
    char config[128], value[1024];
    int code;

    /* One voter: it elects itself within an election timeout. */
    snprintf(config, sizeof config,
             "id=1 cluster=1@127.0.0.1:%d election_timeout_ms=300 "
             "heartbeat_ms=30",
             port);
    if (step1(db, "SELECT raft_start(?1)", config, 0, value, sizeof value) !=
        SQLITE_OK) {
        fprintf(stderr, "embedded: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    printf("%s\n", value);
    for (int i = 0; i < 200; i++) { /* at most 10 s */
        if (step1(db, "SELECT raft_leader()", NULL, 0, value, sizeof value) ==
                SQLITE_OK &&
            strcmp(value, "1") == 0) {
            break;
        }
        sqlite3_sleep(50);
    }
    if (strcmp(value, "1") != 0) {
        fprintf(stderr, "embedded: no leader within 10 s\n");
        return 1;
    }

    /* Writes go through the log; the call returns once applied here. A
     * second run finds the table and the row already there. */
    if (step1(db,
              "SELECT raft_exec('CREATE TABLE IF NOT EXISTS kv("
              "k TEXT PRIMARY KEY, v INTEGER)')",
              NULL, 0, value, sizeof value) != SQLITE_OK ||
        step1(db,
              "SELECT raft_exec('INSERT OR REPLACE INTO kv VALUES(?, ?)', "
              "?1, ?2)",
              "greeting", 42, value, sizeof value) != SQLITE_OK) {
        fprintf(stderr, "embedded: raft_exec: %s (code %d)\n",
                sqlite3_errmsg(db), sqlite3_extended_errcode(db));
        return 1;
    }
    printf("raft_exec changed %s row\n", value);

    /* Reads are plain local SQL. */
    if (step1(db, "SELECT v FROM kv WHERE k = ?1", "greeting", 0, value,
              sizeof value) != SQLITE_OK ||
        strcmp(value, "42") != 0) {
        fprintf(stderr, "embedded: read back '%s', not 42: %s\n", value,
                sqlite3_errmsg(db));
        return 1;
    }
    printf("read greeting = %s\n", value);

    /* A SQL error keeps SQLite's own code: rolled back on every node. */
    step1(db, "SELECT raft_exec('INSERT INTO kv VALUES(?, 1)', ?1)", "greeting",
          0, value, sizeof value);
    code = sqlite3_extended_errcode(db);
    if (code != SQLITE_CONSTRAINT_PRIMARYKEY) {
        fprintf(stderr, "embedded: a duplicate key gave code %d (%s)\n", code,
                sqlite3_errmsg(db));
        return 1;
    }
    printf("duplicate key: %s (SQLITE_CONSTRAINT_PRIMARYKEY)\n",
           sqlite3_errmsg(db));

    /* raftsql's own codes say what happened and what to do. */
    step1(db, "SELECT raft_exec(42)", NULL, 0, value, sizeof value);
    code = sqlite3_extended_errcode(db);
    switch (code) {
        case RAFTSQL_INVALID: /* fix the call: a retry fails alike */
            printf("bad call: %s (RAFTSQL_INVALID)\n", sqlite3_errmsg(db));
            break;
        case RAFTSQL_NOT_APPLIED: /* nothing applied: retry */
        case RAFTSQL_UNKNOWN:     /* applied everywhere or nowhere */
        default:
            fprintf(stderr, "embedded: raft_exec(42) gave code %d (%s)\n", code,
                    sqlite3_errmsg(db));
            return 1;
    }
    printf("ok\n");
    return 0;
}
