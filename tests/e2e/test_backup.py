"""Data in and out: a new cluster bootstrapped from a
SQLite file (bootstrap_from= on a founder alone, the others join=), its
followers filled by a snapshot; the unsafe founding (every founder with
cluster=) refused, and, forced, caught as a divergence;
raft_backup() of a replica, which bootstraps another cluster with the same
content and a new cluster id; the refusals; raft_load_sql() of a script,
(tests/e2e/test_load_sql.py has raft_load_sql()). One cluster is
shared by the tests of the file (the Chinook database when
../shared/data is there, else a generated one).
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from codes import CODES  # noqa: E402
from e2e import NODE, ROOT, connect, wait_for, without_raftsql  # noqa: E402
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
from fingerprint import fingerprint, render  # noqa: E402

BASE = "election_timeout_ms=300 heartbeat_ms=30"
FAST = BASE + " exec_timeout_ms=10000"
SQLITE_CONSTRAINT = 19
CHINOOK = os.path.join(ROOT, "..", "shared", "data", "chinook",
                       "Chinook_Sqlite.sql")
if not os.path.exists(CHINOOK):
    CHINOOK = "/work/shared/data/chinook/Chinook_Sqlite.sql"


def make_source(path):
    """Build the source database at @path: Chinook from its script, or
    (without the shared data) a generated database; returns its name."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if os.path.exists(CHINOOK):
            with open(CHINOOK, encoding="utf-8-sig") as f:
                con.executescript(f.read())
            return "chinook"
        sys.stderr.write("test_backup: %s is absent: using a generated "
                         "database\n" % CHINOOK)
        con.executescript(
            "CREATE TABLE artist(id INTEGER PRIMARY KEY, name TEXT);"
            "CREATE TABLE album(id INTEGER PRIMARY KEY, artist INTEGER "
            " REFERENCES artist(id), title TEXT, price REAL, cover BLOB);"
            "CREATE INDEX album_artist ON album(artist);")
        con.execute("BEGIN")
        for i in range(2000):
            con.execute("INSERT INTO artist VALUES (?, ?)",
                        (i, "artist %d" % i))
            con.execute("INSERT INTO album VALUES (?, ?, ?, ?, ?)",
                        (i, i, "title %d" % i, i / 7.0, bytes([i % 256]) * 40))
        con.execute("COMMIT")
        return "generated"
    finally:
        con.close()


def source_script(source, path):
    """The SQL script to load: Chinook's own, else the generated
    database's dump (written to @path)."""
    if os.path.exists(CHINOOK):
        return CHINOOK
    con = sqlite3.connect(source)
    with open(path, "w") as f:
        for line in con.iterdump():
            f.write(line + "\n")
    con.close()
    return path


