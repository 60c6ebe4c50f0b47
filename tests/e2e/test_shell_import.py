"""End-to-end: the sqlite3 shell's .import of a CSV file, from another
process, on a follower's file (issue #24 item 6). The shell only loads
raftsql (`.load build/raftsql`, `.timeout 5000`); its plain writes go
through that node's attach socket, and the follower's node asks the
leader for the write lease.

- `.import --csv` into a new table (the shell's CREATE TABLE from the
  header line, then its rows in one BEGIN ... COMMIT) and into an
  existing one (`--skip 1`), of a few hundred rows with quoted fields
  holding commas, quotes and newlines: every node ends with exactly the
  CSV's rows, raft_verify() equal on each, none diverged or repaired.
- An .import larger than max_request_bytes (65536 here) is refused at
  its COMMIT, the reason naming max_request_bytes on the shell's stderr
  (the shell itself ignores COMMIT's result), and nothing is written on
  any node: no row, no log entry.
"""

import csv
import os
import subprocess
import unittest

from attach_writers import SO_BASE
from e2e import ClusterCase

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"

ROWS = 300


def write_csv(path, rows, header=None):
    """Write @rows (lists) to CSV file @path, @header first."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if header is not None:
            w.writerow(header)
        w.writerows(rows)


def import_rows(n):
    """@n rows whose text fields hold commas, double quotes and
    newlines."""
    return [[str(i), "name, %d" % i, 'line one\nline "two" of %d' % i]
            for i in range(n)]


class ShellImportTest(ClusterCase):

    def shell(self, node, *commands):
        """The sqlite3 shell on @node's file, raftsql loaded, running
        @commands (dot-commands or SQL), one argument each."""
        return subprocess.run(
            ["sqlite3", "-cmd", ".load " + SO_BASE, "-cmd", ".timeout 5000",
             node.db, *commands],
            capture_output=True, text=True, timeout=120)

    def test_import_csv_on_a_follower(self):
        """.import --csv into a new table and into an existing one, on a
        follower's file from the shell: every node holds the CSV's rows."""
        self.start(EXTRA)
        follower = self.followers[0]
        rows = import_rows(ROWS)
        new_csv = os.path.join(self.dir, "new.csv")
        old_csv = os.path.join(self.dir, "old.csv")
        write_csv(new_csv, rows, header=["id", "name", "note"])
        write_csv(old_csv, rows[:ROWS // 2], header=["id", "name", "note"])
        p = self.shell(follower,
                       "CREATE TABLE old(id INTEGER PRIMARY KEY, name TEXT, "
                       "note TEXT)")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.shell(follower, ".import --csv %s new" % new_csv,
                       ".import --csv --skip 1 %s old" % old_csv,
                       "SELECT count(*) FROM new", "SELECT count(*) FROM old")
        self.assertEqual((p.returncode, p.stdout.split(), p.stderr),
                         (0, [str(ROWS), str(ROWS // 2)], ""))
        self.assertIsNone(self.leader.status()["lease"])
        self.rows_everywhere("SELECT id, name, note FROM new ORDER BY rowid",
                             rows)
        self.rows_everywhere("SELECT id, name, note FROM old ORDER BY id",
                             [[int(r[0])] + r[1:] for r in rows[:ROWS // 2]])
        self.assert_verified()

    def test_import_over_max_request_bytes_is_refused(self):
        """An .import whose transaction is over max_request_bytes is
        refused at COMMIT, saying so, and writes nothing anywhere."""
        self.start(EXTRA + " max_request_bytes=65536")
        follower = self.followers[0]
        self.exec(self.leader, "CREATE TABLE big(id INTEGER PRIMARY KEY, "
                  "v TEXT)")
        self.cluster.wait_all_applied()
        path = os.path.join(self.dir, "big.csv")
        write_csv(path, [[i, "x" * 200] for i in range(2000)])
        before = self.leader.status()["last_index"]
        p = self.shell(follower, ".import --csv %s big" % path,
                       "SELECT count(*) FROM big")
        self.assertEqual(p.stdout.split(), ["0"], p.stderr)
        self.assertIn("exceeds max_request_bytes (65536)", p.stderr)
        self.rows_everywhere("SELECT count(*) FROM big", [[0]])
        self.assertEqual(self.leader.status()["last_index"], before)
        self.assert_verified()


if __name__ == "__main__":
    unittest.main()
