"""A .dump loads whole through raft_load_sql: the sqlite3 shell's dump of
a replica (its raftsql_* tables left out: they are the replica's own
state) loads into a fresh cluster, its tables equal on every node; the
dump of a plain database with FTS3, FTS4, FTS5, R*Tree and rtree_i32
tables (declared by writing sqlite_schema under PRAGMA writable_schema,
their shadow tables as ordinary ones) loads, and queries answer on every
node as on a copy loaded by the stock shell (sqlite3 new.db < dump.sql);
a script with a statement that cannot load is refused before its first
chunk: no commit index moves, no table appears, the cluster's settings
stay; so is one with a statement that raft_exec's policy refuses (VACUUM,
ATTACH, a TEMP table, sqlite_version(), 'localtime', a PRAGMA that is not
replicated), with raft_exec's own reason and code, and one with a
parameter that no value binds.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile

from codes import CODES
from e2e import NODE, ClusterCase, stop_cluster
from raftsql_cluster import Cluster, NodeError

FAST = "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=10000"

# The virtual tables of the tests and rows for them.
VTABS = [
    "CREATE VIRTUAL TABLE d_f3 USING fts3(body)",
    "CREATE VIRTUAL TABLE d_f4 USING fts4(title, body, tokenize=porter)",
    "CREATE VIRTUAL TABLE \"d f5\" USING fts5(title, body, "
    "tokenize='porter ascii')",
    "CREATE VIRTUAL TABLE d_rt USING rtree(id, x0, x1, y0, y1, +label)",
    "CREATE VIRTUAL TABLE d_ri USING rtree_i32(id, a0, a1)",
    "CREATE TABLE d_plain(id INTEGER PRIMARY KEY, v TEXT, b BLOB)",
    "CREATE TABLE d_rt_extra(x)",
]
ROWS = (
    ["INSERT INTO d_f3(docid, body) VALUES(%d, 'raft log %d; it''s %s')"
     % (i, i, "odd" if i % 2 else "even") for i in range(1, 40)] +
    ["INSERT INTO d_f4 VALUES('title %d', 'running consensus %d')" % (i, i)
     for i in range(1, 40)] +
    ["INSERT INTO \"d f5\"(rowid, title, body) VALUES(%d, 'n%d', "
     "'replicated state machines %d')" % (i * 3, i, i) for i in range(1, 40)] +
    ["INSERT INTO \"d f5\"(\"d f5\", rank) VALUES('automerge', 2)"] +
    ["INSERT INTO d_rt VALUES(%d, %d.5, %d.25, -%d, %d, 'box %d')"
     % (i, i, i + 3, i, i, i) for i in range(1, 60)] +
    ["INSERT INTO d_ri VALUES(%d, %d, %d)" % (i, -i, i * 2)
     for i in range(1, 30)] +
    ["INSERT INTO d_plain VALUES(%d, 'v''%d', x'00ff%02x')" % (i, i, i)
     for i in range(1, 30)] +
    ["DELETE FROM d_f3 WHERE docid = 5", "DELETE FROM d_rt WHERE id = 7",
     "INSERT INTO d_rt_extra VALUES(1)"]
)
QUERIES = [
    "SELECT docid, body FROM d_f3 WHERE d_f3 MATCH 'odd' ORDER BY docid",
    "SELECT rowid, title FROM d_f4 WHERE d_f4 MATCH 'runs' ORDER BY rowid",
    "SELECT rowid, title, body FROM \"d f5\" WHERE \"d f5\" MATCH "
    "'replicate' ORDER BY rank, rowid",
    "SELECT k, v FROM \"d f5_config\" ORDER BY k",
    "SELECT id, x0, x1, y0, y1, label FROM d_rt WHERE x0 > 10 AND y1 < 40 "
    "ORDER BY id",
    "SELECT * FROM d_rt ORDER BY id",
    "SELECT * FROM d_ri WHERE a0 < -20 ORDER BY id",
    "SELECT * FROM d_plain ORDER BY id",
    "SELECT * FROM d_rt_extra",
    "SELECT count(*) FROM d_f4 WHERE d_f4 MATCH 'consensus'",
]


def dump(db):
    """The sqlite3 shell's .dump of @db (opened read-only)."""
    return subprocess.run(["sqlite3", "-init", "/dev/null", "-batch",
                           "file:%s?mode=ro" % db, ".dump"],
                          capture_output=True, text=True, check=True,
                          timeout=60).stdout


