/* read_barrier: a C program that makes a linearizable read with
 * raftsql_barrier() (ext/raftsql.h) through the raftsql node another
 * process runs for a database file.
 *
 * Usage: read_barrier DBFILE TABLE
 *
 * It registers raftsql (linked from build/libraftsql.a), opens DBFILE,
 * calls raftsql_barrier() (forwarded to the node: no raft_start here),
 * then counts the rows of TABLE and prints "barrier <index> rows <count>":
 * the count includes every write acknowledged before the barrier. Exits
 * 1 with the error on a failure (e.g. "raft_barrier: no quorum confirmed
 * this node still leads within 1000 ms"). */

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include <raftsql.h>

int main(int argc, char **argv)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    char errmsg[512] = "";
    char sql[300];
    int64_t index = 0;
    int rc;

    if (argc != 3) {
        fprintf(stderr, "usage: read_barrier DBFILE TABLE\n");
        return 2;
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    rc = sqlite3_open(argv[1], &db);
    if (rc != SQLITE_OK) {
        fprintf(stderr, "read_barrier: %s\n", sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    rc = raftsql_barrier(db, &index, errmsg, sizeof errmsg);
    if (rc != SQLITE_OK) {
        fprintf(stderr, "read_barrier: %s (code %d)\n", errmsg, rc);
        sqlite3_close(db);
        return 1;
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", argv[2]);
    rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
        printf("barrier %lld rows %lld\n", (long long)index,
               (long long)sqlite3_column_int64(stmt, 0));
    } else {
        fprintf(stderr, "read_barrier: %s\n", sqlite3_errmsg(db));
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : 1;
}
