"""The Node.js example (examples/node/example.js, README "From Node.js"):
raftsql loaded into better-sqlite3 in a process of its own, writing and
reading through a node that a daemon runs.

Three raftsql-node daemons (RAFTSQL_DAEMON, the optimized build) hold a
cluster on 127.0.0.1; the example runs against node 2's database file and
its write must reach all three. better-sqlite3 (the version of
examples/node/package.json) is installed with npm into a cache outside
the tree, once per machine and Node.js version (it compiles its own SQLite:
a minute or two), then reused: RAFTSQL_NODE_CACHE, default
~/.cache/raftsql/node-<version>.  Skipped, saying why, when node or npm is
missing or Node.js is older than 20 (Debian 12's nodejs is 18; the
machine's Node.js 20 comes from elsewhere).

Run by `make node-test` (part of `make test`).
"""

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "node")
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from e2e import SO, connect, wait_for  # noqa: E402
from raftsql_cluster import free_ports  # noqa: E402
from test_daemon import FAST, Daemon, read_rows  # noqa: E402

NODE_MIN = 20  # better-sqlite3 12 wants Node.js 20 or later


def wanted_version():
    """The better-sqlite3 version examples/node/package.json names."""
    with open(os.path.join(EXAMPLE, "package.json")) as f:
        return json.load(f)["dependencies"]["better-sqlite3"]


def node_version():
    """`node --version` without its v, or None when node is missing."""
    if shutil.which("node") is None:
        return None
    out = subprocess.run(["node", "--version"], capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().lstrip("v") if out.returncode == 0 else None


def missing(version):
    """Why the example cannot run here, or None."""
    if version is None:
        return ("node is not installed (Debian 12's nodejs is 18, older "
                "than better-sqlite3 12 needs: Node.js %d or later)"
                % NODE_MIN)
    if int(version.split(".")[0]) < NODE_MIN:
        return ("node %s is older than better-sqlite3 %s needs (Node.js %d "
                "or later)" % (version, wanted_version(), NODE_MIN))
    if shutil.which("npm") is None:
        return "npm is not installed (it installs better-sqlite3)"
    return None


def installed(cache):
    """Whether @cache holds a built better-sqlite3 of the wanted version."""
    base = os.path.join(cache, "node_modules", "better-sqlite3")
    try:
        with open(os.path.join(base, "package.json")) as f:
            version = json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return False
    return version == wanted_version() and os.path.isfile(
        os.path.join(base, "build", "Release", "better_sqlite3.node"))


def install(cache):
    """Install examples/node's packages into @cache unless there already:
    into a directory beside it first, renamed into place once built, so
    that a run stopped half-way leaves nothing that looks installed."""
    if installed(cache):
        return
    print("node-test: installing better-sqlite3 %s into %s with npm (it "
          "compiles its own SQLite: a minute or two, once)"
          % (wanted_version(), cache), flush=True)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    work = tempfile.mkdtemp(prefix=os.path.basename(cache) + ".",
                            dir=os.path.dirname(cache))
    try:
        shutil.copy(os.path.join(EXAMPLE, "package.json"), work)
        env = dict(os.environ, npm_config_build_from_source="true",
                   npm_config_jobs="2")
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                            "--no-package-lock"], cwd=work, env=env,
                           text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=1200)
        if r.returncode != 0 or not installed(work):
            raise AssertionError("npm install of better-sqlite3 in %s failed "
                                 "(exit %d):\n%s" % (work, r.returncode,
                                                     r.stdout[-6000:]))
        shutil.rmtree(cache, ignore_errors=True)
        os.rename(work, cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class CodesTest(unittest.TestCase):
    """What the example says without running it (no node needed)."""

    def test_codes_are_the_header_s(self):
        """The example's table of raftsql's codes is ext/raftsql.h's."""
        from codes import CODES
        with open(os.path.join(EXAMPLE, "example.js")) as f:
            table = dict(re.findall(r"^  (\d+): '(RAFTSQL_[A-Z_]+)',$",
                                    f.read(), re.M))
        self.assertEqual({name: int(n) for n, name in table.items()}, CODES)


class NodeExampleTest(unittest.TestCase):
    """The example against three daemons: setUp starts them."""

    @classmethod
    def setUpClass(cls):
        version = node_version()
        why = missing(version)
        if why is not None:
            print("node-test: skipped: " + why, flush=True)
            raise unittest.SkipTest(why)
        cls.cache = os.environ.get("RAFTSQL_NODE_CACHE") or os.path.join(
            os.path.expanduser("~"), ".cache", "raftsql", "node-" + version)
        install(cls.cache)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-node-")
        ports = free_ports(3)
        members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                           for i, p in enumerate(ports))
        keys = ["%s = %s" % kv for kv in FAST.items()]
        self.daemons = [Daemon(self.dir, i, ["id = %d" % i,
                                             "cluster = " + members] + keys)
                        for i in (1, 2, 3)]
        self.con = None

    def tearDown(self):
        if self.con is not None:
            self.con.close()
        codes = [d.stop() for d in self.daemons]
        if codes != [0, 0, 0]:
            for d in self.daemons:
                print(d.log()[-3000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0], "a daemon exited with an error")

    def leader(self):
        """The leader node 2's daemon knows, through its socket; None while
        it knows none or does not serve the file yet."""
        try:
            return self.con.execute("SELECT raft_leader()").fetchone()[0]
        except sqlite3.Error:
            return None

    def test_example_writes_through_the_daemon(self):
        """The example writes and reads through node 2's daemon from its
        own process; its write reaches all three nodes; plain writes and
        raft_start are refused with their reasons (no crash)."""
        db = self.daemons[1].db
        self.con = connect(db)
        try:
            wait_for("a leader known to node 2", self.leader)
        except TimeoutError:
            self.fail("no leader known to node 2 within 20 s; its log:\n"
                      + self.daemons[1].log()[-3000:])
        env = dict(os.environ,
                   NODE_PATH=os.path.join(self.cache, "node_modules"))
        r = subprocess.run(["node", os.path.join(EXAMPLE, "example.js"), db,
                            os.path.abspath(SO)], cwd=self.dir, env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, "example.js exited %d:\n%s%s" % (
            r.returncode, r.stdout, r.stderr))
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 7, r.stdout)
        self.assertEqual(lines[0], "raft_exec changed 1 row")
        self.assertEqual(lines[1], 'raft_query returned [["NODE.JS"]]')
        self.assertEqual(lines[2], 'read [{"k":"from","v":"NODE.JS"}]')
        self.assertRegex(lines[3], r"^node 2 is (leader|follower), leader "
                         r"[123]$")
        self.assertEqual(lines[4], "duplicate key: "
                         "SQLITE_CONSTRAINT_PRIMARYKEY: UNIQUE constraint "
                         "failed: kv.k")
        self.assertRegex(lines[5], r"^plain INSERT refused: SQLITE_AUTH: "
                         r"plain SQL write to .*node2\.db refused: plain SQL "
                         r"writes need SQLite's pre-update hook")
        self.assertEqual(lines[6], "raft_start refused: RAFTSQL_INVALID")
        for d in self.daemons:
            try:
                wait_for("node %d holds the row" % d.id,
                         lambda: read_rows(d.db, "SELECT k, v FROM kv") ==
                         [("from", "NODE.JS")])
            except TimeoutError:
                self.fail("node %d holds %r after 20 s, not the row" % (
                    d.id, read_rows(d.db, "SELECT k, v FROM kv")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
