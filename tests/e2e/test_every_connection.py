"""End-to-end: raftsql loaded on one connection is on every connection the
process opens afterwards (sqlite3_auto_extension), and stays loaded when
the connection that loaded it closes.

Each scenario runs in a fresh process of its own, so that the load happens
where the test says: a Python process that loads raftsql on one
connection, then opens others with a plain sqlite3.connect(); the sqlite3
shell after `.load`, whose `.open` closes the connection that loaded it
(SQLite then unloads an extension it loaded) and opens another.

- A replica's file whose node is stopped: an INSERT on a second
  connection is refused as on the first (the same reason), with
  raft_last_error() and raft_status() there; so on a third connection
  opened after the first closed, and in the shell after `.open`. A file
  that is no replica's is written as before on a second connection.
- A replica's file that a node of the same process serves: a second
  connection writes through raft_exec, and with a plain INSERT (the
  node leads: plain writes are replicated); after
  the connection that loaded raftsql and started the node closes, the
  node runs on and a new connection writes through it.

Before, only the connection that loaded raftsql had it: the second
connection wrote the stopped replica's file unguarded (no such function
raft_last_error), and the shell's `.open` lost raftsql.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from attach_writers import PYTHON, SO_BASE
from e2e import ClusterCase
from raftsql_cluster import free_ports

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"
REFUSED = "is a Raft replica (it has a raftsql_applied table) and no " \
          "raftsql node serves it"
NO_NODE = "raft_status: no raftsql node runs for"

# Shared by the scripts below: run(con, sql, *params) answers
# {"rows": [...]} or {"error": ..., "code": ...}; load(con) loads raftsql.
COMMON = r"""
import json, sqlite3, sys, time
SO = sys.argv[1]
def run(con, sql, *params):
    try:
        return {"rows": [list(r) for r in con.execute(sql, params)]}
    except sqlite3.Error as e:
        return {"error": str(e), "code": getattr(e, "sqlite_errorcode", None)}
def load(con):
    con.enable_load_extension(True)
    con.load_extension(SO)
    con.enable_load_extension(False)
def connect(path):
    return sqlite3.connect(path, isolation_level=None, timeout=10)
out = {}
"""

# A stopped replica's file (argv[2]) and a plain file (argv[3]): raftsql
# loaded on a first connection to the replica only.
STOPPED = COMMON + r"""
first = connect(sys.argv[2])
load(first)
out["first"] = [run(first, "INSERT INTO kv VALUES('first', 1)"),
                run(first, "SELECT raft_last_error()")]
second = connect(sys.argv[2])
out["second"] = [run(second, "INSERT INTO kv VALUES('second', 2)"),
                 run(second, "SELECT raft_last_error()"),
                 run(second, "SELECT raft_status()"),
                 run(second, "SELECT k, v FROM kv ORDER BY k")]
plain = connect(sys.argv[3])
out["plain"] = [run(plain, "CREATE TABLE p(x)"),
                run(plain, "INSERT INTO p VALUES(1)"),
                run(plain, "SELECT x FROM p")]
first.close()
third = connect(sys.argv[2])
out["third"] = [run(third, "INSERT INTO kv VALUES('third', 3)"),
                run(third, "SELECT raft_last_error()")]
print(json.dumps(out))
"""

# A node of this process for the fresh file argv[2], one voter on port
# argv[3], started on the connection that loads raftsql.
SERVED = COMMON + r"""
first = connect(sys.argv[2])
load(first)
run(first, "SELECT raft_start(?)",
    "id=1 cluster=1@127.0.0.1:%s election_timeout_ms=300 heartbeat_ms=30 "
    "exec_timeout_ms=10000" % sys.argv[3])
second = connect(sys.argv[2])
deadline = time.monotonic() + 15
while run(second, "SELECT raft_leader()") != {"rows": [[1]]}:
    if time.monotonic() > deadline:
        out["leader"] = run(second, "SELECT raft_leader()")
        break
    time.sleep(0.05)
out["second"] = [
    run(second, "SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')"),
    run(second, "SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', 'b', 1)"),
    run(second, "INSERT INTO kv VALUES('direct', 0)"),
    run(second, "SELECT raft_last_error()")]
first.close()
third = connect(sys.argv[2])
out["third"] = [
    run(third, "SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', 'c', 2)"),
    run(third, "SELECT k, v FROM kv ORDER BY k")]
status = run(third, "SELECT raft_status()")
out["leader_id"] = (json.loads(status["rows"][0][0]).get("leader")
                    if "rows" in status else status)
