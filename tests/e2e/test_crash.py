"""End-to-end crash safety: kill -9 under load, compaction, snapshots.

Real node processes on 127.0.0.1 (RAFTSQL_TESTHOST, the sanitizer build under
`make test`). The crash loop's length comes from the environment: `make
test` runs the short variant, `make soak` the long one (SOAK_KILLS,
SOAK_WRITES).
"""

import os
import random
import shutil
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import fingerprint  # noqa: E402
from raftsql_cluster import Cluster, NodeError  # noqa: E402

NODE = os.environ.get("RAFTSQL_TESTHOST",
                      os.path.join(ROOT, "build", "raftsql-testhost"))
KILLS = int(os.environ.get("SOAK_KILLS", "20"))
CATCHUP_WRITES = int(os.environ.get("SOAK_WRITES", "1500"))
SEED = int(os.environ.get("CRASH_SEED", str(int(time.time()))))
TIMING = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000 "
          "snapshot_threshold=200 trailing_entries=50")


class CrashTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-crash-")
        self.rng = random.Random(SEED)
        self.lock = threading.Lock()
        self.cluster = None
        sys.stderr.write("(CRASH_SEED=%d) " % SEED)

    def tearDown(self):
        codes = []
        if self.cluster is not None:
            for n in self.cluster.nodes:
                if n.proc.poll() is None:
                    codes.append(n.stop())
                else:
                    n.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        # A sanitizer report makes a node exit non-zero.
        self.assertEqual([c for c in codes if c != 0], [])

    def node(self, i):
        with self.lock:
            return self.cluster.nodes[i - 1]

    def restart(self, i):
        fresh = self.cluster.spawn(i)
        with self.lock:
            self.cluster.nodes[i - 1] = fresh

    def converge(self, timeout=60):
        """Wait until every node applied the leader's commit index."""
        leader = self.cluster.wait_leader(timeout)
        # A no-op write makes the current term's entries commit.
        deadline = time.monotonic() + timeout
        while True:
            try:
                leader.value("SELECT raft_exec('SELECT 1')")
                break
            except NodeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                leader = self.cluster.wait_leader(timeout)
        target = leader.status()["commit"]
        self.cluster.wait_applied(target, timeout=timeout)

    def fingerprints(self):
        return [fingerprint.render(fingerprint.fingerprint(n.db))
                for n in self.cluster.nodes]

    def test_kill_nodes_under_load(self):
        """kill -9 a random node (leader included) at random moments while
        a client writes; every acknowledged write survives, replicas end
        identical, and nothing is applied twice."""
        self.cluster = Cluster(NODE, self.dir, 3, TIMING)
        self.cluster.wait_leader()
        self.cluster.nodes[0].value(
            "SELECT raft_exec('CREATE TABLE ack(id INTEGER PRIMARY KEY, "
            "n INTEGER)')")
        acked, unknown = set(), set()
        stop = threading.Event()
        errors = []

        def writer():
            i = 0
            while not stop.is_set():
                i += 1
                n = self.node(1 + i % 3)
                try:
                    n.value("SELECT raft_exec('INSERT INTO ack VALUES(?, "
                            "?)', ?, ?)", i, i)
                    acked.add(i)
                except NodeError as e:
                    msg = str(e)
                    if "not applied" in msg:
                        continue
                    if "UNIQUE" in msg:
                        errors.append("applied twice: %d" % i)
                    unknown.add(i)
                except (OSError, ValueError):
                    unknown.add(i)  # the node died under the request
                    time.sleep(0.01)

        t = threading.Thread(target=writer)
        t.start()
        try:
            for k in range(KILLS):
                time.sleep(self.rng.uniform(0.1, 0.6))
                victim = self.rng.randint(1, 3)
                self.node(victim).kill()
                time.sleep(self.rng.uniform(0.0, 0.3))
                self.restart(victim)
        finally:
            stop.set()
            t.join()
        self.assertEqual(errors, [])
        self.converge()
        rows = {r[0] for r in self.cluster.nodes[0].sql(
            "SELECT id FROM ack WHERE id = n")}
        total = self.cluster.nodes[0].value("SELECT count(*) FROM ack")
        self.assertEqual(total, len(rows))
        lost = acked - rows
        self.assertEqual(lost, set(), "acknowledged writes lost "
                         "(seed %d)" % SEED)
        self.assertLessEqual(rows, acked | unknown)
        self.assertGreater(len(acked), KILLS)
        fps = self.fingerprints()
        self.assertEqual(fps[0], fps[1])
        self.assertEqual(fps[0], fps[2])

    def test_follower_catches_up_through_snapshot(self):
        """A follower stopped while writes and compactions happen catches
        up through a snapshot when it restarts."""
        self.cluster = Cluster(NODE, self.dir, 3, TIMING)
        leader = self.cluster.wait_leader()
        follower = next(n for n in self.cluster.nodes
                        if n.id != leader.id)
        leader.value("SELECT raft_exec('CREATE TABLE w(id INTEGER PRIMARY "
                     "KEY, v BLOB)')")
        self.cluster.wait_applied(leader.status()["applied"], [follower])
        self.assertEqual(follower.stop(), 0)
        for i in range(CATCHUP_WRITES):
            leader.value("SELECT raft_exec('INSERT INTO w VALUES(?, "
                         "randomblob(64))', ?)", i)
        st = leader.status()
        self.assertGreater(st["compactions"], 1, st)
        self.assertGreater(st["first_index"], 1, st)
        fresh = self.cluster.spawn(follower.id)
        self.cluster.nodes[follower.id - 1] = fresh
        self.converge()
        self.assertGreaterEqual(fresh.status()["snapshots_installed"], 1)
        self.assertEqual(fresh.value("SELECT count(*) FROM w"),
                         CATCHUP_WRITES)
        fps = self.fingerprints()
        self.assertEqual(fps[0], fps[1])
        self.assertEqual(fps[0], fps[2])

    def test_kill_during_snapshot_transfer(self):
        """Killing the receiving follower, then the sending leader, in the
        middle of a snapshot transfer: all recover and converge."""
        self.cluster = Cluster(NODE, self.dir, 3, TIMING +
                               " snapshot_chunk_bytes=4096")
        leader = self.cluster.wait_leader()
        follower = next(n for n in self.cluster.nodes
                        if n.id != leader.id)
        leader.value("SELECT raft_exec('CREATE TABLE b(id INTEGER PRIMARY "
                     "KEY, v BLOB)')")
        self.cluster.wait_applied(leader.status()["applied"], [follower])
        follower.stop()
        # A database of a few MB, so the transfer takes many chunks.
        for i in range(400):
            leader.value("SELECT raft_exec('INSERT INTO b VALUES(?, "
                         "randomblob(8000))', ?)", i)
        for victim_is_leader in (False, True):
            # Restart the follower; once bytes of the snapshot arrive,
            # kill the receiving follower (first round) or the sending
            # leader (second round).
            fresh = self.cluster.spawn(follower.id)
            self.cluster.nodes[follower.id - 1] = fresh
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                st = fresh.status()
                t = st["snapshot_transfer"]
                if (t is not None and t["bytes"] > 0) or \
                        st["snapshots_installed"] > 0:
                    break
                time.sleep(0.002)
            if victim_is_leader:
                lid = leader.id
                leader.kill()
                self.cluster.nodes[lid - 1] = self.cluster.spawn(lid)
            else:
                fresh.kill()
        self.converge()
        self.assertEqual(fresh.value("SELECT count(*) FROM b"), 400)
        fps = self.fingerprints()
        self.assertEqual(fps[0], fps[1])
        self.assertEqual(fps[0], fps[2])

    def test_wiped_follower_rejoins(self):
        """A follower whose database and log were deleted is rebuilt by
        the leader (through a snapshot once the log was compacted)."""
        self.cluster = Cluster(NODE, self.dir, 3, TIMING)
        leader = self.cluster.wait_leader()
        follower = next(n for n in self.cluster.nodes
                        if n.id != leader.id)
        leader.value("SELECT raft_exec('CREATE TABLE z(id INTEGER PRIMARY "
                     "KEY)')")
        for i in range(300):
            leader.value("SELECT raft_exec('INSERT INTO z VALUES(?)', ?)", i)
        self.cluster.wait_applied(leader.status()["applied"], [follower])
        follower.kill()
        shutil.rmtree(follower.db + "-raft")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(follower.db + suffix):
                os.remove(follower.db + suffix)
        fresh = self.cluster.spawn(follower.id)
        self.cluster.nodes[follower.id - 1] = fresh
        self.converge()
        self.assertEqual(fresh.value("SELECT count(*) FROM z"), 300)
        fps = self.fingerprints()
        self.assertEqual(fps[0], fps[1])
        self.assertEqual(fps[0], fps[2])

    def test_corrupt_log_entry_is_repaired(self):
        """A follower whose log holds an entry with a flipped byte refuses
        to use it, says which index, repairs itself and converges."""
        self.cluster = Cluster(NODE, self.dir, 3, TIMING)
        leader = self.cluster.wait_leader()
        follower = next(n for n in self.cluster.nodes
                        if n.id != leader.id)
        leader.value("SELECT raft_exec('CREATE TABLE c(id INTEGER PRIMARY "
                     "KEY, v BLOB)')")
        marker = b"raftsql-corrupt-me-" * 8
        leader.value("SELECT raft_exec('INSERT INTO c VALUES(1, ?)', ?)",
                     {"blob": marker.hex()})
        for i in range(2, 20):
            leader.value("SELECT raft_exec('INSERT INTO c VALUES(?, 0)', ?)",
                         i)
        self.cluster.wait_applied(leader.status()["applied"], [follower])
        self.assertEqual(follower.stop(), 0)
        path = follower.db + "-raft/data.mdb"
        with open(path, "r+b") as f:
            data = f.read()
            # LMDB copies pages on write: flip the byte in every copy.
            at = data.find(marker)
            self.assertGreater(at, 0, "marker not found in the log file")
            while at >= 0:
                f.seek(at + 5)
                f.write(bytes([data[at + 5] ^ 0xFF]))
                at = data.find(marker, at + 1)
        fresh = self.cluster.spawn(follower.id)
        self.cluster.nodes[follower.id - 1] = fresh
        leader.value("SELECT raft_exec('INSERT INTO c VALUES(100, 0)')")
        self.converge()
        with open(fresh.log_path) as f:
            self.assertIn("is corrupt (checksum mismatch)", f.read())
        self.assertEqual(fresh.value("SELECT count(*) FROM c"), 20)
        fps = self.fingerprints()
        self.assertEqual(fps[0], fps[1])
        self.assertEqual(fps[0], fps[2])


if __name__ == "__main__":
    unittest.main()
