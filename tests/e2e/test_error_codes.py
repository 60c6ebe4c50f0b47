"""Errors a program can branch on: each kind of error of
raftsql's SQL functions has its stable extended result code (RAFTSQL_* of
ext/raftsql.h), the same in the node's own process (a Python connection
of this process, which holds the nodes: Python's sqlite3.Error.
sqlite_errorcode is sqlite3_extended_errcode) and in another process
through the node's socket (a Python writer process); a SQL error keeps
SQLite's own code (SQLITE_CONSTRAINT_UNIQUE). docs/reference.md's table
lists the header's numbers.

One set of nodes serves every test (set up once):
- S, a one-node cluster (max_request_bytes=2048);
- L, node 1 of a two-node cluster whose node 2 never starts: no leader;
- P, node 1 of a two-node cluster with a raftsql-testhost node 2, which
  the outcome-unknown test stops (SIGSTOP) while node 1 leads.
Other kinds are checked where their conditions already are: busy and
the refused socket in test_attach, diverged in test_foreign, a full disk
in test_wedges.
"""

import json
import os
import re
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
import unittest

from codes import CODES, other_process, read_codes
from e2e import NODE, ROOT, connect, wait_for
from raftsql_cluster import Node, free_ports

SQLITE_CONSTRAINT_UNIQUE = 2067

class ErrorCodesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-codes-")
        cls.cons, cls.peer = [], None
        ports = free_ports(5)
        fast = "election_timeout_ms=300 heartbeat_ms=30"
        cls.s = cls.start_here("s.db", "id=1 cluster=1@127.0.0.1:%d %s "
                               "max_request_bytes=2048" % (ports[0], fast))
        cls.l = cls.start_here("l.db", "id=1 cluster=1@127.0.0.1:%d,"
                               "2@127.0.0.1:%d %s exec_timeout_ms=1500" % (
                                   ports[1], ports[2], fast))
        # P's leader keeps leading for an election timeout (3 s) after it
        # lost its peer: the time the outcome-unknown test needs.
        members = "1@127.0.0.1:%d,2@127.0.0.1:%d" % (ports[3], ports[4])
        slow = "election_timeout_ms=3000 heartbeat_ms=100 exec_timeout_ms=500"
        cls.p = cls.start_here("p.db", "id=1 cluster=%s %s" % (members, slow))
        cls.peer = Node(NODE, 2, os.path.join(cls.dir, "p2.db"),
                        os.path.join(cls.dir, "p2.log"))
        cls.peer.sql("SELECT raft_start(?)", "id=2 cluster=%s %s" % (
            members, slow))
        wait_for("S leads", lambda: cls.value(cls.s, "SELECT raft_leader()"))
        cls.s.execute("SELECT raft_exec('CREATE TABLE t(id INTEGER PRIMARY "
                      "KEY, u UNIQUE)')")
        cls.s.execute("SELECT raft_exec('INSERT INTO t VALUES(1, 10)')")
        leader = wait_for("P has a leader", lambda: cls.value(
            cls.p, "SELECT raft_leader()"), timeout=30)
        if leader != 1:
            cls.peer.sql("SELECT raft_transfer(1)")
            wait_for("P's node 1 leads", lambda: cls.value(
                cls.p, "SELECT raft_leader()") == 1, timeout=30)

    @classmethod
    def start_here(cls, name, config):
        con = connect(os.path.join(cls.dir, name))
        cls.cons.append(con)
        con.execute("SELECT raft_start(?)", (config,))
        return con

    @staticmethod
    def value(con, sql):
        return con.execute(sql).fetchone()[0]

    @classmethod
    def tearDownClass(cls):
        code = 0
        if cls.peer is not None:
            os.kill(cls.peer.proc.pid, signal.SIGCONT)
            code = cls.peer.stop()
        for con in cls.cons:
            con.execute("SELECT raft_stop()")
            con.close()
        if code != 0:
            with open(os.path.join(cls.dir, "p2.log"),
                      errors="replace") as f:
                print(f.read()[-4000:])
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, "node 2 of P exited with an error"

    def here(self, con, sql, *params, interrupt_after=None):
        """(code, text) of the error @sql gives on @con of this process."""
        timer = None
        if interrupt_after is not None:
            timer = threading.Timer(interrupt_after, con.interrupt)
            timer.start()
        try:
            con.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            return e.sqlite_errorcode, str(e)
        finally:
            if timer is not None:
                timer.cancel()
        self.fail("%s did not fail" % sql)

    def there(self, con, sql, *params, interrupt_after=None):
        """(code, text) of the error @sql gives in another process on
        @con's database file (through the node's socket)."""
        db = con.execute("PRAGMA database_list").fetchone()[2]
        got = other_process(db, [[sql, *params]], interrupt_after)[0]
        self.assertIn("error", got, "%s did not fail: %s" % (sql, got))
        return got["code"], got["error"]

    def both(self, con, sql, *params):
        """The errors of @sql here and in another process."""
        return [self.here(con, sql, *params), self.there(con, sql, *params)]

    def test_header_codes(self):
        """Each code is primary | (n << 8) with its own n from 101 on, and
        docs/reference.md's table gives each one's number."""
        codes = read_codes()
        self.assertEqual(len(codes), 13)
        ns = [n for _, _, n in codes.values()]
        self.assertEqual(len(set(ns)), len(ns))
        self.assertTrue(all(101 <= n <= 199 for n in ns))
        self.assertEqual(codes["RAFTSQL_NOT_APPLIED"][1], "SQLITE_BUSY")
        self.assertEqual(codes["RAFTSQL_UNKNOWN"][1], "SQLITE_ERROR")
        self.assertEqual(codes["RAFTSQL_REMOVED"][1], "SQLITE_ERROR")
        with open(os.path.join(ROOT, "docs", "reference.md")) as f:
            table = dict(re.findall(r"^\| `(RAFTSQL_[A-Z_]+)` \| (\d+) \|",
                                    f.read(), re.M))
        self.assertEqual({k: int(v) for k, v in table.items()}, CODES)

    def test_bad_arguments(self):
        code, text = self.here(self.s, "SELECT raft_exec(42)")
        self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
        code, text = self.here(self.s, "SELECT raft_add(0, 'x:1')")
        self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
        for code, text in self.both(self.s, "SELECT raft_exec('INSRT INTO "
                                    "t VALUES(2, 20)')"):
            self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
            self.assertIn("raft_exec: not applied: near \"INSRT\"", text)

    def test_backup_and_load_sql_usage(self):
        """raft_backup's and raft_load_sql's usage errors are
        RAFTSQL_INVALID here and from another process: a path that is no
        text, the wrong number of arguments, a target that exists, a
        script that is missing, a relative path sent to another
        process's node, a call inside a transaction."""
        exists = os.path.join(self.dir, "exists.db")
        open(exists, "w").close()
        missing = os.path.join(self.dir, "missing.sql")
        for sql, params, why in [
                ("SELECT raft_backup(42)", (), "must be non-empty text"),
                ("SELECT raft_backup()", (), "one argument"),
                ("SELECT raft_backup(?, 2)", (exists,), "one argument"),
                ("SELECT raft_load_sql()", (), "one argument"),
                ("SELECT raft_load_sql(?)", ("",), "must be non-empty text"),
                ("SELECT raft_backup(?)", (exists,), "never overwrites"),
                ("SELECT raft_load_sql(?)", (missing,),
                 "No such file or directory")]:
            for code, text in self.both(self.s, sql, *params):
                self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
                self.assertIn(why, text)
        code, text = self.there(self.s, "SELECT raft_backup('rel.db')")
        self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
        self.assertIn("give an absolute path", text)
        self.s.execute("BEGIN")
        try:
            code, text = self.here(self.s, "SELECT raft_load_sql(?)", missing)
        finally:
            self.s.execute("ROLLBACK")
        self.assertEqual(code, CODES["RAFTSQL_INVALID"], text)
        self.assertIn("inside a transaction", text)

    def test_load_sql_busy(self):
        """A second raft_load_sql while one runs on the node (L: its chunk
        waits for a leader) is RAFTSQL_BUSY; the first ends "outcome
        unknown", not "not applied": its chunk carries a request id, which
        an earlier load of the same script may have applied."""
        script = os.path.join(self.dir, "busy.sql")
        with open(script, "w") as f:
            f.write("CREATE TABLE busy(x);\n")
        first = []
        th = threading.Thread(target=lambda: first.append(self.here(
            self.l, "SELECT raft_load_sql(?)", script)))
        th.start()
        other = connect(os.path.join(self.dir, "l.db"))
        try:
            wait_for("the first load runs", lambda: (json.loads(self.value(
                other, "SELECT raft_status()"))["load"] or {}).get(
                    "state") == "running")
            code, text = self.here(other, "SELECT raft_load_sql(?)", script)
        finally:
            th.join(30)
            other.close()
        self.assertEqual(code, CODES["RAFTSQL_BUSY"], text)
        self.assertIn("one at a time", text)
        self.assertEqual(first[0][0], CODES["RAFTSQL_UNKNOWN"], first)
        self.assertIn("outcome unknown: no leader reachable", first[0][1])
        self.assertIn("run raft_load_sql again to resume", first[0][1])

    def test_sql_error_keeps_sqlites_code(self):
        for code, text in self.both(self.s, "SELECT raft_exec('INSERT INTO "
                                    "t VALUES(?, ?)', 3, 10)"):
            self.assertEqual(code, SQLITE_CONSTRAINT_UNIQUE, text)
            self.assertIn("UNIQUE constraint failed: t.u", text)

    def test_too_big(self):
        for code, text in self.both(self.s, "SELECT raft_exec('INSERT INTO "
                                    "t VALUES(?, ?)', 4, ?)", "x" * 5000):
            self.assertEqual(code, CODES["RAFTSQL_TOOBIG"], text)
            self.assertIn("exceeds max_request_bytes (2048)", text)

    def test_no_node(self):
        con = connect(os.path.join(self.dir, "none.db"))
        try:
            code, text = self.here(con, "SELECT raft_status()")
        finally:
            con.close()
        self.assertEqual(code, CODES["RAFTSQL_NO_NODE"], text)
        self.assertIn("no raftsql node runs for", text)

    def test_not_applied_and_interrupted(self):
        """No leader: not applied within exec_timeout_ms, here and from
        another process; an interrupt ends the wait, not applied here,
        outcome unknown for another process (its call was sent)."""
        for code, text in self.both(self.l, "SELECT raft_exec('CREATE TABLE "
                                    "x(a)')"):
            self.assertEqual(code, CODES["RAFTSQL_NOT_APPLIED"], text)
            self.assertIn("not applied: no leader reachable", text)
        code, text = self.here(self.l, "SELECT raft_exec('CREATE TABLE "
                               "x(a)')", interrupt_after=0.3)
        self.assertEqual(code, CODES["RAFTSQL_INTERRUPTED"], text)
        self.assertIn("interrupted: not applied", text)
        code, text = self.there(self.l, "SELECT raft_exec('CREATE TABLE "
                                "x(a)')", interrupt_after=0.5)
        self.assertEqual(code, CODES["RAFTSQL_INTERRUPTED_UNKNOWN"], text)
        self.assertIn("interrupted: outcome unknown", text)

    def test_outcome_unknown(self):
        """A leader that lost its only peer takes the write into its log
        but cannot commit it: outcome unknown, here and from another
        process; interrupted, outcome unknown."""
        self.p.execute("SELECT raft_exec('CREATE TABLE IF NOT EXISTS "
                       "y(a)')")
        os.kill(self.peer.proc.pid, signal.SIGSTOP)
        try:
            # The other process starts at once, beside the calls here:
            # all three are proposed well within the election timeout.
            sql = "SELECT raft_exec('INSERT INTO y VALUES(1)')"
            db = os.path.join(self.dir, "p.db")
            there = []
            th = threading.Thread(target=lambda: there.append(
                other_process(db, [[sql]])[0]))
            th.start()
            code, text = self.here(self.p, sql)
            self.assertEqual(code, CODES["RAFTSQL_UNKNOWN"], text)
            self.assertIn("raft_exec: outcome unknown", text)
            code, text = self.here(self.p, sql, interrupt_after=0.2)
            self.assertEqual(code, CODES["RAFTSQL_INTERRUPTED_UNKNOWN"], text)
            th.join(60)
            self.assertEqual(there[0].get("code"), CODES["RAFTSQL_UNKNOWN"],
                             there)
            self.assertIn("raft_exec: outcome unknown", there[0]["error"])
        finally:
            os.kill(self.peer.proc.pid, signal.SIGCONT)


