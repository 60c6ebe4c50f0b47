"""3-node clusters for the real-application tests (test_django.py,
test_sqlalchemy.py), in the three placements of the application: its
writes go to the file of node WRITER, and

- LeaderCase: WRITER runs in this process (raft_start on a connection of
  ours, as a Python host does, test_python_host.py) and leads (the
  leadership is handed to it with raft_transfer);
- FollowerCase: WRITER runs in this process and follows (the leadership
  is handed away from it): its node asks the leader for the write lease;
- OtherProcessCase: every node is a raftsql-testhost process, and the
  application, in this process, only loads raftsql (no raft_start) on a
  follower's file: its plain writes go through that node's attach socket.

The application loads raftsql on each of its connections (its only
change). The end check compares every node's schema and rows, and
raft_verify() on each, with no divergence and no repair anywhere; a
follower placement also checks that WRITER followed the same leader in
the same term throughout.
"""

import json
import time

from attach_writers import SO_BASE
from e2e import ClusterCase, PythonHostCase
from raftsql_cluster import NodeError

TIMING = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"

# The node of this process in the in-process placements.
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
# through quote(); sqlite_sequence too (AUTOINCREMENT counters).
TABLES = ("SELECT name FROM sqlite_schema WHERE type = 'table' AND "
          "name NOT LIKE 'raftsql%' AND (name NOT LIKE 'sqlite%' OR "
          "name = 'sqlite_sequence') ORDER BY name")
SCHEMA = ("SELECT group_concat(line, char(10)) FROM (SELECT type || ' ' || "
          "name || ' ' || tbl_name || ' ' || coalesce(sql, '') AS line "
          "FROM sqlite_schema WHERE name NOT LIKE 'raftsql%' ORDER BY "
          "type, name)")
COLUMNS = ("SELECT group_concat(name, char(10)) FROM "
           "(SELECT name FROM pragma_table_info('%s'))")


def table_dump_sql(table, columns):
    """The query that dumps @table (its @columns) as one text."""
    row = " || '|' || ".join(["quote(rowid)"] + [
        'quote("%s")' % c.replace('"', '""') for c in columns])
    return ('SELECT count(*) || char(10) || coalesce(group_concat(r, '
            'char(10)), \'\') FROM (SELECT %s AS r FROM "%s" ORDER BY '
            'rowid)' % (row, table.replace('"', '""')))


