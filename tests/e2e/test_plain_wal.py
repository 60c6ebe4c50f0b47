"""End-to-end: the WAL stays bounded under plain SQL writes (issue #24).

SQLite restarts the WAL (writes it from its start again) only in a
writer whose snapshot found every frame backfilled. A plain writer waits
for its entry's application in the unlock of its write lock, still
reading the frame before its own commit, so the node's checkpoints, run
while it applies, always left that frame: before the fix the WAL grew by
two pages a plain write for as long as they came (50 MB after 6,000
writes here, 730 MB in five minutes in a trial; raft_exec's kept it at
16 MB). The writer's connection now backfills after its commit, once per
1,000 frames past 4,000 (ext/surface/plain_write.c, on_wal), and its next
write transaction restarts the WAL. The replicas stay equal, and no node
takes the restarts for a foreign write.
"""

import json
import os
import unittest

from e2e import ClusterCase, connect

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"

# Plain writes made, and the WAL size they must stay under: the backfill
# starts at 4,000 frames of 4 KiB, a restart follows within 1,000 more
# (two frames a write), so the file stays near 5,000 frames (20 MB); with
# no restart 6,000 writes make 12,000 frames (50 MB).
WRITES = 6000
WAL_MAX = 32 * 1024 * 1024


class PlainWalTest(ClusterCase):

    def setUp(self):
        self.start(EXTRA)
        self.leader.value("SELECT raft_exec('CREATE TABLE w(t INTEGER, "
                          "v BLOB)')")

    def write(self, node, first, n):
        """@n plain autocommit INSERTs from this process on @node's file;
        returns the WAL's size after each 1,000."""
        wal = node.db + "-wal"
        sizes = []
        con = connect(node.db)
        try:
            for i in range(first, first + n):
                con.execute("INSERT INTO w(t, v) VALUES(?, randomblob(100))",
                            (i,))
                if i % 1000 == 999:
                    sizes.append(os.path.getsize(wal))
        finally:
            con.close()
        return sizes

    def test_wal_restarts_under_plain_writes(self):
        sizes = self.write(self.leader, 0, WRITES)
        self.assertLess(sizes[-1], WAL_MAX,
                        "the leader's WAL grew for every plain write, bytes "
                        "after each 1,000 writes: %s" % sizes)
        follower = self.followers[0]
        sizes = self.write(follower, WRITES, WRITES)
        self.assertLess(sizes[-1], WAL_MAX,
                        "a follower's WAL grew for every plain write, bytes "
                        "after each 1,000 writes: %s" % sizes)
        # The follower's last write returned once applied there; the
        # leader's apply thread may come to it a moment later.
        self.cluster.wait_all_applied()
        self.assertEqual(
            self.leader.value("SELECT count(*) FROM w"), 2 * WRITES)
        self.assert_verified()
        for n in self.cluster.nodes:
            st = json.loads(n.value("SELECT raft_status()"))
            self.assertIsNone(st["diverged"], "node %d: %s" % (n.id, st))


if __name__ == "__main__":
    unittest.main()
