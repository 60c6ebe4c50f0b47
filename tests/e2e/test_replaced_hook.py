"""End-to-end: a host that replaces one of raftsql's hooks on a
connection gets that connection's writes refused, never written
unreplicated.

Node 1 runs in this process (Python's sqlite3 as the host) and leads, so
plain SQL writes on its file are served here. raftsql sets a connection's
authorizer (the write guard) and, at its first plain write, its trace,
pre-update and rollback hooks (the capture); Python's set_authorizer and
set_trace_callback replace them.

- The authorizer replaced (set_authorizer(None), or a callback of the
  host's): every write statement started on that connection is refused
  (its transaction's COMMIT vetoed: IntegrityError, 531, "constraint
  failed"; a VACUUM, which SQLite commits with no commit hook, stopped
  at once: OperationalError, SQLITE_INTERRUPT), raft_last_error() saying
  why. Before, on the leader's node, after a first plain write, the
  writes the guard refuses and the capture does not replicate committed
  unreplicated: PRAGMA user_version=, ANALYZE, VACUUM, a write to
  raftsql_applied (which wiped the node's applied index); the node then
  found its file diverged.
- The same after the connection stopped being traced (it wrote, then
  only read, with no statement cache: raftsql's capture disarms while
  every statement of the connection is a read): a write the guard did
  not see prepared is refused at its write lock (OperationalError,
  SQLITE_READONLY), VACUUM too; a trace hook set meanwhile is put back
  at the next write's prepare, and that write's COMMIT vetoed.
- The trace hook replaced after the connection's first write
  (set_trace_callback(f), or None): its writes are vetoed at COMMIT. A
  trace hook set before the first write is replaced by raftsql's own, and
  the writes are replicated.

Each test ends with raft_verify() equal on every node, at the same index.
"""

import sqlite3
import unittest

from e2e import HostedCase, connect, without_raftsql

REPLACED = "authorizer, raftsql's write guard, was replaced by the host"

# Every kind of write the guard refuses or the capture replicates.
WRITES = ("INSERT INTO kv VALUES('x', 1)",
          "UPDATE kv SET v = 100",
          "CREATE TABLE t3(x)",
          "PRAGMA user_version = 7",
          "PRAGMA application_id = 5",
          "ANALYZE",
          "DELETE FROM raftsql_applied")


