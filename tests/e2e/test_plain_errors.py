"""End-to-end: the errors of plain SQL writes, as an application meets
them (docs/errors.md, "What happens on errors"): for each case the Python
exception class, SQLite's extended result code (sqlite_errorcode) and
name, and what raft_last_error() says.

- the lease held by another writer, and no leader: OperationalError,
  SQLITE_BUSY (5), after the connection's busy timeout;
- a stale snapshot: OperationalError, SQLITE_BUSY_SNAPSHOT (517);
- a UNIQUE violation: IntegrityError, SQLITE_CONSTRAINT_UNIQUE (2067);
- a vetoed COMMIT: IntegrityError, SQLITE_CONSTRAINT_COMMITHOOK (531);
- no node serving the file: DatabaseError, SQLITE_AUTH (23).

SQLite's own errors leave raft_last_error() as it was (NULL on a fresh
connection); raftsql's refusals put their whole reason there, and so does
a SQLITE_BUSY of the write lease (why it was not granted: it was NULL,
found by a new-user trial).
Node 1 runs in this process (Python's sqlite3 as the host).
"""

import sqlite3
import subprocess
import time
import unittest

from e2e import HostedCase, connect, wait_for, without_raftsql


def plain(db, timeout):
    """A connection of this process to @db with raftsql loaded and a busy
    timeout of @timeout seconds."""
    con = connect(db)
    con.execute("PRAGMA busy_timeout = %d" % int(timeout * 1000))
    return con


class ErrorCase(HostedCase):

    def fails(self, con, sql, cls, code, name):
        """@sql on @con fails with exactly @cls, extended code @code,
        named @name; returns (the exception, raft_last_error())."""
        with self.assertRaises(sqlite3.Error, msg=sql) as cm:
            con.execute(sql)
        e = cm.exception
        why = con.execute("SELECT raft_last_error()").fetchone()[0]
        self.assertIs(type(e), cls, (sql, e, why))
        self.assertEqual((e.sqlite_errorcode, e.sqlite_errorname),
                         (code, name), (sql, e, why))
        return e, why

    def busy_after(self, con, sql, waited, at_most=None, why_has=None):
        """@sql on @con fails with SQLITE_BUSY, "database is locked"
        (OperationalError), after at least @waited seconds (its busy
        timeout), and at most @at_most when given; raft_last_error()
        says why the lease was not granted (contains @why_has)."""
        t0 = time.monotonic()
        e, why = self.fails(con, sql, sqlite3.OperationalError,
                            sqlite3.SQLITE_BUSY, "SQLITE_BUSY")
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, waited)
        if at_most is not None:
            self.assertLessEqual(took, at_most, "SQLITE_BUSY took %.1f s"
                                 % took)
        self.assertEqual(str(e), "database is locked")
        self.assertIn(why_has, why or "")

    def vetoed_commit(self):
        """A write through an INSTEAD OF trigger inside BEGIN (which the
        capture cannot replicate, on any node: SQLite does not tell
        whether it failed) has its COMMIT vetoed: IntegrityError, 531,
        "constraint failed", nothing written, the replicas equal.
        Returns raft_last_error()."""
        con = plain(self.db, 5)
        self.addCleanup(con.close)
        con.execute("CREATE TABLE base(x)")
        con.execute("CREATE VIEW v AS SELECT x FROM base")
        con.execute("CREATE TRIGGER vi INSTEAD OF INSERT ON v BEGIN "
                    "INSERT INTO base VALUES(new.x); END")
        con.execute("BEGIN")
        con.execute("INSERT INTO v VALUES(1)")
        e, why = self.fails(con, "COMMIT", sqlite3.IntegrityError, 531,
                            "SQLITE_CONSTRAINT_COMMITHOOK")
        self.assertEqual(str(e), "constraint failed")
        self.assertTrue(why.startswith("commit to %s refused, rolled back: "
                                       % self.db), why)
        self.assertIn("INSTEAD OF", why)
        self.assertFalse(con.in_transaction)
        self.assertEqual(without_raftsql(
            self.db, "SELECT count(*) FROM base"), ["0"])
        self.assert_replicas_agree()
        return why