# What raft_exec refuses for what the SQL text does, and the words of
# each reason: one kind, one code (RAFTSQL_REFUSED).
REFUSALS = [
    ("VACUUM", "VACUUM cannot be used in raft_exec"),
    ("ATTACH 'other.db' AS o", "ATTACH cannot be used in raft_exec"),
    ("DETACH o", "DETACH cannot be used in raft_exec"),
    ("CREATE TEMP TABLE tmp(a)", "temporary objects cannot be created"),
    ("INSERT INTO r VALUES(sqlite_version())",
     "sqlite_version() cannot be used in raft_exec"),
    ("SELECT load_extension('x')", "load_extension cannot be used"),
    ("INSERT INTO r VALUES(datetime('now', 'localtime'))",
     "datetime(): the 'localtime' modifier depends on each node's time "
     "zone"),
    ("SELECT total_changes()", "total_changes() counts each node's own"),
    ("SELECT count(*) FROM dbstat", "dbstat cannot be read in raft_exec"),
    ("BEGIN", "BEGIN cannot be used in raft_exec: each request already "
     "runs as one transaction"),
    ("INSERT INTO r VALUES(1); COMMIT", "COMMIT cannot be used"),
    ("SAVEPOINT s", "SAVEPOINT cannot be used"),
    ("PRAGMA journal_mode=DELETE", "PRAGMA journal_mode cannot be set "
     "through raft_exec"),
    ("PRAGMA page_count", "PRAGMA page_count cannot be used in raft_exec"),
    ("PRAGMA foreign_keys=ON; INSERT INTO r VALUES(1)",
     "PRAGMA foreign_keys must be a raft_exec request of its own"),
    ("INSERT INTO raftsql_applied VALUES(1)",
     "raftsql_applied is an internal raftsql table"),
]