class OrmChecks:
    """The end check, over the placement's query(node id, sql), which
    answers one value of a statement on that node's own connection."""

    # (leader, term) that WRITER saw when a follower placement began.
    following = None

    def node_ids(self):
        return sorted(self.peer_ids() + [self.writer_id()])

    def node_status(self, node_id):
        return json.loads(self.query(node_id, "SELECT raft_status()"))

    def wait_leader_not_writer(self):
        """Wait until a server other than the writer leads, handing the
        leadership away from the writer while it has it; note the leader
        and term the writer follows (self.following)."""
        deadline = time.monotonic() + 30
        seen = []
        while True:
            st = self.node_status(self.writer_id())
            seen.append((st["role"], st["leader"], st["term"]))
            if st["role"] == "follower" and st["leader"] is not None:
                self.following = (st["leader"], st["term"])
                return
            if st["leader"] == self.writer_id():
                try:
                    self.query(self.writer_id(), "SELECT raft_transfer(%d)"
                               % self.peer_ids()[0])
                except Exception as e:  # retried until the deadline
                    seen.append(str(e))
            if time.monotonic() > deadline:
                self.fail("server %d did not become a follower; saw %r"
                          % (self.writer_id(), seen[-10:]))
            time.sleep(0.1)

    def settle(self):
        """Wait until the writer's node applied everything the leader
        committed, the new cluster's id included, then its term-start
        entry (raft_barrier). Each of those entries is a commit to every
        replica's file: a deferred transaction whose snapshot predates
        it meets SQLITE_BUSY_SNAPSHOT ("database is locked") at its first
        write, as it would behind another writer. The applications here,
        as most, do not retry that, so they start after them. The first
        leader proposes the cluster id at a tick after its term's first
        entry committed, so a barrier alone could return before it (a
        create_all inside BEGIN failed so under load in CI: the id's
        entry applied between its first read and its CREATE TABLE)."""
        deadline = time.monotonic() + 30
        while self.query(self.writer_id(), "SELECT raft_cluster_id()") is None:
            if time.monotonic() > deadline:
                self.fail("server %d has no cluster id within 30 s: %r" % (
                    self.writer_id(), self.node_status(self.writer_id())))
            time.sleep(0.05)
        self.query(self.writer_id(), "SELECT raft_barrier()")

    def check_followed(self):
        """A follower placement: the writer still follows the leader and
        term it followed at the start (it never led while the
        application wrote)."""
        if self.following is None:
            return
        st = self.node_status(self.writer_id())
        self.assertEqual((st["role"], (st["leader"], st["term"])),
                         ("follower", self.following),
                         "server %d did not follow throughout"
                         % self.writer_id())

    def wait_applied(self):
        """Wait until every node applied what the writer's node did."""
        applied = self.node_status(self.writer_id())["applied"]
        for i in self.peer_ids():
            deadline = time.monotonic() + 30
            while True:
                got = self.node_status(i)["applied"]
                if got >= applied:
                    break
                if time.monotonic() > deadline:
                    self.fail("node %d applied %d, the writer %d"
                              % (i, got, applied))
                time.sleep(0.05)

    def dumps(self):
        """Each node's content, {node id: {name: text}}."""
        out = {i: {} for i in self.node_ids()}
        tables = self.query(self.writer_id(),
                            "SELECT group_concat(name, char(10)) FROM (%s)"
                            % TABLES) or ""
        for i in out:
            out[i]["sqlite_schema"] = self.query(i, SCHEMA)
        for t in filter(None, tables.split("\n")):
            cols = self.query(self.writer_id(),
                              COLUMNS % t.replace("'", "''")).split("\n")
            q = table_dump_sql(t, cols)
            for i in out:
                try:
                    out[i][t] = self.query(i, q)
                except NodeError as e:
                    out[i][t] = "error: %s" % e
        return out

    def assert_replicas_equal(self, counts):
        """Every node holds the same schema and rows, raft_verify() passes
        on each with the same checksum at the same index, none diverged
        or repaired, and table @t has @counts[t] rows."""
        self.check_followed()
        self.wait_applied()
        w = self.writer_id()
        d = self.dumps()
        for node_id, tables in d.items():
            for t, text in tables.items():
                if text != d[w][t]:
                    self.fail("node %d differs from node %d in %s:\n%s\n"
                              "---- node %d:\n%s" % (
                                  node_id, w, t, text, w, d[w][t]))
        for t, n in counts.items():
            got = int(d[w][t].split("\n", 1)[0])
            self.assertEqual(got, n, "rows of %s" % t)
        seen = set()
        for i in self.node_ids():
            v = json.loads(self.query(i, "SELECT raft_verify()"))
            self.assertTrue(v.get("equal"), "raft_verify() on node %d: %r"
                            % (i, v))
            seen.add((v["index"], v["stored"]))
            st = self.node_status(i)
            self.assertEqual((st["diverged"], st["repairs"]), (None, 0),
                             "node %d" % i)
        self.assertEqual(len(seen), 1, "the nodes differ: %r" % seen)


class InProcessCase(OrmChecks, PythonHostCase):
    """WRITER's node runs in this process (self.con), the others are
    raftsql-testhost processes (self.peers)."""

    HOST_ID = WRITER
    TIMING = TIMING

    def writer_id(self):
        return WRITER

    def peer_ids(self):
        return [n.id for n in self.peers]

    def query(self, node_id, sql):
        if node_id == WRITER:
            return self.con.execute(sql).fetchone()[0]
        return [n for n in self.peers if n.id == node_id][0].value(sql)


class LeaderCase(InProcessCase):
    """The application in the node's process, the node leading."""

    def setUp(self):
        super().setUp()
        deadline = time.monotonic() + 30
        seen = []
        while True:
            leader = self.query(WRITER, "SELECT raft_leader()")
            seen.append(leader)
            if leader == WRITER:
                self.settle()
                return
            if leader is not None:
                try:
                    self.query(WRITER, "SELECT raft_transfer(%d)" % WRITER)
                except Exception as e:  # retried until the deadline
                    seen.append(str(e))
            if time.monotonic() > deadline:
                self.fail("server %d did not become the leader; saw %r"
                          % (WRITER, seen[-10:]))
            time.sleep(0.1)


class FollowerCase(InProcessCase):
    """The application in the node's process, the node following."""

    def setUp(self):
        super().setUp()
        self.wait_leader_not_writer()
        self.settle()


class OtherProcessCase(OrmChecks, ClusterCase):
    """Every node a raftsql-testhost process; the application writes, in
    this process, on a follower's file (self.db) through its socket."""

    def setUp(self):
        self.start(TIMING)
        self.writer = self.followers[0]
        self.db = self.writer.db
        self.wait_leader_not_writer()
        self.settle()

    def writer_id(self):
        return self.writer.id

    def peer_ids(self):
        return [n.id for n in self.cluster.nodes if n is not self.writer]

    def query(self, node_id, sql):
        return self.cluster.node(node_id).value(sql)
