"""The raftsql Python package as installed in a virtual environment: run
by that environment's interpreter (tests/python/test_package.py), with
RAFTSQL_ROOT naming the repository, whose headers and sources the codes
and keys are compared with (the package itself is imported from the
environment, never from the repository).
"""

import os
import pickle
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import raftsql

ROOT = os.environ["RAFTSQL_ROOT"]
sys.path.insert(0, os.path.join(ROOT, "tools"))
from raftsql_cluster import free_ports  # noqa: E402

TIMING = {"election_timeout_ms": 300, "heartbeat_ms": 30,
          "exec_timeout_ms": 10000}


def wait_for(what, predicate, seen, timeout=20.0):
    """Poll predicate() until it is true (at most @timeout s); on giving up
    fail naming @what and what seen() returns."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("gave up waiting for %s after %.0f s; saw: "
                                 "%r" % (what, timeout, seen()))
        time.sleep(0.05)


class InstalledTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-pkg-")
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            try:
                raftsql.stop(c)
            except raftsql.NoNode:
                pass
            c.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self, name):
        """A connection to file @name of the test's directory, raftsql
        loaded by the package."""
        c = sqlite3.connect(os.path.join(self.dir, name), timeout=10,
                            isolation_level=None, check_same_thread=False)
        raftsql.load(c)
        self.conns.append(c)
        return c

    def test_the_environment_s_copy(self):
        """The module and its library are the environment's, not the
        repository's."""
        prefix = os.path.realpath(sys.prefix)
        self.assertNotEqual(prefix, os.path.realpath(sys.base_prefix))
        for f in (raftsql.__file__, raftsql.path()):
            self.assertTrue(os.path.realpath(f).startswith(prefix + os.sep),
                            "%s is not in the environment %s" % (f, prefix))
        self.assertTrue(raftsql.path().endswith("/raftsql/raftsql.so"))
        here = os.path.dirname(raftsql.__file__)
        self.assertTrue(os.path.isfile(os.path.join(here, "py.typed")))

    def test_codes_are_the_header_s(self):
        """raftsql.CODES holds every RAFTSQL_* result code of raftsql.h with
        its number, and each maps to a class of its own."""
        with open(os.path.join(ROOT, "ext", "raftsql.h")) as f:
            header = f.read()
        primary = {"SQLITE_ERROR": 1, "SQLITE_BUSY": 5, "SQLITE_INTERRUPT": 9,
                   "SQLITE_FULL": 13, "SQLITE_CANTOPEN": 14,
                   "SQLITE_TOOBIG": 18, "SQLITE_AUTH": 23}
        want = {name: primary[p] | (int(n) << 8) for name, p, n in re.findall(
            r"#define (RAFTSQL_[A-Z_]+) \((SQLITE_[A-Z]+) \| \((\d+) << 8\)\)",
            header)}
        self.assertGreaterEqual(len(want), 13)
        self.assertEqual(dict(raftsql.CODES), want)
        classes = {raftsql.error_class(c) for c in want.values()}
        self.assertEqual(len(classes), len(want))
        for code in want.values():
            self.assertTrue(raftsql.is_own_code(code))
        e = pickle.loads(pickle.dumps(raftsql.NoNode("m", 28430,
                                                     "RAFTSQL_NO_NODE")))
        self.assertEqual((type(e), e.message, e.code, e.name),
                         (raftsql.NoNode, "m", 28430, "RAFTSQL_NO_NODE"))
        self.assertIs(raftsql.error_class(1555), raftsql.SQLiteError)
        self.assertFalse(raftsql.is_own_code(1555))
        self.assertTrue(issubclass(raftsql.InterruptedOutcomeUnknown,
                                   raftsql.OutcomeUnknown))

    def test_keys_are_the_parser_s(self):
        """raftsql.KEYS is the key list raft_start()'s parser knows, in its
        order."""
        with open(os.path.join(ROOT, "ext", "runtime", "config.c")) as f:
            text = f.read()
        m = re.search(r"static const char \*const keys\[\] = \{(.*?)\};",
                      text, re.S)
        self.assertIsNotNone(m, "no keys[] in ext/runtime/config.c")
        self.assertEqual(raftsql.KEYS, tuple(re.findall(r'"(\w+)"',
                                                        m.group(1))))

    def test_load_and_errors_without_a_node(self):
        """load() leaves extension loading off; calls without a node raise
        NoNode carrying RAFTSQL_NO_NODE, also through mapped_errors()."""
        c = self.connect("alone.db")
        with self.assertRaises(sqlite3.OperationalError) as cm:
            c.load_extension(raftsql.path())
        self.assertIn("not authorized", str(cm.exception))
        for call in (lambda: raftsql.status(c), lambda: raftsql.leader(c),
                     lambda: raftsql.execute(c, "CREATE TABLE t(x)"),
                     lambda: raftsql.stop(c)):
            with self.assertRaises(raftsql.NoNode) as cm:
                call()
            e = cm.exception
            self.assertEqual((e.code, e.name), (28430, "RAFTSQL_NO_NODE"))
            self.assertEqual(e.sqlite_errorcode, 28430)
            self.assertIsInstance(e, sqlite3.Error)
            self.assertIsInstance(e.__cause__, sqlite3.OperationalError)
            self.assertIn("no raftsql node runs for", e.message)
        with self.assertRaises(raftsql.NoNode):
            with raftsql.mapped_errors():
                c.execute("SELECT raft_exec('CREATE TABLE t(x)')")
        # An error with SQLite's own code, and one without a code at all.
        with self.assertRaises(raftsql.SQLiteError) as cm:
            with raftsql.mapped_errors():
                c.execute("SELECT nosuch()")
        self.assertEqual(cm.exception.name, "SQLITE_ERROR")
        mem = sqlite3.connect(":memory:")
        raftsql.load(mem)
        with self.assertRaises(raftsql.Invalid) as cm:
            raftsql.start(mem, id=1)
        self.assertIn("in-memory", str(cm.exception))
        mem.close()
        with self.assertRaises(sqlite3.ProgrammingError):
            with raftsql.mapped_errors():
                mem.execute("SELECT 1")

    def test_readme_example(self):
        """The README's example ("From Python"), on free ports, in a
        process of its own: it prints what its comments say."""
        with open(os.path.join(ROOT, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("\n## From Python\n"):]
        section = section[:section.index("\n## ", 1)]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        for i, port in enumerate(free_ports(3)):
            code = code.replace("127.0.0.1:%d" % (7001 + i),
                                "127.0.0.1:%d" % port)
        self.assertNotIn(":700", code)
        r = subprocess.run([sys.executable, "-c", code], cwd=self.dir,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertEqual(lines[0], "[('greeting', 'hello')]")
        self.assertIn(lines[1], ("leader", "follower", "candidate"))
        self.assertEqual(lines[2], "SQLITE_CONSTRAINT_PRIMARYKEY 1555")

    def test_config_text(self):
        """Keyword arguments become raft_start()'s text as it reads it."""
        import pathlib
        self.assertEqual(raftsql.config.config_text({
            "id": 2, "cluster": {1: "127.0.0.1:7001", 2: "[::1]:7002"},
            "checksum": False, "socket": True, "force_new_cluster": True,
            "dir": pathlib.Path("/var/lib/x"), "log_level": "info",
            "listen": None, "dial": "1@127.0.0.1:9101"}),
            "id=2 cluster=1@127.0.0.1:7001,2@[::1]:7002 checksum=off "
            "socket=on force_new_cluster=1 dir=/var/lib/x log_level=info "
            "dial=1@127.0.0.1:9101")

    def test_start_refuses_bad_keywords(self):
        """Unknown keys and values of the wrong type are refused before
        raft_start, naming the key; a value out of range by raft_start
        itself (Invalid), naming it too."""
        c = self.connect("bad.db")
        cases = [
            (dict(id=1, election_timeout=300), TypeError,
             "'election_timeout' (did you mean 'election_timeout_ms'?)"),
            (dict(id="1"), TypeError, "id: takes an int, not str"),
            (dict(id=1, heartbeat_ms=True), TypeError, "heartbeat_ms"),
            (dict(id=1, checksum="off"), TypeError, "checksum: takes a bool"),
            (dict(id=1, cluster=[1, 2]), TypeError, "cluster: takes"),
            (dict(id=1, cluster={"1": "127.0.0.1:7001"}), TypeError,
             "cluster (a server id)"),
            (dict(id=1, dir="/tmp/a b"), ValueError, "dir: '/tmp/a b' holds "
             "a blank"),
            (dict(id=1, listen=""), ValueError, "listen: the value is empty"),
            (dict(id=1, log_level="verbose"), ValueError,
             "log_level: 'verbose' is none of debug, info, warn, error"),
            (dict(id=1, election_timeout_ms=5), raftsql.Invalid,
             "election_timeout_ms: '5' is not an integer in [10, 600000]"),
        ]
        for config, exc, text in cases:
            with self.assertRaises(exc, msg=repr(config)) as cm:
                raftsql.start(c, **config)
            self.assertIn(text, str(cm.exception))
        with self.assertRaises(raftsql.NoNode):
            raftsql.status(c)

    def test_three_node_cluster(self):
        """Three nodes started with raftsql.start elect a leader; a write
        through a follower reaches every replica; errors carry their
        codes; stop() ends each node."""
        ports = free_ports(3)
        members = {i + 1: "127.0.0.1:%d" % p for i, p in enumerate(ports)}
        conns = [self.connect("node%d.db" % i) for i in (1, 2, 3)]
        for i, c in enumerate(conns):
            # Node 3 keeps no replica checksum (a node-local key).
            line = raftsql.start(c, id=i + 1, cluster=members,
                                 checksum=i < 2, log_level="warn", dir=None,
                                 **TIMING)
            self.assertIn("node %d started, listening on %s" % (
                i + 1, members[i + 1]), line)
        def leaders():
            return [raftsql.leader(c) for c in conns]
        wait_for("one leader known to all",
                 lambda: None not in leaders() and len(set(leaders())) == 1,
                 lambda: [(raftsql.status(c)["role"], raftsql.leader(c))
                          for c in conns])
        lead = raftsql.leader(conns[0])
        follower = conns[lead % 3]  # node lead + 1 (or 1): not the leader
        wait_for("one leader and two followers",
                 lambda: sorted(raftsql.status(c)["role"] for c in conns) ==
                 ["follower", "follower", "leader"],
                 lambda: [raftsql.status(c)["role"] for c in conns])
        self.assertEqual(raftsql.execute(
            follower, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)"), 0)
        self.assertEqual(raftsql.execute(
            follower, "INSERT INTO kv VALUES(?, ?)", "greeting", "hello"), 1)
        self.assertEqual(follower.execute("SELECT v FROM kv").fetchall(),
                         [("hello",)])

        def rows():
            return [c.execute("SELECT k, v FROM kv").fetchall()
                    if "kv" in [r[0] for r in c.execute(
                        "SELECT name FROM sqlite_schema")] else None
                    for c in conns]
        wait_for("the row on every replica",
                 lambda: rows() == [[("greeting", "hello")]] * 3, rows)
        applied = raftsql.status(follower)["applied"]
        st = raftsql.status(conns[lead - 1])
        self.assertEqual(st["id"], lead)
        self.assertGreaterEqual(st["commit"], applied)
        self.assertEqual(sorted(p["id"] for p in st["peers"]),
                         sorted(set(members) - {lead}))
        self.assertEqual([raftsql.status(c)["checksum"]["on"] for c in conns],
                         [True, True, False])

        with self.assertRaises(raftsql.SQLiteError) as cm:
            raftsql.execute(follower, "INSERT INTO kv VALUES('greeting', 2)")
        self.assertEqual((cm.exception.code, cm.exception.name),
                         (1555, "SQLITE_CONSTRAINT_PRIMARYKEY"))
        with self.assertRaises(raftsql.Refused) as cm:
            raftsql.execute(follower, "VACUUM")
        self.assertEqual((cm.exception.code, cm.exception.name),
                         (28951, "RAFTSQL_REFUSED"))
        follower.execute("BEGIN")
        with self.assertRaises(raftsql.Invalid) as cm:
            raftsql.execute(follower, "INSERT INTO kv VALUES('x', 1)")
        follower.execute("ROLLBACK")
        self.assertIn("inside a transaction", cm.exception.message)

        for c in conns:
            self.assertEqual(raftsql.stop(c), "stopped")
            with self.assertRaises(raftsql.NoNode):
                raftsql.status(c)


if __name__ == "__main__":
    unittest.main(verbosity=2)
