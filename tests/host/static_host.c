/* static_host.c - a host with its own SQLite: this program links SQLite
 * statically (libsqlite3.a, its symbols not exported), loads the raftsql
 * loadable extension through that copy, and checks the process still holds
 * one SQLite while a one-node cluster writes and reads.
 *
 * Usage: static-host RAFTSQL_SO DB_PATH PORT
 * Exits 0 when all went well; otherwise prints what failed and exits 1.
 * A raftsql.so that links libsqlite3 (as it once did) makes the loader
 * bring in the system's libsqlite3.so.0 beside this copy: two SQLites on
 * one file in one process, SQLite's documented way to corrupt it (closing
 * a file in one copy drops the POSIX locks the other holds). */

#include <link.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* find_sqlite_lib notes the first loaded object named libsqlite3. */
static int find_sqlite_lib(struct dl_phdr_info *info, size_t size, void *data)
{
    char *found = data;
    (void)size;
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libsqlite3")) {
        snprintf(found, 512, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* one_text runs @sql on @db and copies the first column of its first row
 * (or the error) into @out. Returns the SQLite code. */
static int one_text(sqlite3 *db, const char *sql, char *out, size_t len)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    out[0] = '\0';
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            snprintf(out, len, "%s", t != NULL ? (const char *)t : "NULL");
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        snprintf(out, len, "%s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return rc;
}

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "static-host: %s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv)
{
    char buf[1024], sql[512], lib[512] = "";
    sqlite3 *db = NULL, *reader = NULL;
    char *err = NULL;
    int rc = 1;

    if (argc != 4) {
        fprintf(stderr, "usage: static-host RAFTSQL_SO DB_PATH PORT\n");
        return 2;
    }
    if (sqlite3_open(argv[2], &db) != SQLITE_OK) {
        return fail("open", sqlite3_errmsg(db));
    }
    sqlite3_enable_load_extension(db, 1);
    if (sqlite3_load_extension(db, argv[1], NULL, &err) != SQLITE_OK) {
        rc = fail("load_extension", err != NULL ? err : "?");
        sqlite3_free(err);
        goto out;
    }
    if (dl_iterate_phdr(find_sqlite_lib, lib) != 0) {
        rc = fail("a second SQLite was loaded beside this program's", lib);
        goto out;
    }
    snprintf(sql, sizeof sql,
             "SELECT raft_start('id=1 cluster=1@127.0.0.1:%s "
             "election_timeout_ms=300 heartbeat_ms=30')",
             argv[3]);
    if (one_text(db, sql, buf, sizeof buf) != SQLITE_OK) {
        rc = fail("raft_start", buf);
        goto out;
    }
    /* At most 10 s for the node to elect itself. */
    for (int i = 0; i < 200; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        if (one_text(db, "SELECT raft_leader()", buf, sizeof buf) ==
                SQLITE_OK &&
            strcmp(buf, "1") == 0) {
            break;
        }
        nanosleep(&ts, NULL);
    }
    if (strcmp(buf, "1") != 0) {
        rc = fail("raft_leader", "no leader within 10 s");
        goto stop;
    }
    if (one_text(db, "SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')",
                 buf, sizeof buf) != SQLITE_OK ||
        one_text(db,
                 "SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', "
                 "'k', 42)",
                 buf, sizeof buf) != SQLITE_OK) {
        rc = fail("raft_exec", buf);
        goto stop;
    }
    /* The write is applied (by raftsql's connection, opened through this
     * program's SQLite) before raft_exec returns: a second connection of
     * this program reads it. */
    if (sqlite3_open(argv[2], &reader) != SQLITE_OK ||
        one_text(reader, "SELECT v FROM kv WHERE k = 'k'", buf, sizeof buf) !=
            SQLITE_OK ||
        strcmp(buf, "42") != 0) {
        rc = fail("read back", buf);
        goto stop;
    }
    if (dl_iterate_phdr(find_sqlite_lib, lib) != 0) {
        rc = fail("a second SQLite was loaded beside this program's", lib);
        goto stop;
    }
    printf("static-host: ok: SQLite %s, one copy, kv.k = %s\n",
           sqlite3_libversion(), buf);
    rc = 0;
stop:
    if (one_text(db, "SELECT raft_stop()", buf, sizeof buf) != SQLITE_OK) {
        rc = fail("raft_stop", buf);
    }
out:
    sqlite3_close(reader);
    sqlite3_close(db);
    return rc;
}