class RefusalTest(unittest.TestCase):
    """Every refusal of what the SQL text does comes back as
    RAFTSQL_REFUSED with its whole reason, "raft_exec: not applied:
    <reason>", on the leader, on a follower and from another process,
    and never takes a log index; a refusal the caller's node could not
    see (the request creates the table it then uses) is refused alike
    when applied. Two nodes of one cluster, both in this process."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-refusals-")
        ports = free_ports(2)
        members = "1@127.0.0.1:%d,2@127.0.0.1:%d" % tuple(ports)
        cls.cons = []
        for i in (1, 2):
            con = connect(os.path.join(cls.dir, "r%d.db" % i))
            cls.cons.append(con)
            con.execute("SELECT raft_start(?)", (
                "id=%d cluster=%s election_timeout_ms=300 heartbeat_ms=30 "
                "exec_timeout_ms=10000" % (i, members),))
        leader = wait_for("a leader", lambda: cls.cons[0].execute(
            "SELECT raft_leader()").fetchone()[0], timeout=30)
        cls.leader = cls.cons[leader - 1]
        cls.follower = cls.cons[2 - leader]
        cls.leader.execute("SELECT raft_exec('CREATE TABLE r(a)')")
        wait_for("the follower has r", lambda: cls.follower.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'r'"
        ).fetchone()[0])

    @classmethod
    def tearDownClass(cls):
        for con in cls.cons:
            con.execute("SELECT raft_stop()")
            con.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def status(self, con):
        return json.loads(con.execute("SELECT raft_status()").fetchone()[0])

    def refused(self, con, sql):
        """(code, text) of raft_exec(@sql) on @con and from another
        process on @con's database file."""
        try:
            con.execute("SELECT raft_exec(?)", (sql,)).fetchall()
            here = None
        except sqlite3.Error as e:
            here = (e.sqlite_errorcode, str(e))
        db = con.execute("PRAGMA database_list").fetchone()[2]
        got = other_process(db, [["SELECT raft_exec(?)", sql]])[0]
        return [here, (got.get("code"), got.get("error"))]

    def settled(self):
        """(term, last_index) of the leader once it has committed its
        whole log; None while no node leads."""
        for con in self.cons:
            st = self.status(con)
            if st["role"] == "leader" and st["commit"] == st["last_index"]:
                return st["term"], st["last_index"]
        return None

    def test_refused_before_the_log(self):
        """No refusal takes a log index: the leader's last index is the
        same before and after all of them. An election in between (a
        new leader appends its no-op entry: seen under load) makes the
        round say nothing, so it runs again, at most five times."""
        rounds = []
        for _ in range(5):
            before = wait_for("a leader with its log committed", self.settled)
            seen = []
            for con in (self.leader, self.follower):
                for sql, why in REFUSALS:
                    for got in self.refused(con, sql):
                        seen.append((sql, got))
                        self.assertIsNotNone(got[0], sql)
                        self.assertEqual(got[0], CODES["RAFTSQL_REFUSED"],
                                         (sql, got))
                        self.assertEqual(got[0] & 0xff, 23)  # SQLITE_AUTH
                        self.assertTrue(got[1].startswith(
                            "raft_exec: not applied: " + why), (sql, got))
            after = wait_for("a leader with its log committed", self.settled)
            rounds.append((before, after))
            if after[0] == before[0]:
                self.assertEqual(after[1], before[1],
                                 "refusals took log indexes: %s" % seen)
                return
        self.fail("an election during every round, (term, last index) "
                  "before and after: %s" % rounds)

    def test_refused_when_applied_reads_the_same(self):
        """The table the request uses is created by the request itself:
        the caller's node cannot prepare it beforehand, the apply
        connection refuses it, with the same code and words."""
        rounds = []
        for _ in range(5):
            before = wait_for("a leader with its log committed", self.settled)
            for con in (self.leader, self.follower):
                for got in self.refused(
                        con, "CREATE TABLE IF NOT EXISTS n(a); "
                        "INSERT INTO n VALUES(sqlite_version())"):
                    self.assertEqual(got[0], CODES["RAFTSQL_REFUSED"], got)
                    self.assertEqual(got[1], "raft_exec: not applied: "
                                     "sqlite_version() cannot be used in "
                                     "raft_exec: the SQLite build may differ "
                                     "between nodes (during a rolling "
                                     "upgrade), so its answer would too")
            after = wait_for("a leader with its log committed", self.settled)
            rounds.append((before, after))
            if after[0] == before[0]:
                break
        else:
            self.fail("an election during every round, (term, last index) "
                      "before and after: %s" % rounds)
        # Four entries in one term,
        # each rolled back on every node: no table n.
        self.assertEqual(after[1], before[1] + 4)
        self.assertEqual(self.leader.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'n'"
        ).fetchone()[0], 0)


if __name__ == "__main__":
    unittest.main()