class Cluster3:
    """Three testhost nodes in @workdir named @tag; @env maps a node id to
    variables of its process's environment. With a @source, the
    procedure of docs/data.md: node 1 founds the cluster alone with bootstrap_from=@source,
    nodes 2 and 3 join it (join=, empty databases), receive the snapshot
    and become voters. Without (None), three founders of empty databases
    with the same cluster=."""

    def __init__(self, workdir, tag, source, extra="exec_timeout_ms=10000",
                 env=None):
        self.ports = free_ports(3)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(self.ports))
        self.nodes = []
        self.workdir = workdir
        self.tag = tag
        self.extra = extra
        self.env = env or {}
        self.source = source
        try:
            if source:
                self.nodes.append(self.spawn(
                    1, "cluster=1@127.0.0.1:%d bootstrap_from=%s" % (
                        self.ports[0], source)))
                wait_for("node 1 leads", lambda: self.nodes[0].value(
                    "SELECT raft_leader()") == 1)
                for i in (2, 3):
                    self.nodes.append(self.spawn(
                        i, "listen=127.0.0.1:%d join=127.0.0.1:%d" % (
                            self.ports[i - 1], self.ports[0])))
            else:
                for i in (1, 2, 3):
                    self.nodes.append(self.spawn(
                        i, "cluster=%s" % self.members))
        except BaseException:
            for n in self.nodes:
                n.kill()
            raise

    def spawn(self, i, where):
        db = os.path.join(self.workdir, "%s%d.db" % (self.tag, i))
        log = os.path.join(self.workdir, "%s%d.log" % (self.tag, i))
        n = Node(NODE, i, db, log, env=self.env.get(i))
        try:
            n.sql("SELECT raft_start(?)", "id=%d %s %s %s" % (
                i, where, BASE, self.extra))
        except BaseException:
            n.kill()
            raise
        return n

    def voters(self):
        """The voters of the configuration in force on node 1."""
        conf = self.nodes[0].status()["configuration"]
        return sorted(m["id"] for m in conf["members"]
                      if m["role"] == "voter")

    def settle(self):
        """Wait until the three are voters, every node knows the cluster
        id and applied what any of them did (a write's caller may be
        ahead of node 1)."""
        try:
            wait_for("three voters", lambda: self.voters() == [1, 2, 3], 30)
        except TimeoutError:
            for n in self.nodes:
                with open(n.log_path, errors="replace") as f:
                    sys.stderr.write("--- node %d (%s)\n%s\n" % (
                        n.id, self.tag, "".join(f.readlines()[-40:])))
            raise
        wait_for("a cluster id everywhere", lambda: all(
            n.status()["cluster_id"] for n in self.nodes), 30)
        target = max(n.status()["applied"] for n in self.nodes)
        wait_for("every node applied %d" % target, lambda: all(
            n.status()["applied"] >= target for n in self.nodes), 30)

    def stop(self):
        return [n.stop() for n in self.nodes]