out["stop"] = run(third, "SELECT raft_stop()")
print(json.dumps(out))
"""


def script(text, *args):
    """Run Python @text in a new process with argv SO_BASE, @args; return
    its JSON answer (it must exit 0 within 60 s)."""
    out = subprocess.run([PYTHON, "-c", text, SO_BASE] + list(args),
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("script failed (%d): %s" % (out.returncode,
                                                         out.stderr))
    return json.loads(out.stdout)


class StoppedReplicaTest(ClusterCase):

    def setUp(self):
        self.start_kv(EXTRA)
        self.follower = self.followers[0]
        self.assertEqual(self.follower.stop(), 0)

    def assert_refused(self, answers, how):
        """@answers: an INSERT's, then raft_last_error()'s; the INSERT
        was refused as a write to a replica no node serves."""
        insert, last = answers
        self.assertEqual(insert.get("code"), 23, (how, insert))  # AUTH
        self.assertIn("not authorized", insert["error"], how)
        self.assertIn("rows", last, (how, last))
        why = last["rows"][0][0] or ""
        self.assertTrue(why.startswith("direct write to kv refused: %s %s"
                                       % (self.follower.db, REFUSED)),
                        (how, why))

    def test_python_second_and_later_connections(self):
        """The second connection's INSERT is refused with the first's
        reason, raft_last_error() and raft_status() answer there (no node:
        raftsql's error, not "no such function"), a plain file is written
        on another; a third connection, opened once the one that loaded
        raftsql closed, is refused too; the replica keeps its rows."""
        plain = os.path.join(self.dir, "plain.db")
        out = script(STOPPED, self.follower.db, plain)
        self.assert_refused(out["first"], "first connection")
        self.assert_refused(out["second"][:2], "second connection")
        self.assertEqual(out["first"][1], out["second"][1])
        self.assertIn(NO_NODE, out["second"][2].get("error", ""),
                      out["second"][2])
        self.assertEqual(out["second"][3], {"rows": [["a", 1]]})
        self.assertEqual(out["plain"], [{"rows": []}, {"rows": []},
                                        {"rows": [[1]]}])
        self.assert_refused(out["third"], "after the first closed")

    def test_shell_open_after_load(self):
        """In the sqlite3 shell, `.load` on a plain file, then `.open` of
        the stopped replica: its INSERT is refused and raft_last_error()
        says why; `.open` of a plain file then writes it."""
        plain = os.path.join(self.dir, "shell-plain.db")
        first = os.path.join(self.dir, "shell-first.db")
        cmds = "\n".join([
            ".load " + SO_BASE,
            ".open " + self.follower.db,
            "INSERT INTO kv VALUES('shell', 2);",
            "SELECT 'why: ' || raft_last_error();",
            ".open " + plain,
            "CREATE TABLE s(x);",
            "INSERT INTO s VALUES(42);",
            "SELECT 'plain: ' || x FROM s;"]) + "\n"
        out = subprocess.run(["sqlite3", first], input=cmds,
                             capture_output=True, text=True, timeout=60)
        self.assertIn("not authorized", out.stderr, out)
        self.assertIn("why: direct write to kv refused: %s %s" %
                      (self.follower.db, REFUSED), out.stdout, out)
        self.assertIn("plain: 42", out.stdout, out)
        con = subprocess.run(["sqlite3", self.follower.db,
                              "SELECT k FROM kv ORDER BY k"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(con.stdout.split(), ["a"], con)


class ServedInProcessTest(unittest.TestCase):

    def test_second_connection_writes_through_the_node(self):
        """A node started on the connection that loaded raftsql (the
        leader of its one-voter cluster): a second connection's raft_exec
        writes, and so does its plain INSERT (replicated: plain writes on
        the leader's node, in its process); the first connection closed,
        the node runs on and a third connection writes through it."""
        d = tempfile.mkdtemp(prefix="raftsql-every-")
        self.addCleanup(shutil.rmtree, d, True)
        db = os.path.join(d, "node1.db")
        out = script(SERVED, db, str(free_ports(1)[0]))
        self.assertNotIn("leader", out, out)
        self.assertEqual(out["second"][:2],
                         [{"rows": [[0]]}, {"rows": [[1]]}], out)
        self.assertEqual(out["second"][2:], [{"rows": []},
                                             {"rows": [[None]]}], out)
        self.assertEqual(out["third"],
                         [{"rows": [[1]]},
                          {"rows": [["b", 1], ["c", 2], ["direct", 0]]}],
                         out)
        self.assertEqual(out["leader_id"], 1, out)
        self.assertNotIn("error", out["stop"], out)


if __name__ == "__main__":
    unittest.main()
