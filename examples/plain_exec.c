/* plain_exec: a C program that writes plain SQL with sqlite3_exec on a
 * database file whose raftsql node another process runs: it loads the
 * extension at run time, as any SQLite program can, and writes no
 * raft_exec: each commit is replicated through that node.
 *
 * Usage: plain_exec DBFILE EXTENSION SQL
 *
 * It opens DBFILE, loads EXTENSION (e.g. build/raftsql) with
 * sqlite3_load_extension, sets a busy timeout of 5 s (the node's applier
 * and other writers share the file's write lock), runs SQL (one or more
 * statements) with sqlite3_exec, and prints "changes <total> rowid
 * <last insert rowid>". Exits 1 with SQLite's message and extended code
 * on an error (a refused COMMIT included). */

#include <sqlite3.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    sqlite3 *db = NULL;
    char *err = NULL;
    int rc;

    if (argc != 4) {
        fprintf(stderr, "usage: plain_exec DBFILE EXTENSION SQL\n");
        return 2;
    }
    rc = sqlite3_open(argv[1], &db);
    if (rc == SQLITE_OK) {
        rc = sqlite3_enable_load_extension(db, 1);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_load_extension(db, argv[2], NULL, &err);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_busy_timeout(db, 5000);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(db, argv[3], NULL, NULL, &err);
    }
    if (rc != SQLITE_OK) {
        fprintf(stderr, "plain_exec: %s (code %d)\n",
                err != NULL ? err : sqlite3_errmsg(db),
                sqlite3_extended_errcode(db));
        sqlite3_free(err);
        sqlite3_close(db);
        return 1;
    }
    printf("changes %d rowid %lld\n", sqlite3_total_changes(db),
           (long long)sqlite3_last_insert_rowid(db));
    sqlite3_close(db);
    return 0;
}
