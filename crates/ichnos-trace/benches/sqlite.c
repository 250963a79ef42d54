/* A real program for the function-trace benchmark (sqlite.sh): SQLite's
 * amalgamation built with -finstrument-functions, inserting N rows into an
 * indexed in-memory table in one transaction, then a GROUP BY and 200
 * lookups through the index. Prints its own elapsed time. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sqlite3.h"
static void ok(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) { fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db)); exit(1); }
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    sqlite3 *db;
    ok(sqlite3_open(":memory:", &db), db, "open");
    ok(sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT); CREATE INDEX tk ON t(k);", 0, 0, 0), db, "create");
    ok(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
    sqlite3_stmt *ins;
    ok(sqlite3_prepare_v2(db, "INSERT INTO t(k, v) VALUES(?1, ?2)", -1, &ins, 0), db, "prepare");
    char buf[64];
    for (int i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "value-%d", (i * 7919) % 100003);
        sqlite3_bind_int(ins, 1, (i * 31) % 1000);
        sqlite3_bind_text(ins, 2, buf, -1, SQLITE_TRANSIENT);
        ok(sqlite3_step(ins), db, "insert");
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    ok(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
    sqlite3_stmt *q;
    ok(sqlite3_prepare_v2(db, "SELECT k, count(*), max(v) FROM t GROUP BY k ORDER BY 2 DESC, 1 LIMIT 5", -1, &q, 0), db, "prepare");
    long sum = 0;
    while (sqlite3_step(q) == SQLITE_ROW) sum += sqlite3_column_int(q, 0) + sqlite3_column_int(q, 1);
    sqlite3_finalize(q);
    ok(sqlite3_prepare_v2(db, "SELECT v FROM t WHERE k = ?1", -1, &q, 0), db, "prepare");
    for (int k = 0; k < 200; k++) {
        sqlite3_bind_int(q, 1, k);
        while (sqlite3_step(q) == SQLITE_ROW) sum += sqlite3_column_bytes(q, 0);
        sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "sum %ld\n", sum);
    printf("%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
