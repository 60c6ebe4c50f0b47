"""Virtual tables on a replica: FTS3, FTS4, FTS5, R*Tree (and its
rtree_i32 form) and the eponymous modules (dbstat, fts4aux, fts5vocab,
json_each, ...) read on the leader, on a follower and in other processes
that loaded raftsql on a node's file (Python, the sqlite3 shell), although
R*Tree prepares writes to its shadow tables whenever a connection opens
its table; the direct writes to their shadow tables stay refused there
(SQLite's own refusal on a DEFENSIVE connection), while plain writes to
the virtual tables, and to ordinary tables whose names look like shadow
tables', are replicated as any plain write (on a follower too).
"""

import json

from e2e import ClusterCase
from raftsql_cluster import NodeError
from test_attach import shell, writer

SQLITE_ERROR = 1

SCHEMA = [
    "CREATE VIRTUAL TABLE v_f3 USING fts3(body)",
    "CREATE VIRTUAL TABLE v_f4 USING fts4(title, body)",
    "CREATE VIRTUAL TABLE v_f5 USING fts5(title, body)",
    "CREATE VIRTUAL TABLE v_rt USING rtree(id, x0, x1, y0, y1)",
    "CREATE VIRTUAL TABLE v_ri USING rtree_i32(id, x0, x1)",
    "CREATE VIRTUAL TABLE v_f4aux USING fts4aux(v_f4)",
    "CREATE VIRTUAL TABLE v_f5voc USING fts5vocab(v_f5, row)",
    "CREATE TABLE v_rt_extra(x)",
    "CREATE TABLE v_plain_node(x)",
    "INSERT INTO v_f3 VALUES('hello raft'), ('goodbye paxos')",
    "INSERT INTO v_f4 VALUES('one', 'hello raft'), ('two', 'log entry')",
    "INSERT INTO v_f5 VALUES('one', 'hello raft'), ('two', 'log entry')",
    "INSERT INTO v_rt VALUES(1, 0, 10, 0, 10), (2, 5, 6, 20, 30)",
    "INSERT INTO v_ri VALUES(7, -3, 4)",
]

# (query, rows expected)
READS = [
    ("SELECT rowid, body FROM v_f3 WHERE v_f3 MATCH 'hello'",
     [[1, "hello raft"]]),
    ("SELECT title FROM v_f4 WHERE v_f4 MATCH 'raft'", [["one"]]),
    ("SELECT title FROM v_f5 WHERE v_f5 MATCH 'entry'", [["two"]]),
    ("SELECT id FROM v_rt WHERE x0 >= 4 AND y1 <= 30 ORDER BY id", [[2]]),
    ("SELECT * FROM v_rt ORDER BY id",
     [[1, 0.0, 10.0, 0.0, 10.0], [2, 5.0, 6.0, 20.0, 30.0]]),
    ("SELECT * FROM v_ri", [[7, -3, 4]]),
    ("SELECT term, documents FROM v_f4aux WHERE col = '*' AND term = 'raft'",
     [["raft", 1]]),
    ("SELECT term, doc FROM v_f5voc WHERE term = 'entry'", [["entry", 1]]),
    ("SELECT count(*) > 0 FROM dbstat WHERE name = 'v_rt_node'", [[1]]),
    ("SELECT value FROM json_each('[3]')", [[3]]),
]

# Direct writes to shadow tables and what refuses them: SQLite itself on a
# DEFENSIVE connection (SQLITE_ERROR, "table X may not be modified").
WRITES = [
    ("INSERT INTO v_rt_node VALUES(99, x'00')", SQLITE_ERROR,
     "table v_rt_node may not be modified"),
    ("DELETE FROM v_rt_rowid", SQLITE_ERROR,
     "table v_rt_rowid may not be modified"),
    ("UPDATE v_f5_data SET block = x''", SQLITE_ERROR,
     "table v_f5_data may not be modified"),
    ("INSERT INTO v_f4_content VALUES(9, 'a', 'b')", SQLITE_ERROR,
     "table v_f4_content may not be modified"),
    ("DELETE FROM v_f3_segdir", SQLITE_ERROR,
     "table v_f3_segdir may not be modified"),

]