class LeaderErrorsTest(ErrorCase):
    """Node 1 leads: plain writes are served in this process."""

    def test_write_lock_kept_past_the_grant(self):
        """A process that never loaded raftsql holds the file's write lock
        (BEGIN IMMEDIATE, nothing written): a plain write is granted the
        lease, waits 5 s for the lock (20 ms at each retry of its busy
        handler) and meets SQLITE_BUSY, and raft_last_error() says why.
        Before, it said nothing (a trial: a writer met SQLITE_BUSY with an
        empty raft_last_error()), and it met SQLITE_BUSY after 65 s for a
        busy timeout of 300 ms: 5 s at each retry. The bound leaves room
        for a loaded machine."""
        locker = subprocess.Popen(
            ["/usr/bin/python3", "-c",
             "import sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
             "c.execute('BEGIN IMMEDIATE')\n"
             "print('locked', flush=True)\n"
             "sys.stdin.read()\n", self.db],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def unlock():
            if locker.poll() is None:
                locker.stdin.close()
                locker.wait(timeout=30)
            locker.stdout.close()
        self.addCleanup(unlock)
        self.assertEqual(locker.stdout.readline(), "locked\n")
        other = plain(self.db, 0.3)
        self.addCleanup(other.close)
        self.busy_after(other, "INSERT INTO kv VALUES('o', 1)", 4.5, 15,
                        why_has="the write lease was granted, but another "
                        "connection keeps the file's write lock")
        unlock()
        other.execute("INSERT INTO kv VALUES('o', 1)")
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv ORDER "
                                         "BY k"), ["a", "o"])
        self.assert_replicas_agree()

    def test_lease_held_by_another_writer(self):
        """BEGIN IMMEDIATE on one connection holds the lease (and the
        file's write lock); a write on another meets SQLITE_BUSY after
        its busy timeout, which it waited; after the COMMIT it
        succeeds."""
        holder, other = plain(self.db, 5), plain(self.db, 0.3)
        self.addCleanup(holder.close)
        self.addCleanup(other.close)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO kv VALUES('h', 1)")
        self.busy_after(other, "INSERT INTO kv VALUES('o', 1)", 0.25,
                        why_has="the write lease is held by connection")
        holder.execute("COMMIT")
        other.execute("INSERT INTO kv VALUES('o', 1)")
        # The write that went through leaves no refusal (it kept the busy
        # answer's words: a new-user trial).
        self.assertIsNone(
            other.execute("SELECT raft_last_error()").fetchone()[0])
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv ORDER "
                                         "BY k"), ["a", "h", "o"])
        self.assert_replicas_agree()

    def test_busy_after_about_the_busy_timeout(self):
        """A writer waiting for a lease another connection holds meets
        SQLITE_BUSY after about its busy timeout (1.5 s here), not three
        to four times it: each retry of SQLite's busy handler waited
        250 ms in the lease's queue on top of the handler's own sleep,
        which is all SQLite counts (6 s for a 1 s timeout, found by a
        new-user trial). The bound leaves room for a loaded machine."""
        holder, other = plain(self.db, 5), plain(self.db, 1.5)
        self.addCleanup(holder.close)
        self.addCleanup(other.close)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO kv VALUES('h', 1)")
        self.busy_after(other, "INSERT INTO kv VALUES('o', 1)", 1.4, 3.5,
                        why_has="the write lease is held by connection")
        holder.execute("COMMIT")
        other.execute("INSERT INTO kv VALUES('o', 1)")
        self.assert_replicas_agree()

    def test_stale_snapshot(self):
        """A deferred transaction that read before another connection
        committed gets SQLITE_BUSY_SNAPSHOT at its first write, at once,
        and raft_last_error() says why; it rolls back and retries."""
        reader, writer = plain(self.db, 5), plain(self.db, 5)
        self.addCleanup(reader.close)
        self.addCleanup(writer.close)
        reader.execute("BEGIN")
        self.assertEqual(reader.execute("SELECT v FROM kv WHERE k = 'a'")
                         .fetchone(), (1,))
        writer.execute("UPDATE kv SET v = v + 1 WHERE k = 'a'")
        e, why = self.fails(reader, "UPDATE kv SET v = v + 10 WHERE k = 'a'",
                            sqlite3.OperationalError, 517,
                            "SQLITE_BUSY_SNAPSHOT")
        # SQLite's own answer, which says nothing more: raftsql names it
        # (a new-user trial: 8,000 of them, each with no reason).
        self.assertIn("another writer committed after this transaction "
                      "read", why or "")
        reader.execute("ROLLBACK")
        reader.execute("UPDATE kv SET v = v + 10 WHERE k = 'a'")
        self.assertIsNone(
            reader.execute("SELECT raft_last_error()").fetchone()[0])
        self.assertEqual(without_raftsql(self.db, "SELECT v FROM kv"),
                         ["12"])
        self.assert_replicas_agree()

    def test_unique_violation(self):
        """A UNIQUE violation is SQLite's own: IntegrityError,
        SQLITE_CONSTRAINT_UNIQUE, its text; nothing is sent."""
        con = plain(self.db, 5)
        self.addCleanup(con.close)
        con.execute("CREATE TABLE u(x UNIQUE)")
        con.execute("INSERT INTO u VALUES (1)")
        before = self.status()["last_index"]
        e, why = self.fails(con, "INSERT INTO u VALUES (1)",
                            sqlite3.IntegrityError, 2067,
                            "SQLITE_CONSTRAINT_UNIQUE")
        self.assertEqual(str(e), "UNIQUE constraint failed: u.x")
        self.assertIsNone(why)
        self.assertEqual(self.status()["last_index"], before)
        self.assert_replicas_agree()

    def test_vetoed_commit(self):
        """A transaction the capture cannot replicate (a write through an
        INSTEAD OF trigger inside BEGIN) is vetoed at COMMIT:
        IntegrityError, SQLITE_CONSTRAINT_COMMITHOOK, "constraint failed";
        the reason is in raft_last_error(); nothing written."""
        self.vetoed_commit()

    def test_no_node(self):
        """The node stopped: a write is refused when prepared,
        DatabaseError, SQLITE_AUTH, "not authorized", the reason naming
        the file in raft_last_error(); a transaction open across the
        stop is vetoed at COMMIT, the reason saying to start the node."""
        con = plain(self.db, 5)
        self.addCleanup(con.close)
        con.execute("BEGIN")
        con.execute("INSERT INTO kv VALUES('t', 1)")
        self.con.execute("SELECT raft_stop()")
        e, why = self.fails(con, "COMMIT", sqlite3.IntegrityError, 531,
                            "SQLITE_CONSTRAINT_COMMITHOOK")
        self.assertIn("commit to %s refused, rolled back: no raftsql node "
                      "serves it any more (its node stopped or died): start it "
                      "(raft_start)" % self.db, why)
        e, why = self.fails(con, "INSERT INTO kv VALUES('n', 1)",
                            sqlite3.DatabaseError, sqlite3.SQLITE_AUTH,
                            "SQLITE_AUTH")
        self.assertEqual(str(e), "not authorized")
        self.assertIn("%s is a Raft replica (it has a raftsql_applied "
                      "table) and no raftsql node serves it" % self.db, why)
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv"),
                         ["a"])
        self.start_node()
        wait_for("a leader", self.leader, 30)
        self.assert_replicas_agree()

    def test_no_leader(self):
        """Nodes 2 and 3 stopped: once node 1 knows no leader, a plain
        write meets SQLITE_BUSY after its busy timeout."""
        for n in self.peers:
            n.stop()
        wait_for("node 1 knows no leader", lambda: self.leader() is None,
                 30)
        con = plain(self.db, 0.5)
        self.addCleanup(con.close)
        self.busy_after(con, "INSERT INTO kv VALUES('x', 1)", 0.45,
                        why_has="no leader")
        self.assertEqual(without_raftsql(self.db, "SELECT k FROM kv"),
                         ["a"])


class FollowerErrorsTest(ErrorCase):
    """Node 1 follows."""

    lead = False

    def test_vetoed_commit_on_a_follower(self):
        """A plain write this follower cannot replicate is vetoed at its
        COMMIT: IntegrityError, SQLITE_CONSTRAINT_COMMITHOOK, "constraint
        failed", the reason in raft_last_error(); nothing written
        anywhere: as on the leader (followers serve plain writes)."""
        self.vetoed_commit()


if __name__ == "__main__":
    unittest.main()
