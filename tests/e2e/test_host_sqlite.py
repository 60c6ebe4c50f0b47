"""End-to-end: raftsql beside its host's SQLite.

The loadable extension links no libsqlite3 and calls SQLite only through
the API table of the host that loads it, so a host with its own SQLite (a
static build, another distribution's) holds one SQLite, never two on one
file. tests/host/static_host.c is such a host: SQLite linked statically,
its symbols not exported; it loads build/raftsql.so, runs a one-node
cluster, writes with raft_exec and reads back, and fails if a second
libsqlite3 appeared in the process (which the .so linking libsqlite3 did).
"""

import os
import shutil
import subprocess
import tempfile
import unittest

from e2e import ROOT, SO  # noqa: E402
from raftsql_cluster import free_ports  # noqa: E402

HOST = os.environ.get("RAFTSQL_STATIC_HOST", os.path.join(
    os.path.dirname(os.path.abspath(SO)), "tests", "host", "static-host"))


class HostSqliteTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-host-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_so_needs_no_libsqlite3(self):
        out = subprocess.run(
            [os.path.join(ROOT, "scripts", "check-so.sh"), SO],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_host_with_its_own_sqlite(self):
        port = free_ports(1)[0]
        db = os.path.join(self.dir, "node1.db")
        out = subprocess.run([HOST, SO, db, str(port)], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("one copy, kv.k = 42", out.stdout)


if __name__ == "__main__":
    unittest.main()
