"""raft_load_sql() of a script through a cluster: resumed after a
failure ("outcome unknown", a fixed script) without applying a chunk
twice, its errors naming the chunk and the line, a sqlite3 .dump loaded
whole, and a load beyond the request-id window. Split from
test_backup.py, whose shared cluster it sets up the same way (the
Chinook database when ../shared/data is there, else a generated one), so
that the two files run side by side.
"""

import json
import os
import sqlite3
import subprocess
import sys
import unittest

from codes import CODES  # noqa: E402
from e2e import NODE, ROOT, connect, wait_for  # noqa: E402
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402
from test_backup import (FAST, SQLITE_CONSTRAINT, Cluster3,  # noqa: E402
                         SharedCluster, source_script)

sys.path.insert(0, os.path.join(ROOT, "tools"))
from fingerprint import fingerprint  # noqa: E402


class LoadSqlTest(SharedCluster):
    """raft_load_sql on the shared cluster, and on clusters of its own."""

    def test_load_sql_resumes_after_an_unknown_outcome(self):
        """raft_load_sql of the script into a fresh cluster: the answer
        of its second chunk is lost (test fault RAFTSQL_TEST_DROP_ID_RESULT
        on that chunk's id), so the load stops with "outcome unknown"
        although the chunk applied; the rerun skips the chunks applied
        (duplicates) and applies the rest: every row once (Chinook's
        primary keys would refuse a second copy), fingerprints equal to
        the source's on every node. A third run, from another process,
        applies nothing. The lost answer ends its wait at once, so the
        nodes keep this file's generous exec_timeout_ms: a chunk that
        applies slowly (a loaded machine, under a sanitizer) is not of
        unknown outcome."""
        script = source_script(self.source,
                               os.path.join(self.dir, "dump.sql"))
        # Chunk 2's id (load2:<chunk number>:<chain>), of the only load of
        # this cluster.
        prefix = "load2:1:"
        c = Cluster3(self.dir, "c", None,
                     env={2: {"RAFTSQL_TEST_DROP_ID_RESULT": prefix}})
        self.extra.append(c)
        c.settle()
        two = c.nodes[1]
        with self.assertRaises(NodeError) as cm:
            two.value("SELECT raft_load_sql(?)", script)
        err = str(cm.exception)
        self.assertIn("raft_load_sql: chunk 2 of ", err)
        self.assertIn("outcome unknown", err)
        self.assertIn("run raft_load_sql again to resume", err)
        load = two.status()["load"]
        self.assertEqual(load["state"], "failed", load)
        self.assertEqual(load["chunks_done"], 1, load)
        n_chunks = load["chunks"]
        self.assertGreaterEqual(n_chunks, 3)

        r = json.loads(two.value("SELECT raft_load_sql(?)", script))
        self.assertEqual(r["chunks"], n_chunks)
        self.assertEqual(r["skipped"], 2, r)
        self.assertEqual(r["applied"], n_chunks - 2, r)
        load = two.status()["load"]
        self.assertEqual((load["state"], load["chunks_done"],
                          load["bytes_done"]),
                         ("done", n_chunks, load["bytes"]), load)
        c.settle()
        for n in c.nodes:
            self.assertEqual(fingerprint(n.db), self.expected, n.id)

        con = connect(c.nodes[2].db)
        try:
            r = json.loads(con.execute("SELECT raft_load_sql(?)",
                                       (script,)).fetchone()[0])
        finally:
            con.close()
        self.assertEqual((r["applied"], r["skipped"]), (0, n_chunks), r)

    def test_load_sql_error_names_the_chunk_and_line(self):
        """A chunk's SQL error stops the load naming the chunk and the
        line of its failing statement; the chunk rolled back everywhere;
        a statement that fails the check before the first chunk (no such
        table), a missing file and a script with a ROLLBACK are refused
        before anything is written."""
        one = self.a.nodes[0]
        one.value("SELECT raft_exec(?)", "CREATE TABLE loaded_key(k "
                  "PRIMARY KEY)")
        one.value("SELECT raft_exec(?)", "INSERT INTO loaded_key VALUES(7)")
        bad = os.path.join(self.dir, "bad.sql")
        with open(bad, "w") as f:
            f.write("-- a script\n\nCREATE TABLE loaded(x);\n"
                    "INSERT INTO loaded VALUES('a;b');\n"
                    "INSERT INTO loaded_key VALUES(7);\n")
        with self.assertRaises(NodeError) as cm:
            one.value("SELECT raft_load_sql(?)", bad)
        self.assertIn("raft_load_sql: chunk 1 of 1 (%s line 5: INSERT INTO "
                      "loaded_key VALUES(7);): UNIQUE constraint failed: "
                      "loaded_key.k" % bad, str(cm.exception))
        self.assertEqual(cm.exception.code & 0xff, SQLITE_CONSTRAINT)
        for n in self.a.nodes:
            self.assertEqual(n.sql("SELECT name FROM sqlite_master WHERE "
                                   "name = 'loaded'"), [])
        with open(bad, "w") as f:
            f.write("-- a script\n\nCREATE TABLE loaded(x);\n"
                    "INSERT INTO loaded VALUES('a;b');\n"
                    "INSERT INTO nosuch VALUES(1);\n")
        commit = one.status()["commit"]
        with self.assertRaises(NodeError) as cm:
            one.value("SELECT raft_load_sql(?)", bad)
        self.assertIn("raft_load_sql: %s: line 5: INSERT INTO nosuch "
                      "VALUES(1);: no such table: nosuch" % bad,
                      str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        self.assertEqual(one.status()["commit"], commit)
        for n in self.a.nodes:
            self.assertEqual(n.sql("SELECT name FROM sqlite_master WHERE "
                                   "name = 'loaded'"), [])
        with self.assertRaises(NodeError) as cm:
            one.value("SELECT raft_load_sql(?)",
                      os.path.join(self.dir, "nofile.sql"))
        self.assertIn("nofile.sql: No such file or directory",
                      str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        with open(bad, "w") as f:
            f.write("INSERT INTO x VALUES(1);\nROLLBACK;\n")
        with self.assertRaises(NodeError) as cm:
            one.value("SELECT raft_load_sql(?)", bad)
        self.assertIn("line 2: ROLLBACK", str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])

    def test_load_sql_of_a_sqlite3_dump(self):
        """The script of the sqlite3 shell's .dump loads as it is: its
        PRAGMA foreign_keys=OFF, its own transaction, the sqlite_sequence
        of an AUTOINCREMENT table, a trigger, a view and an index whose
        texts hold ';', blobs; every node then holds the source's rows,
        sequence and schema objects. A second load applies only the
        PRAGMA again."""
        src = os.path.join(self.dir, "dumped.db")
        con = sqlite3.connect(src, isolation_level=None)
        con.executescript(
            "CREATE TABLE dump_author(id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " name TEXT NOT NULL, photo BLOB);"
            "CREATE TABLE dump_book(id INTEGER PRIMARY KEY, author INTEGER"
            " REFERENCES dump_author(id), title TEXT, price REAL);"
            "CREATE TABLE dump_audit(at INTEGER, what TEXT);"
            "CREATE INDEX dump_book_author ON dump_book(author, title);"
            "CREATE TRIGGER dump_book_ins AFTER INSERT ON dump_book BEGIN"
            " INSERT INTO dump_audit VALUES(new.id, 'book; added');"
            " UPDATE dump_audit SET what = what || ';' WHERE at = new.id;"
            " END;"
            "CREATE VIEW dump_titles AS SELECT a.name, b.title FROM"
            " dump_book b JOIN dump_author a ON a.id = b.author"
            " WHERE b.title <> ';';")
        for i in range(1, 41):
            con.execute("INSERT INTO dump_author(name, photo) VALUES (?, ?)",
                        ("author;%d'" % i, os.urandom(i * 7)))
        con.execute("DELETE FROM dump_author WHERE id > 35")
        for i in range(1, 61):
            con.execute("INSERT INTO dump_book VALUES (?, ?, ?, ?)",
                        (i, i % 35 + 1, "title\n%d; END;" % i, i / 8.0))
        con.close()
        script = os.path.join(self.dir, "dumped.sql")
        with open(script, "w") as f:
            subprocess.run(["sqlite3", "-init", "/dev/null", "-batch", src,
                            ".dump"], stdout=f, check=True, timeout=30)
        with open(script) as f:
            text = f.read()
        self.assertTrue(text.startswith("PRAGMA foreign_keys=OFF;\n"
                                        "BEGIN TRANSACTION;\n"), text[:80])
        self.assertIn("INSERT INTO sqlite_sequence VALUES('dump_author',40)",
                      text)

        def content(db):
            c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
            try:
                out = {t: c.execute("SELECT * FROM %s ORDER BY rowid" %
                                    t).fetchall()
                       for t in ("dump_author", "dump_book", "dump_audit",
                                 "dump_titles")}
                out["seq"] = c.execute(
                    "SELECT seq FROM sqlite_sequence WHERE name = "
                    "'dump_author'").fetchall()
                out["schema"] = c.execute(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master "
                    "WHERE name LIKE 'dump%' ORDER BY name").fetchall()
                return out
            finally:
                c.close()
        want = content(src)
        self.assertEqual(len(want["dump_book"]), 60)
        self.assertEqual(len(want["schema"]), 6)
        two = self.a.nodes[1]
        r = json.loads(two.value("SELECT raft_load_sql(?)", script))
        self.assertEqual((r["applied"], r["skipped"]), (r["chunks"], 0), r)
        self.a.settle()
        for n in self.a.nodes:
            self.assertEqual(content(n.db), want, n.id)
        # Again: only the PRAGMA (sent without an id) applies again.
        again = json.loads(two.value("SELECT raft_load_sql(?)", script))
        self.assertEqual((again["applied"], again["skipped"]),
                         (1, r["chunks"] - 1), again)
        self.a.settle()
        for n in self.a.nodes:
            self.assertEqual(content(n.db), want, n.id)

    def test_load_sql_beyond_the_request_id_window(self):
        """The chunks' ids count in the request id window like any
        raft_exec_id: a rerun whose chunks left it (request_id_window=2 on
        a lone node, three chunks) applies them again, so a table without
        a key holds its rows twice (within the window the rerun skips
        them: the other load tests)."""
        script = os.path.join(self.dir, "window.sql")
        with open(script, "w") as f:
            f.write("CREATE TABLE IF NOT EXISTS w(x);\n")
            f.write("".join("INSERT INTO w VALUES(%d);\n" % i
                            for i in range(2500)))
        port = free_ports(1)[0]
        db = os.path.join(self.dir, "window.db")
        n = Node(NODE, 1, db, db + ".log")
        try:
            n.sql("SELECT raft_start(?)", "id=1 cluster=1@127.0.0.1:%d %s "
                  "request_id_window=2" % (port, FAST))
            wait_for("a leader", lambda: n.value("SELECT raft_leader()"))
            r = json.loads(n.value("SELECT raft_load_sql(?)", script))
            self.assertEqual((r["chunks"], r["applied"]), (3, 3), r)
            r = json.loads(n.value("SELECT raft_load_sql(?)", script))
            self.assertEqual((r["applied"], r["skipped"]), (3, 0), r)
            self.assertEqual(n.value("SELECT count(*) FROM w"), 5000)
        finally:
            self.assertEqual(n.stop(), 0)

    def test_load_sql_resumes_after_the_script_is_fixed(self):
        """A script whose fourth chunk (of five) fails on a statement: the
        error names that statement's file and line; the three chunks
        before stay applied. The line fixed, the rerun skips those three
        (their ids chain over the chunks before and are unchanged) and
        applies the other two: every row once, on every node."""
        three = self.a.nodes[2]
        # A row already in the cluster: the check before the first chunk
        # (the replica's schema, none of its rows) cannot see the
        # conflict; the load finds it at its chunk.
        three.value("SELECT raft_exec(?)", "CREATE TABLE resume_pre(id "
                    "INTEGER PRIMARY KEY)")
        three.value("SELECT raft_exec(?)", "INSERT INTO resume_pre "
                    "VALUES(3500)")
        lines = ["CREATE TABLE resume_t(id INTEGER PRIMARY KEY, v TEXT);"]
        lines += ["INSERT INTO resume_t VALUES(%d, 'row %d');" % (i, i)
                  for i in range(1, 5000)]
        good = lines[3500]
        lines[3500] = "INSERT INTO resume_pre VALUES(3500);"
        script = os.path.join(self.dir, "resume.sql")
        with open(script, "w") as f:
            f.write("\n".join(lines) + "\n")
        with self.assertRaises(NodeError) as cm:
            three.value("SELECT raft_load_sql(?)", script)
        self.assertIn("raft_load_sql: chunk 4 of 5 (%s line 3501: INSERT "
                      "INTO resume_pre VALUES(3500);): UNIQUE constraint "
                      "failed: resume_pre.id" % script, str(cm.exception))
        load = three.status()["load"]
        self.assertEqual((load["state"], load["chunks_done"], load["applied"],
                          load["skipped"]), ("failed", 3, 3, 0), load)
        self.a.settle()
        for n in self.a.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM resume_t"), 2999)

        lines[3500] = good
        with open(script, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = json.loads(three.value("SELECT raft_load_sql(?)", script))
        self.assertEqual((r["chunks"], r["skipped"], r["applied"]), (5, 3, 2),
                         r)
        load = three.status()["load"]
        self.assertEqual((load["state"], load["skipped"], load["applied"]),
                         ("done", 3, 2), load)
        self.a.settle()
        for n in self.a.nodes:
            self.assertEqual(n.sql("SELECT count(*), sum(id) FROM "
                                   "resume_t"), [[4999, 4999 * 5000 // 2]],
                             n.id)


if __name__ == "__main__":
    unittest.main()
