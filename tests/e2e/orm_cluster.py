"""A 3-node cluster for the real-application tests (test_django.py,
test_sqlalchemy.py): node WRITER runs in this process (raft_start on a
connection of ours, as a Python host does, test_python_host.py), the
others are raftsql-testhost processes. The application writes through
its own connections to the writer's file, loading raftsql on each (its
only change), and the end check compares every node's content.

The writer is a parameter: plain writes are served on the leader's node
in its own process in this release, so the writer is made the leader
(raft_transfer); followers and other processes come with the slices
that serve them.
"""

import json
import time

from attach_writers import SO_BASE
from e2e import PythonHostCase
from raftsql_cluster import NodeError

TIMING = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"

# The node of this process, whose file the application writes.
WRITER = 1


def load_raftsql(con):
    """Load raftsql into sqlite3 connection @con: what the applications
    add, nothing else."""
    con.enable_load_extension(True)
    con.load_extension(SO_BASE)
    con.enable_load_extension(False)


# Every user table's rows, rowid included, as one text (the same SQL on
# each node, so no value crosses a JSON encoder): sqlite_schema (minus
# raftsql's own), then per table its rows in rowid order, each value
# through quote().
TABLES = ("SELECT name FROM sqlite_schema WHERE type = 'table' AND "
          "name NOT LIKE 'raftsql%' AND name NOT LIKE 'sqlite%' "
          "ORDER BY name")
SCHEMA = ("SELECT group_concat(line, char(10)) FROM (SELECT type || ' ' || "
          "name || ' ' || tbl_name || ' ' || coalesce(sql, '') AS line "
          "FROM sqlite_schema WHERE name NOT LIKE 'raftsql%' ORDER BY "
          "type, name)")


def table_dump_sql(table, columns):
    """The query that dumps @table (its @columns) as one text."""
    row = " || '|' || ".join(["quote(rowid)"] + [
        'quote("%s")' % c.replace('"', '""') for c in columns])
    return ('SELECT count(*) || char(10) || coalesce(group_concat(r, '
            'char(10)), \'\') FROM (SELECT %s AS r FROM "%s" ORDER BY '
            'rowid)' % (row, table.replace('"', '""')))


class OrmClusterCase(PythonHostCase):
    """A cluster whose node WRITER is this process's and leads."""

    HOST_ID = WRITER
    TIMING = TIMING

    def setUp(self):
        super().setUp()
        self.make_writer_lead()

    def value(self, sql, *params):
        return self.con.execute(sql, params).fetchone()[0]

    def make_writer_lead(self):
        """Wait for a leader; hand the leadership to WRITER if another
        server has it."""
        deadline = time.monotonic() + 30
        seen = []
        while True:
            leader = self.value("SELECT raft_leader()")
            seen.append(leader)
            if leader == WRITER:
                return
            if leader is not None:
                try:
                    self.value("SELECT raft_transfer(?)", WRITER)
                except Exception as e:  # retried until the deadline
                    seen.append(str(e))
            if time.monotonic() > deadline:
                self.fail("server %d did not become the leader; saw %r"
                          % (WRITER, seen[-10:]))
            time.sleep(0.1)

    def wait_applied(self):
        """Wait until every peer applied what the writer's node did."""
        applied = json.loads(self.value("SELECT raft_status()"))["applied"]
        for n in self.peers:
            deadline = time.monotonic() + 30
            while True:
                got = n.status()["applied"]
                if got >= applied:
                    break
                if time.monotonic() > deadline:
                    self.fail("node %d applied %d, the writer %d"
                              % (n.id, got, applied))
                time.sleep(0.05)

    def dumps(self):
        """Each node's content, {node id: {name: text}}."""
        out = {WRITER: {}}
        for n in self.peers:
            out[n.id] = {}
        tables = [r[0] for r in self.con.execute(TABLES).fetchall()]
        out[WRITER]["sqlite_schema"] = self.value(SCHEMA)
        for n in self.peers:
            out[n.id]["sqlite_schema"] = n.value(SCHEMA)
        for t in tables:
            cols = [r[0] for r in self.con.execute(
                "SELECT name FROM pragma_table_info(?)", (t,)).fetchall()]
            q = table_dump_sql(t, cols)
            out[WRITER][t] = self.value(q)
            for n in self.peers:
                try:
                    out[n.id][t] = n.value(q)
                except NodeError as e:
                    out[n.id][t] = "error: %s" % e
        return out

    def assert_replicas_equal(self, counts):
        """Every node holds the same schema and rows, raft_verify()
        passes on each, and table @t has @counts[t] rows."""
        self.wait_applied()
        d = self.dumps()
        for node_id, tables in d.items():
            for t, text in tables.items():
                if text != d[WRITER][t]:
                    self.fail("node %d differs from node %d in %s:\n%s\n"
                              "---- node %d:\n%s" % (
                                  node_id, WRITER, t, text, WRITER,
                                  d[WRITER][t]))
        for t, n in counts.items():
            got = int(d[WRITER][t].split("\n", 1)[0])
            self.assertEqual(got, n, "rows of %s" % t)
        verdicts = {WRITER: json.loads(self.value("SELECT raft_verify()"))}
        for n in self.peers:
            verdicts[n.id] = json.loads(n.value("SELECT raft_verify()"))
        for node_id, v in verdicts.items():
            self.assertTrue(v.get("equal"), "raft_verify() on node %d: %r"
                            % (node_id, v))