def answers(node_or_db):
    """The rows of QUERIES on a node, or on a plain database file."""
    if isinstance(node_or_db, str):
        con = sqlite3.connect(node_or_db)
        try:
            return [[list(r) for r in con.execute(q).fetchall()]
                    for q in QUERIES]
        finally:
            con.close()
    return [[[bytes.fromhex(v["blob"]) if isinstance(v, dict) else v
              for v in r] for r in node_or_db.sql(q)] for q in QUERIES]


class DumpTest(ClusterCase):
    """A fresh 3-node cluster per test; a second one where a test needs
    it."""

    def setUp(self):
        self.start(FAST, prefix="raftsql-e2e-dump-")
        self.other = None

    def tearDown(self):
        if self.other is not None:
            codes = stop_cluster(self.other)
            self.assertEqual(codes, [0, 0, 0])
        super().tearDown()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def settle(self, cluster):
        """Wait until every node of @cluster applied what any of them did
        (a load's caller may be ahead of the leader's apply)."""
        cluster.wait_leader()
        cluster.wait_applied(max(n.status()["applied"]
                                 for n in cluster.nodes))

    def rows_script(self, n):
        """Sets the cluster's foreign_keys ON; returns the first lines of
        a script: PRAGMA foreign_keys=OFF, BEGIN, table r_a and @n - 1
        rows of it."""
        self.exec(self.leader, "PRAGMA foreign_keys=ON")
        self.settle(self.cluster)
        return (["PRAGMA foreign_keys=OFF;", "BEGIN TRANSACTION;",
                 "CREATE TABLE r_a(id INTEGER PRIMARY KEY, v);"] +
                ["INSERT INTO r_a VALUES(%d, 'v%d');" % (i, i)
                 for i in range(1, n)])

    def marks(self):
        """Each node's (commit index, term), for assert_nothing_loaded."""
        return [(s["commit"], s["term"]) for s in
                (n.status() for n in self.cluster.nodes)]

    def assert_nothing_loaded(self, marks):
        """No commit index moved from @marks (marks()) but by the no-op
        entry of each election since (a loaded machine may see one), no
        node has r_a, the cluster's foreign_keys=ON stays."""
        for (c0, t0), (c1, t1) in zip(marks, self.marks()):
            self.assertTrue(c0 <= c1 <= c0 + (t1 - t0),
                            "commit index %d -> %d, term %d -> %d" % (
                                c0, c1, t0, t1))
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT count(*) FROM sqlite_master WHERE "
                                   "name = 'r_a'"), [[0]])
            self.assertEqual(n.sql("SELECT value FROM raftsql_settings WHERE "
                                   "name = 'foreign_keys'"), [[1]])

    def test_replica_dump_loads_into_a_fresh_cluster(self):
        """The recipe of docs/functions.md (raft_load_sql): sqlite3 app.db .dump of a replica (with
        virtual tables and a cluster-wide PRAGMA setting), then
        raft_load_sql of it into another cluster: whole, its raftsql_*
        tables left out, every node's tables equal to the source's."""
        for sql in VTABS + ROWS:
            self.exec(self.leader, sql)
        self.exec(self.leader, "PRAGMA foreign_keys=ON")
        self.settle(self.cluster)
        want = answers(self.followers[0])
        text = dump(self.followers[0].db)
        self.assertIn("CREATE TABLE raftsql_applied", text)
        self.assertIn("PRAGMA writable_schema=ON;", text)
        script = self.write("replica.sql", text)

        other_dir = os.path.join(self.dir, "other")
        os.mkdir(other_dir)
        self.other = Cluster(NODE, other_dir, 3, FAST)
        lead = self.other.wait_leader()
        r = json.loads(lead.value("SELECT raft_load_sql(?)", script))
        self.assertEqual((r["applied"], r["skipped"]), (r["chunks"], 0), r)
        self.settle(self.other)
        for n in self.other.nodes:
            self.assertEqual(answers(n), want, n.id)
            # The new cluster's own internal state, not the dumped one.
            self.assertNotEqual(n.status()["cluster_id"],
                                self.leader.status()["cluster_id"])

    def test_plain_dump_with_virtual_tables_queries_as_stock_sqlite(self):
        """A plain database's dump with FTS3/4/5 and R*Tree tables: the
        stock shell loads it into a new file; raft_load_sql loads it into
        the cluster; every node answers the queries (MATCH, rank, R*Tree
        ranges, FTS5's configuration) as that file does."""
        src = os.path.join(self.dir, "plain.db")
        con = sqlite3.connect(src, isolation_level=None)
        for sql in VTABS + ROWS:
            con.execute(sql)
        con.close()
        text = dump(src)
        script = self.write("plain.sql", text)
        stock = os.path.join(self.dir, "stock.db")
        with open(script) as f:
            subprocess.run(["sqlite3", "-init", "/dev/null", "-batch", stock],
                           stdin=f, check=True, timeout=60)
        want = answers(stock)
        self.assertEqual(want, answers(src))
        self.assertTrue(all(want[:8]), want)
        r = json.loads(self.followers[1].value("SELECT raft_load_sql(?)",
                                               script))
        self.assertEqual(r["applied"], r["chunks"], r)
        self.settle(self.cluster)
        for n in self.cluster.nodes:
            self.assertEqual(answers(n), want, n.id)
        # Writes through the tables go on after the load.
        self.exec(self.leader, "INSERT INTO \"d f5\"(title, body) VALUES("
                  "'late', 'replicate later')")
        self.settle(self.cluster)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT title FROM \"d f5\" WHERE "
                                   "\"d f5\" MATCH 'later'"), [["late"]])

    def test_quoted_names_load_again_skipped(self):
        """A script whose CREATE statements quote their names, as a .dump
        keeps them ("q t", [Album], `bt`, an index with doubled quotes): loaded
        twice, the second load skips every chunk (its check drops the
        replica's copy of each object the script creates, whatever the
        quotes), and the rows are there once."""
        script = self.write("quoted.sql", "\n".join([
            'CREATE TABLE "q t"(x);',
            "CREATE TABLE [Album](id INTEGER PRIMARY KEY, title);",
            "CREATE TABLE `bt`(x);",
            'CREATE INDEX "ix ""q""" ON "q t"(x);',
            "CREATE VIEW [v a] AS SELECT title FROM [Album];",
            "INSERT INTO \"q t\" VALUES(1);",
            "INSERT INTO [Album] VALUES(1, 'first');",
            "INSERT INTO `bt` VALUES(2);"]) + "\n")
        first = json.loads(self.followers[0].value("SELECT raft_load_sql(?)",
                                                   script))
        self.assertEqual((first["applied"], first["skipped"]),
                         (first["chunks"], 0), first)
        again = json.loads(self.followers[1].value("SELECT raft_load_sql(?)",
                                                   script))
        self.assertEqual((again["applied"], again["skipped"]),
                         (0, first["chunks"]), again)
        self.settle(self.cluster)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql('SELECT (SELECT count(*) FROM "q t"), '
                                   "(SELECT group_concat(title) FROM "
                                   "[v a]), (SELECT count(*) FROM bt)"),
                             [[1, "first", 1]], n.id)

    def test_unloadable_script_refused_before_any_chunk(self):
        """A script whose last statement cannot load (a table that exists
        nowhere) after a PRAGMA foreign_keys=OFF, tables and rows: refused
        naming its line before anything is written (the commit index does
        not move, no table appears, the cluster's foreign_keys=ON stays);
        the script fixed, it loads whole."""
        lines = self.rows_script(3000)
        lines += ["INSERT INTO r_nosuch VALUES(1);", "COMMIT;"]
        script = self.write("bad.sql", "\n".join(lines) + "\n")
        commits = self.marks()
        with self.assertRaises(NodeError) as cm:
            self.followers[0].value("SELECT raft_load_sql(?)", script)
        self.assertEqual(str(cm.exception),
                         "raft_load_sql: %s: line 3003: INSERT INTO r_nosuch "
                         "VALUES(1);: no such table: r_nosuch" % script)
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        self.assert_nothing_loaded(commits)
        lines[-2] = "INSERT INTO r_a VALUES(3000, 'v3000');"
        script = self.write("bad.sql", "\n".join(lines) + "\n")
        r = json.loads(self.followers[0].value("SELECT raft_load_sql(?)",
                                               script))
        self.assertEqual(r["applied"], r["chunks"], r)
        self.settle(self.cluster)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT count(*) FROM r_a"), [[3000]])

    def test_refused_statement_refused_before_any_chunk(self):
        """A script with, in its middle after 1500 rows (two chunks), a
        statement that raft_exec's policy refuses: refused before its
        first chunk, naming its line, with the reason raft_exec gives for
        the same statement and its code (RAFTSQL_REFUSED); no commit index
        moves, no table appears, the cluster's foreign_keys=ON stays. A
        parameter without a value is refused as raft_exec refuses it
        (RAFTSQL_INVALID)."""
        head = self.rows_script(1500)
        tail = ["INSERT INTO r_a VALUES(%d, 'w');" % i
                for i in range(2000, 2010)] + ["COMMIT;"]
        refused = ["VACUUM;", "ATTACH DATABASE ':memory:' AS aux;",
                   "CREATE TEMP TABLE r_tmp(x);", "SELECT sqlite_version();",
                   "SELECT date('now', 'localtime');",
                   "PRAGMA journal_mode=DELETE;"]
        cases = [(stmt, "RAFTSQL_REFUSED") for stmt in refused]
        cases.append(("SELECT ?;", "RAFTSQL_INVALID"))
        for stmt, code in cases:
            with self.subTest(stmt=stmt):
                # raft_exec's answer for the statement alone: its reason.
                with self.assertRaises(NodeError) as cm:
                    self.exec(self.leader, stmt)
                self.assertEqual(cm.exception.code, CODES[code])
                prefix = "raft_exec: not applied: "
                self.assertTrue(str(cm.exception).startswith(prefix),
                                str(cm.exception))
                why = str(cm.exception)[len(prefix):]
                script = self.write("refused.sql",
                                    "\n".join(head + [stmt] + tail) + "\n")
                commits = self.marks()
                with self.assertRaises(NodeError) as cm:
                    self.followers[0].value("SELECT raft_load_sql(?)", script)
                self.assertEqual(str(cm.exception),
                                 "raft_load_sql: %s: line %d: %s: %s"
                                 % (script, len(head) + 1, stmt, why))
                self.assertEqual(cm.exception.code, CODES[code])
                self.assert_nothing_loaded(commits)