# Plain writes to the virtual tables and to ordinary tables named like
# shadow tables: replicated (the module's shadow-table writes travel in
# the changeset), and what every node reads after them.
PLAIN = [
    "INSERT INTO v_rt VALUES(4, 7, 8, 50, 60)",
    "INSERT INTO v_f5 VALUES('x', 'y')",
    "DELETE FROM v_f4",
    "INSERT INTO v_rt_extra VALUES(1)",
    "INSERT INTO v_plain_node VALUES(1)",
]
PLAIN_READS = [
    ("SELECT id FROM v_rt WHERE y0 >= 50", [[4]]),
    ("SELECT title FROM v_f5 WHERE v_f5 MATCH 'y'", [["x"]]),
    ("SELECT count(*) FROM v_f4", [[0]]),
    ("SELECT count(*) FROM v_rt_extra", [[1]]),
    ("SELECT count(*) FROM v_plain_node", [[1]]),
]


class VirtualTableTest(ClusterCase):
    """A 3-node cluster holding one table of each module."""

    def setUp(self):
        self.start("")
        for sql in SCHEMA:
            self.exec(self.leader, sql)
        self.cluster.wait_applied(self.leader.status()["applied"])

    def check_node(self, node):
        """Reads answer alike; on @node's own connection a shadow table's
        write is refused by SQLite."""
        for sql, want in READS:
            self.assertEqual(node.sql(sql), want, "node %d: %s" % (node.id,
                                                                   sql))
        for sql, code, msg in WRITES:
            with self.assertRaises(NodeError, msg=sql) as cm:
                node.sql(sql)
            self.assertEqual((cm.exception.code, str(cm.exception)),
                             (code, msg), "node %d: %s" % (node.id, sql))

    def test_reads_on_every_node_and_process_writes_refused(self):
        before = self.leader.status()["commit"]
        for node in self.followers + [self.leader]:
            self.check_node(node)
        # Another process on a follower's file (Python).
        db = self.followers[0].db
        got = writer(db, [[sql] for sql, _ in READS] +
                     [[sql] for sql, _, _ in WRITES])
        self.assertEqual([g.get("rows") for g in got[:len(READS)]],
                         [want for _, want in READS], got)
        self.assertEqual([(g.get("code"), g.get("error"))
                          for g in got[len(READS):]],
                         [(code, msg) for _, code, msg in WRITES], got)
        # The sqlite3 shell (more modules: generate_series, completion).
        out = shell(self.leader.db,
                    "SELECT * FROM v_rt ORDER BY id;"
                    "SELECT title FROM v_f5 WHERE v_f5 MATCH 'raft';"
                    "SELECT count(*) FROM generate_series(1, 4);"
                    "INSERT INTO v_rt_parent VALUES(1, 1);")
        self.assertEqual(out.stdout, "1|0.0|10.0|0.0|10.0\n"
                         "2|5.0|6.0|20.0|30.0\none\n4\n", out.stderr)
        self.assertIn("table v_rt_parent may not be modified", out.stderr)
        # Nothing of the refused writes reached any file or the log.
        self.assertEqual(self.leader.status()["commit"], before)
        for node in self.cluster.nodes:
            self.assertEqual(node.sql("SELECT count(*) FROM v_rt_rowid"),
                             [[2]])
            self.assertEqual(node.sql("SELECT count(*) FROM v_plain_node"),
                             [[0]])
        # Plain writes on a follower's connection are replicated, shadow
        # rows included.
        for sql in PLAIN:
            try:
                self.followers[0].sql(sql)
            except NodeError as e:
                self.fail("%s: %s: %s" % (sql, e, self.followers[0].value(
                    "SELECT raft_last_error()")))
        self.exec(self.leader, "SELECT 1")
        self.cluster.wait_all_applied()
        for node in self.cluster.nodes:
            for sql, want in PLAIN_READS:
                self.assertEqual(node.sql(sql), want, "node %d: %s" %
                                 (node.id, sql))
        # Writes through raft_exec still work, and read back everywhere.
        self.exec(self.followers[1], "INSERT INTO v_rt VALUES(3, 1, 2, 3, 4)")
        self.cluster.wait_applied(self.followers[1].status()["applied"])
        for node in self.cluster.nodes:
            self.assertEqual(node.sql("SELECT id FROM v_rt WHERE x1 <= 2"),
                             [[3]])
        # The module's writes run on the apply connection; a request that
        # writes a shadow table itself fails alike on every node.
        with self.assertRaises(NodeError) as cm:
            self.exec(self.leader, "INSERT INTO v_rt_node VALUES(99, x'00')")
        self.assertIn("may not be modified", str(cm.exception))
        self.assertEqual(json.loads(self.leader.value(
            "SELECT raft_status()"))["role"], "leader")