class ReplacedHookTest(HostedCase):

    def assert_refused(self, con, sql, cls=sqlite3.IntegrityError,
                       code=sqlite3.SQLITE_CONSTRAINT_COMMITHOOK,
                       why=REPLACED):
        """@sql on @con fails with @cls and extended code @code, and
        raft_last_error() names @why."""
        with self.assertRaises(sqlite3.Error, msg=sql) as cm:
            con.execute(sql)
        e = cm.exception
        last = con.execute("SELECT raft_last_error()").fetchone()[0]
        self.assertIsInstance(e, cls, (sql, e, last))
        self.assertEqual(e.sqlite_errorcode, code, (sql, e, last))
        self.assertIn(why, last or "", sql)
        self.assertFalse(con.in_transaction, sql)

    def reads_and_temp_work(self, con):
        """On @con, whose writes to the replica are refused, TEMP tables
        and reads work."""
        con.execute("CREATE TEMP TABLE scratch(x)")
        con.execute("INSERT INTO scratch VALUES (1)")
        con.execute("DROP TABLE scratch")
        self.assertEqual(con.execute(
            "SELECT k, v FROM kv ORDER BY k").fetchall(),
            [("a", 1), ("b", 2)])

    def wrote_then_read(self):
        """A connection with no statement cache that wrote ('b', 2), then
        read 100 times: raftsql no longer traces it."""
        con = connect(self.db, cached_statements=0)
        self.addCleanup(con.close)
        con.execute("INSERT INTO kv VALUES('b', 2)")  # replicated
        for _ in range(100):
            self.assertEqual(con.execute(
                "SELECT count(*) FROM kv").fetchone(), (2,))
        return con

    def file_as_it_was(self):
        """The node's file holds what the cluster wrote, nothing more:
        read without raftsql."""
        self.assertEqual(without_raftsql(self.db, "PRAGMA user_version"),
                         ["0"])
        self.assertEqual(without_raftsql(
            self.db, "SELECT count(*) FROM sqlite_schema WHERE name IN "
            "('t3', 'sqlite_stat1')"), ["0"])
        self.assertEqual(without_raftsql(
            self.db, "SELECT count(*) FROM raftsql_applied"), ["1"])

    def test_authorizer_removed_after_a_write(self):
        """set_authorizer(None), then set_authorizer(f), on a connection
        that wrote plain SQL already: every kind of write is refused,
        the file keeps only what was replicated; the node never finds a
        foreign write; a connection with the guard writes on."""
        con = connect(self.db)
        self.addCleanup(con.close)
        con.execute("INSERT INTO kv VALUES('b', 2)")  # replicated
        for authorizer in (None, lambda *args: sqlite3.SQLITE_OK):
            con.set_authorizer(authorizer)
            for sql in WRITES:
                self.assert_refused(con, sql)
            self.assert_refused(con, "VACUUM", sqlite3.OperationalError,
                                sqlite3.SQLITE_INTERRUPT)
            con.execute("BEGIN")
            con.execute("INSERT INTO kv VALUES('y', 1)")
            self.assert_refused(con, "COMMIT")
            self.reads_and_temp_work(con)
        self.file_as_it_was()
        other = connect(self.db)
        self.addCleanup(other.close)
        other.execute("INSERT INTO kv VALUES('c', 3)")
        self.assertIsNone(self.status()["diverged"])
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv "
                                         "ORDER BY k"), ["a", "b", "c"])
        self.assert_replicas_agree()

    def test_authorizer_removed_after_reads(self):
        """A connection that wrote plain SQL, then only read with no
        statement cache (as the shell and drivers without one do: raftsql
        then stops tracing its statements, having none that may write),
        whose authorizer is then removed: every kind of write, VACUUM
        too, is refused at its write lock, before it wrote
        (OperationalError, SQLITE_READONLY), raft_last_error() saying
        why; reads and TEMP tables work; the file keeps only what was
        replicated."""
        con = self.wrote_then_read()
        con.set_authorizer(None)
        for sql in WRITES + ("VACUUM",):
            self.assert_refused(con, sql, sqlite3.OperationalError,
                                sqlite3.SQLITE_READONLY,
                                why="raftsql did not see prepared")
        self.reads_and_temp_work(con)
        self.file_as_it_was()
        self.assertIsNone(self.status()["diverged"])
        self.assert_replicas_agree()

    def test_trace_hook_replaced_after_reads(self):
        """set_trace_callback(f) on a connection that wrote, then only
        read with no statement cache (raftsql no longer traced it): its
        next write is vetoed at COMMIT all the same, and the one after
        it, raftsql's hooks back, is replicated."""
        con = self.wrote_then_read()
        seen = []
        con.set_trace_callback(seen.append)
        self.assert_refused(con, "INSERT INTO kv VALUES('x', 1)",
                            why="(the pre-update, trace or rollback "
                            "hook) was replaced on this connection")
        con.execute("INSERT INTO kv VALUES('c', 3)")
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv "
                                         "ORDER BY k"), ["a", "b", "c"])
        self.assertIsNone(self.status()["diverged"])
        self.assert_replicas_agree()

    def test_shared_cache_after_reads(self):
        """Two connections on one shared cache (one file, one wrapped
        write lock): one of them stops being traced after its reads, then
        closes; the other's writes, the guard in place, go on."""
        uri = "file:%s?cache=shared" % self.db
        a = connect(uri, cached_statements=0, uri=True)
        b = connect(uri, cached_statements=0, uri=True)
        self.addCleanup(b.close)
        a.execute("INSERT INTO kv VALUES('b', 2)")
        b.execute("INSERT INTO kv VALUES('c', 3)")
        for _ in range(100):
            a.execute("SELECT count(*) FROM kv").fetchone()
        b.execute("INSERT INTO kv VALUES('d', 4)")
        a.close()
        b.execute("INSERT INTO kv VALUES('e', 5)")
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv "
                                         "ORDER BY k"),
                         ["a", "b", "c", "d", "e"])
        self.assertIsNone(self.status()["diverged"])
        self.assert_replicas_agree()

    def test_authorizer_removed_before_any_write(self):
        """set_authorizer(None) on a fresh connection: its first write
        is vetoed at COMMIT (it got past the guard)."""
        con = connect(self.db)
        self.addCleanup(con.close)
        con.set_authorizer(None)
        self.assert_refused(con, "INSERT INTO kv VALUES('x', 1)",
                            why="the write got past the write guard")
        self.assert_refused(con, "PRAGMA user_version = 7",
                            why="the write got past the write guard")
        self.file_as_it_was()
        self.assert_replicas_agree()

    def test_trace_hook_replaced(self):
        """set_trace_callback(f) or (None) after the connection's first
        plain write: its writes are vetoed at COMMIT; raftsql's hooks are
        back for the next write. Set before the first write, the host's
        trace hook gives way to raftsql's, and the write is
        replicated."""
        con = connect(self.db)
        self.addCleanup(con.close)
        seen = []
        con.set_trace_callback(seen.append)
        con.execute("INSERT INTO kv VALUES('b', 2)")
        # raftsql's trace hook replaced the host's when the write was
        # prepared: the host's saw nothing.
        self.assertEqual(seen, [])
        for callback in (seen.append, None):
            con.set_trace_callback(callback)
            self.assert_refused(con, "INSERT INTO kv VALUES('x', 1)",
                                why="(the pre-update, trace or rollback "
                                "hook) was replaced on this connection")
            con.set_trace_callback(callback)
            con.execute("BEGIN")
            con.execute("UPDATE kv SET v = v + 1")
            self.assert_refused(con, "COMMIT",
                                why="(the pre-update, trace or rollback "
                                "hook) was replaced on this connection")
        con.execute("INSERT INTO kv VALUES('c', 3)")  # hooks are back
        self.assertEqual(without_raftsql(self.db, "SELECT k, v FROM kv "
                                         "ORDER BY k"),
                         ["a|1", "b|2", "c|3"])
        self.assertIsNone(self.status()["diverged"])
        self.assert_replicas_agree()


if __name__ == "__main__":
    unittest.main()