class TooBigTest(ClusterCase):
    """A script with a statement larger than max_request_bytes (100000
    here) is refused before its first chunk: the chunk that holds it
    alone would be refused alike at every run, so a load that sent the
    chunks before it would stay half-applied for ever."""

    def setUp(self):
        self.start(FAST + " max_request_bytes=100000",
                   prefix="raftsql-e2e-dump-toobig-")

    def test_statement_over_max_request_bytes_refused_first(self):
        path = os.path.join(self.dir, "big.sql")
        with open(path, "w") as f:
            f.write("CREATE TABLE tb(id INTEGER PRIMARY KEY, v);\n"
                    "INSERT INTO tb VALUES(1, 'small');\n"
                    "INSERT INTO tb VALUES(2, X'%s');\n"
                    "INSERT INTO tb VALUES(3, 'after');\n" % ("ab" * 60000))
        commits = [n.status()["commit"] for n in self.cluster.nodes]
        with self.assertRaises(NodeError) as cm:
            self.followers[0].value("SELECT raft_load_sql(?)", path)
        msg = str(cm.exception)
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_TOOBIG"], msg)
        self.assertIn("not loaded: chunk 2 of 3 (%s line 3: INSERT INTO tb "
                      "VALUES(2, X'abab" % path, msg)
        self.assertIn("exceeds max_request_bytes (100000): raise "
                      "max_request_bytes on every node", msg)
        self.assertEqual([n.status()["commit"] for n in self.cluster.nodes],
                         commits)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT count(*) FROM sqlite_master "
                                   "WHERE name = 'tb'"), [[0]], n.id)