class SharedCluster(unittest.TestCase):
    """One bootstrapped cluster shared by the tests of a class (here and
    in test_load_sql.py, each class its own)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-backup-")
        cls.source = os.path.join(cls.dir, "source.db")
        cls.kind = make_source(cls.source)
        with open(cls.source, "rb") as f:
            cls.source_bytes = f.read()
        cls.expected = fingerprint(cls.source)
        # The leader holds its snapshot transfers after their first
        # chunk while this file exists (RAFTSQL_TEST_SNAPSHOT_HOLD), so
        # the progress in status is seen under way, still once that chunk
        # is acknowledged; then they finish.
        hold = os.path.join(cls.dir, "hold")
        open(hold, "w").close()
        cls.extra = []
        cls.a = Cluster3(cls.dir, "a", cls.source,
                         extra="exec_timeout_ms=10000 "
                         "snapshot_chunk_bytes=4096",
                         env={1: {"RAFTSQL_TEST_SNAPSHOT_HOLD": hold}})
        try:
            cls.held = wait_for("both transfers under way", lambda: (
                cls.transfers_held(cls.a)), 30)
            time.sleep(0.3)
            cls.held_later = cls.transfers_held(cls.a)
        finally:
            os.unlink(hold)
        cls.a.settle()

    @staticmethod
    def transfers_held(cluster):
        """The leader's per-peer snapshot progress and the receivers'
        snapshot_transfer, once both transfers are under way on both
        sides and held (the first chunk acknowledged: the leader counts
        it when its acknowledgement arrives, after the receiver took it
        in); else None."""
        leader = cluster.nodes[0].status()
        sending = {p["id"]: p.get("snapshot") for p in leader["peers"]}
        if not all(sending.get(i) and sending[i]["bytes"] > 0
                   for i in (2, 3)):
            return None
        receiving = {n.id: n.status()["snapshot_transfer"]
                     for n in cluster.nodes[1:]}
        # A receiver shows its transfer once its loop took the first
        # chunk in, a little after the leader counted it sent.
        if not all(receiving.values()):
            return None
        return sending, receiving

    @classmethod
    def tearDownClass(cls):
        codes = cls.a.stop()
        for c in cls.extra:
            codes += c.stop()
        bad = [c for c in codes if c not in (0, None)]
        if bad:
            for name in sorted(os.listdir(cls.dir)):
                if name.endswith(".log"):
                    with open(os.path.join(cls.dir, name),
                              errors="replace") as f:
                        sys.stderr.write(f.read()[-3000:])
        shutil.rmtree(cls.dir, ignore_errors=True)
        if bad:
            raise AssertionError("a node exited with %s" % codes)


class BackupTest(SharedCluster):
    """raft_backup, bootstrap_from, the snapshots that fill the
    followers, the refusals."""

    def test_backup_refused_on_a_diverged_replica(self):
        """A replica that took a write the node did not make refuses
        raft_backup, naming the divergence, and writes no file (a lone
        node: it stays diverged)."""
        port = free_ports(1)[0]
        db = os.path.join(self.dir, "lone.db")
        n = Node(NODE, 1, db, db + ".log")
        try:
            n.sql("SELECT raft_start(?)", "id=1 cluster=1@127.0.0.1:%d %s" %
                  (port, FAST))
            wait_for("a leader", lambda: n.value("SELECT raft_leader()"))
            n.value("SELECT raft_exec('CREATE TABLE kv(k, v)')")
            # The stock shell loads no raftsql: nothing refuses it.
            subprocess.run(["sqlite3", "-init", "/dev/null", "-batch",
                            "-cmd", ".timeout 10000", db,
                            "INSERT INTO kv VALUES ('x', 1)"], check=True,
                           timeout=30)
            wait_for("diverged", lambda: n.status()["diverged"], 20)
            target = os.path.join(self.dir, "diverged-backup.db")
            with self.assertRaises(NodeError) as cm:
                n.value("SELECT raft_backup(?)", target)
            self.assertIn("raft_backup: this replica is diverged (",
                          str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_DIVERGED"])
            self.assertFalse(os.path.exists(target))
        finally:
            self.assertEqual(n.stop(), 0)

    def lone(self, name, where="", env=None):
        """A one-server cluster on database @name of the test directory,
        started (@where: more keys), leading."""
        port = free_ports(1)[0]
        db = os.path.join(self.dir, name)
        n = Node(NODE, 1, db, db + ".log", env=env)
        try:
            n.sql("SELECT raft_start(?)", "id=1 cluster=1@127.0.0.1:%d %s %s"
                  % (port, where, FAST))
            wait_for("a leader", lambda: n.value("SELECT raft_leader()"))
        except BaseException:
            n.kill()
            raise
        return n

    def test_backup_never_copies_an_unseen_foreign_write(self):
        """A foreign write the node has not seen yet (a test build without
        the idle check: it would take up to a second) is found in the
        copy raft_backup makes, checked as a snapshot is against the
        running checksum: the copy is removed, the replica marked
        diverged, RAFTSQL_DIVERGED. A replica copy whose content differs
        from its running checksum (edited without raftsql) is refused by
        bootstrap_from=, naming the table, RAFTSQL_INVALID. Before, the
        backup succeeded holding the write, and a new cluster was founded
        on it with raft_verify saying equal:true."""
        n = self.lone("fw.db", env={"RAFTSQL_TEST_NO_IDLE_CHECK": "1"})
        try:
            n.value("SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')")
            n.value("SELECT raft_exec('WITH RECURSIVE c(i) AS (SELECT 1 "
                    "UNION ALL SELECT i + 1 FROM c WHERE i < 50) INSERT "
                    "INTO kv SELECT ''k'' || i, i FROM c')")
            good = os.path.join(self.dir, "fw-good.db")
            json.loads(n.value("SELECT raft_backup(?)", good))
            # The copy edited without raftsql (this process loaded it,
            # which would refuse the write to a replica's copy):
            # bootstrap_from refuses it.
            bad = os.path.join(self.dir, "fw-edited.db")
            shutil.copy(good, bad)
            without_raftsql(bad, "UPDATE kv SET v = 777 WHERE k = 'k42'")
            b = Node(NODE, 1, os.path.join(self.dir, "fw-boot.db"),
                     os.path.join(self.dir, "fw-boot.log"))
            try:
                with self.assertRaises(NodeError) as cm:
                    b.sql("SELECT raft_start(?)",
                          "id=1 cluster=1@127.0.0.1:%d bootstrap_from=%s %s"
                          % (free_ports(1)[0], bad, FAST))
            finally:
                self.assertEqual(b.stop(), 0)
            self.assertIn("fw-edited.db is a replica copy", str(cm.exception))
            self.assertIn("differs from the running checksum stored in it, "
                          "in kv:", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])

            # The stock shell loads no raftsql: nothing refuses it.
            subprocess.run(["sqlite3", "-init", "/dev/null", "-batch",
                            "-cmd", ".timeout 10000", n.db,
                            "UPDATE kv SET v = 777 WHERE k = 'k42'"],
                           check=True, timeout=30)
            target = os.path.join(self.dir, "fw-backup.db")
            with self.assertRaises(NodeError) as cm:
                n.value("SELECT raft_backup(?)", target)
            self.assertIn("raft_backup: the copy made at index",
                          str(cm.exception))
            self.assertIn("differs from the running checksum in kv",
                          str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_DIVERGED"])
            self.assertFalse(os.path.exists(target))
            st = n.status()["diverged"]
            self.assertIsNotNone(st)
            self.assertIn("the copy made at index", st["reason"])
        finally:
            self.assertEqual(n.stop(), 0)

    def test_bootstrap_carries_the_cluster_wide_settings(self):
        """A cluster bootstrapped from a raft_backup() file keeps the
        PRAGMA settings set through raft_exec (replicated state): foreign
        keys stay enforced; the request ids of the old cluster are not
        carried, the cluster id is new. Before, raftsql_settings was empty
        there and a foreign key violation was applied."""
        old = self.lone("set-old.db")
        try:
            for sql in ("PRAGMA foreign_keys=ON",
                        "PRAGMA recursive_triggers=ON",
                        "CREATE TABLE parent(id INTEGER PRIMARY KEY)",
                        "CREATE TABLE child(p REFERENCES parent(id))",
                        "INSERT INTO parent VALUES (1)"):
                old.value("SELECT raft_exec(?)", sql)
            old.value("SELECT raft_exec_id('one', "
                      "'INSERT INTO child VALUES (1)')")
            path = os.path.join(self.dir, "set-backup.db")
            json.loads(old.value("SELECT raft_backup(?)", path))
            old_id = old.value("SELECT raft_cluster_id()")
        finally:
            self.assertEqual(old.stop(), 0)
        con = sqlite3.connect(path)
        want = con.execute("SELECT name, value FROM raftsql_settings "
                           "ORDER BY name").fetchall()
        self.assertGreater(con.execute(
            "SELECT count(*) FROM raftsql_client_requests").fetchone()[0], 0)
        con.close()
        self.assertEqual(want, [("foreign_keys", 1),
                                ("recursive_triggers", 1)])
        new = self.lone("set-new.db", "bootstrap_from=%s" % path)
        try:
            con = sqlite3.connect(new.db)
            self.assertEqual(con.execute(
                "SELECT name, value FROM raftsql_settings "
                "ORDER BY name").fetchall(), want)
            for t in ("raftsql_client_requests", "raftsql_requests"):
                self.assertEqual(con.execute(
                    "SELECT count(*) FROM %s" % t).fetchone()[0], 0, t)
            con.close()
            with self.assertRaises(NodeError) as cm:
                new.value("SELECT raft_exec('INSERT INTO child VALUES (9)')")
            self.assertIn("FOREIGN KEY constraint failed", str(cm.exception))
            self.assertEqual(new.value("SELECT count(*) FROM child"), 1)
            # The id applied in the old cluster is no id here.
            new.value("SELECT raft_exec_id('one', "
                      "'INSERT INTO parent VALUES (2)')")
            self.assertEqual(new.value("SELECT count(*) FROM parent"), 2)
            wait_for("a cluster id", lambda: new.value(
                "SELECT raft_cluster_id()"))
            self.assertNotEqual(new.value("SELECT raft_cluster_id()"), old_id)
        finally:
            self.assertEqual(new.stop(), 0)

    def test_followers_receive_the_file_as_a_snapshot(self):
        """Every node holds the source's content (equal fingerprints);
        the followers got it as a snapshot; the source is unchanged."""
        if self.kind == "chinook":
            with open(os.path.join(os.path.dirname(CHINOOK),
                                   "expected-fingerprint.txt")) as f:
                self.assertEqual(render(self.expected), f.read())
        for n in self.a.nodes:
            self.assertEqual(fingerprint(n.db), self.expected, n.id)
        for n in self.a.nodes[1:]:
            self.assertGreaterEqual(n.status()["snapshots_installed"], 1)
        # The replica checksums agree (no divergence seen).
        sums = set()
        for n in self.a.nodes:
            st = n.status()
            self.assertIsNone(st["diverged"], st)
            self.assertIsNone(st["checksum"]["mismatch"], st)
            if st["checksum"]["on"]:
                sums.add((st["checksum"]["index"], st["checksum"]["value"]))
        self.assertEqual(len(sums), 1, sums)
        self.assertGreaterEqual(
            self.a.nodes[0].status()["snapshots_sent"], 2)
        with open(self.source, "rb") as f:
            self.assertEqual(f.read(), self.source_bytes)
        # The cluster takes writes on top of it.
        self.a.nodes[1].value("SELECT raft_exec('CREATE TABLE extra(x)')")

    def test_snapshot_progress_in_status(self):
        """While the leader sends the bootstrap snapshot, raft_status()
        shows per peer the bytes acknowledged of the total, and each
        receiver the bytes received from the leader; held, they stay;
        done, they are gone."""
        sending, receiving = self.held
        for i in (2, 3):
            snap = sending[i]
            self.assertGreater(snap["bytes"], 0, sending)
            self.assertLess(snap["bytes"], snap["total"], sending)
            self.assertEqual(snap["bytes"] % 4096, 0, sending)
            recv = receiving[i]
            self.assertEqual(recv["peer"], 1, receiving)
            self.assertEqual(recv["total"], snap["total"], receiving)
            self.assertGreaterEqual(recv["bytes"], snap["bytes"], receiving)
            self.assertLess(recv["bytes"], recv["total"], receiving)
        later_sending, _ = self.held_later
        self.assertEqual(later_sending, sending)
        leader = self.a.nodes[0].status()
        self.assertEqual([p["snapshot"] for p in leader["peers"]],
                         [None, None])
        for n in self.a.nodes[1:]:
            self.assertIsNone(n.status()["snapshot_transfer"])

    def test_backup_bootstraps_a_new_cluster(self):
        """raft_backup on a follower writes a copy at an applied index; it
        refuses an existing file and a missing directory; a cluster
        bootstrapped from the copy holds the same content (fingerprints)
        under a new cluster id."""
        follower = self.a.nodes[1]
        path = os.path.join(self.dir, "backup.db")
        r = json.loads(follower.value("SELECT raft_backup(?)", path))
        self.assertEqual(r["path"], path)
        self.assertEqual(r["bytes"], os.path.getsize(path))
        self.assertGreaterEqual(r["index"], 2)
        self.assertGreaterEqual(r["term"], 1)
        with self.assertRaises(NodeError) as cm:
            follower.value("SELECT raft_backup(?)", path)
        self.assertIn("exists: raft_backup never overwrites",
                      str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        self.assertEqual(r["bytes"], os.path.getsize(path))
        with self.assertRaises(NodeError) as cm:
            follower.value("SELECT raft_backup(?)",
                           os.path.join(self.dir, "nodir", "b.db"))
        self.assertIn("nodir does not exist", str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "nodir")))
        with self.assertRaises(NodeError) as cm:
            follower.value("SELECT raft_backup(?)",
                           os.path.join(self.dir, "x" * 300))
        self.assertIn(": cannot be created: File name too long",
                      str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])

        b = Cluster3(self.dir, "b", path)
        self.extra.append(b)
        b.settle()
        want = fingerprint(follower.db)
        for n in b.nodes:
            self.assertEqual(fingerprint(n.db), want, n.id)
        ida = self.a.nodes[0].value("SELECT raft_cluster_id()")
        idb = b.nodes[0].value("SELECT raft_cluster_id()")
        self.assertIsNotNone(idb)
        self.assertNotEqual(ida, idb)
        self.assertEqual({n.value("SELECT raft_cluster_id()")
                          for n in b.nodes}, {idb})

    def test_backup_from_another_process(self):
        """raft_backup on a connection of a process that runs no node goes
        to the node's process through its socket; a relative path is
        refused there."""
        con = connect(self.a.nodes[2].db)
        try:
            path = os.path.join(self.dir, "attached.db")
            r = json.loads(con.execute("SELECT raft_backup(?)",
                                       (path,)).fetchone()[0])
            self.assertEqual(r["path"], path)
            self.assertEqual(fingerprint(path), fingerprint(
                self.a.nodes[2].db))
            with self.assertRaises(sqlite3.Error) as cm:
                con.execute("SELECT raft_backup('rel.db')").fetchone()
            self.assertIn("give an absolute path", str(cm.exception))
        finally:
            con.close()

    def test_founders_without_the_data_never_split_silently(self):
        """The old procedure, made deterministic: nodes 2 and 3 (same
        cluster=, empty databases) start first and elect a leader, then
        node 1 with that cluster= and bootstrap_from=. Its start is
        refused, naming the safe one. Forced past the refusal (test
        fault RAFTSQL_TEST_UNSAFE_FOUNDERS), node 1 holds the file's
        content at index 2 of term 1 while the others' leader has
        another entry 2: node 1 refuses its entries and is marked
        diverged, saying so (before the fix it took their entries on top
        of its own content, a silent split); raft_repair() then gives the
        three equal content, the leader's."""
        ports = free_ports(3)
        members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                           for i, p in enumerate(ports))
        nodes = {}

        def spawn(i, db, extra="", env=None):
            path = os.path.join(self.dir, db)
            n = Node(NODE, i, path, path + ".log", env=env)
            nodes[db] = n
            n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s %s" % (
                i, members, FAST, extra))
            return n

        try:
            two = spawn(2, "u2.db")
            spawn(3, "u3.db")
            leader = wait_for("2 and 3 elect a leader", lambda: two.value(
                "SELECT raft_leader()"))
            self.assertIn(leader, (2, 3))
            with self.assertRaises(NodeError) as cm:
                spawn(1, "u1.db", "bootstrap_from=%s" % self.source)
            err = str(cm.exception)
            self.assertIn("bootstrap_from: cluster= names 3 servers: the "
                          "others, started with the same cluster= and "
                          "empty databases, could elect a leader without "
                          "this node", err)
            self.assertIn("found it alone (id=1 cluster=1@127.0.0.1:%d "
                          "bootstrap_from=...), then start each other "
                          "node with join=127.0.0.1:%d" % (
                              ports[0], ports[0]), err)

            one = spawn(1, "u1b.db", "bootstrap_from=%s repair=manual" %
                        self.source,
                        env={"RAFTSQL_TEST_UNSAFE_FOUNDERS": "1"})
            div = wait_for("node 1 diverged", lambda: (
                one.status()["diverged"]), 20)
            self.assertIn("contradicts this replica's committed history: "
                          "its entry 2 has term ", div["reason"])
            self.assertIn("this node's snapshot at 2 has term 1", div["reason"])
            self.assertEqual(one.status()["applied"], 2)
            self.assertEqual(fingerprint(one.db), self.expected)
            self.assertIn("repaired from a snapshot at index",
                          one.value("SELECT raft_repair()"))
            # AppendEntries dropped between the database's install and
            # the driver's may mark it once more; the next repair (from
            # the same leader) ends it.
            def healthy():
                if one.status()["diverged"] is not None:
                    try:
                        one.value("SELECT raft_repair()")
                    except NodeError:
                        pass  # under way: look again
                return one.status()["diverged"] is None
            wait_for("node 1 healthy", healthy, 30)
            target = two.status()["applied"]
            wait_for("node 1 applied %d" % target, lambda: (
                one.status()["applied"] >= target), 20)
            want = fingerprint(two.db)
            self.assertNotEqual(want, self.expected)
            for db in ("u1b.db", "u3.db"):
                self.assertEqual(fingerprint(nodes[db].db), want, db)
        finally:
            codes = {db: n.stop() for db, n in nodes.items()}
        self.assertEqual(set(codes.values()), {0}, codes)

    def test_refusals(self):
        """bootstrap_from= is refused, naming the file and the cause, into
        a database holding tables, from a missing file, a file that is no
        database, and a running node's database; on a restart (the node
        has a log) it is ignored with a WARN line, the file unread."""
        members = "1@127.0.0.1:%d" % free_ports(1)[0]

        def start(db, source):
            n = Node(NODE, 1, os.path.join(self.dir, db),
                     os.path.join(self.dir, db + ".log"))
            try:
                with self.assertRaises(NodeError) as cm:
                    n.sql("SELECT raft_start(?)",
                          "id=1 cluster=%s bootstrap_from=%s %s" % (
                              members, source, FAST))
                self.code = cm.exception.code
                return str(cm.exception)
            finally:
                self.assertEqual(n.stop(), 0)

        err = start("r1.db", os.path.join(self.dir, "missing.db"))
        self.assertIn("missing.db: No such file or directory", err)
        self.assertEqual(self.code, CODES["RAFTSQL_INVALID"])
        junk = os.path.join(self.dir, "junk.db")
        with open(junk, "wb") as f:
            f.write(b"this is no database" * 100)
        err = start("r2.db", junk)
        self.assertIn("junk.db: file is not a database", err)
        self.assertEqual(self.code, CODES["RAFTSQL_INVALID"])
        err = start("r4.db", "/dev/null")
        self.assertIn("/dev/null is not a regular file", err)
        self.assertEqual(self.code, CODES["RAFTSQL_INVALID"])
        full = os.path.join(self.dir, "full.db")
        con = sqlite3.connect(full)
        con.execute("CREATE TABLE mine(x)")
        con.close()
        err = start("full.db", self.source)
        self.assertIn("full.db", err)
        self.assertIn("is not a raftsql replica", err)
        self.assertIn("bootstrap_from=<this file>", err)
        err = start("r3.db", self.a.nodes[0].db)
        self.assertIn("is the database of a running node", err)
        # A restart: the log exists.
        one = self.a.nodes[2]
        self.assertEqual(one.stop(), 0)
        n = Node(NODE, 3, one.db, one.log_path)
        self.a.nodes[2] = n
        n.sql("SELECT raft_start(?)", "id=3 cluster=%s %s "
              "bootstrap_from=%s" % (self.a.members, FAST, self.source))
        with open(n.log_path, errors="replace") as f:
            self.assertIn("WARN: bootstrap_from=%s ignored: this node has a "
                          "log in" % self.source, f.read())
        self.a.settle()
        # Nothing was left behind by the refused starts.
        for db in ("r1.db", "r2.db"):
            self.assertFalse(os.path.exists(
                os.path.join(self.dir, db + "-raft")), db)


if __name__ == "__main__":
    unittest.main()
