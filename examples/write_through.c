/* write_through: a C program that writes through the raftsql node another
 * process runs for a database file, then reads its own write.
 *
 * Usage: write_through DBFILE KEY VALUE
 *
 * It registers raftsql (linked from build/libraftsql.a), opens DBFILE,
 * runs raft_exec('INSERT OR REPLACE INTO kv VALUES(?, ?)', KEY, VALUE)
 * (forwarded to the node: no raft_start here), then SELECTs the row and
 * prints "applied <rows> read <value>". Exits 1 with SQLite's message on
 * an error. */

#include <sqlite3.h>
#include <stdio.h>

#include <raftsql.h>

int main(int argc, char **argv)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    long long changes = -1;
    int rc;

    if (argc != 4) {
        fprintf(stderr, "usage: write_through DBFILE KEY VALUE\n");
        return 2;
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    rc = sqlite3_open(argv[1], &db);
    if (rc == SQLITE_OK) {
        rc = sqlite3_prepare_v2(db,
                                "SELECT raft_exec('INSERT OR REPLACE INTO kv "
                                "VALUES(?, ?)', ?1, ?2)",
                                -1, &stmt, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, argv[2], -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 2, argv[3], -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            changes = sqlite3_column_int64(stmt, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(stmt);
    stmt = NULL;
    if (rc == SQLITE_OK) {
        rc = sqlite3_prepare_v2(db, "SELECT v FROM kv WHERE k = ?1", -1, &stmt,
                                NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, argv[2], -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            printf("applied %lld read %s\n", changes,
                   (const char *)sqlite3_column_text(stmt, 0));
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            printf("applied %lld read nothing\n", changes);
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        fprintf(stderr, "write_through: %s\n", sqlite3_errmsg(db));
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : 1;
}
