"""docs/deploy.md followed on namespaced hosts: raftsql-node daemons (the
sanitizer build: RAFTSQL_DAEMON), one per network namespace (netns.py)
named db1, db2, ... in each host's /etc/hosts, configured by the guide's
files (section 4: cluster=, listen=0.0.0.0:7001, a certificate naming the
host; section 10: join= and advertise= for an added machine), each start
preceded by the unit's `--check`. The guide's steps: found three, add a
fourth, remove one, then restart every daemon in turn with its file
unchanged (SIGTERM, and kill -9 of the leader): each comes back and
serves, and the replicas agree (the same rows, raft_verify() equal).
Writes and reads go through each daemon's Unix socket, from this process
(no raft_start).

Skips, saying why, without root or ip(8).
"""

import json
import os
import subprocess
import unittest

from e2e import DAEMON, wait_for  # first: puts tools/ on the path
import certs  # noqa: E402
from netns import close_hosts, open_hosts  # noqa: E402
from test_daemon import Daemon, read_rows  # noqa: E402
from test_founding import (call, restart_daemon, settled,  # noqa: E402
                           wait_voters, write_through)

PORT = 7001
FOUNDERS = "1@db1:7001,2@db2:7001,3@db3:7001"


class HostDaemon(Daemon):
    """A raftsql-node of host @host of @net, its files in a directory of
    its own (its machine)."""

    def __init__(self, net, host, workdir, lines):
        self.prefix = net.prefix(host)
        os.makedirs(workdir, exist_ok=True)
        super().__init__(workdir, host, lines)

    def launch(self):
        # The unit's ExecStartPre: a file --check refuses is never
        # started.
        p = subprocess.run([DAEMON, "--config", self.conf, "--check"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError("--check of %s: %d %s" % (
                self.conf, p.returncode, p.stderr))
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(
                self.prefix + [DAEMON, "--config", self.conf],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)


class DeployGuideTest(unittest.TestCase):

    def setUp(self):
        self.dir, self.net = open_hosts(self, 4, "raftsql-e2e-deploy-")
        self.ca = certs.CA(self.dir)
        self.daemons = {}
        self.names = {"db%d" % i: i for i in (1, 2, 3)}
        self.net.hosts(self.names)

    def tearDown(self):
        codes = {i: d.stop() for i, d in self.daemons.items()}
        bad = {i: c for i, c in codes.items() if c != 0}
        for i in bad:
            print("--- daemon %d\n%s" % (i, self.daemons[i].log()[-4000:]))
        close_hosts(self.net, self.dir)
        self.assertEqual(bad, {}, "a daemon exited with an error "
                         "(sanitizer report in its log)")

    def tls(self, i):
        """The guide's tls_ lines of machine @i (step 3a: DNS:dbN and
        its IP)."""
        cert, key = self.ca.issue("db%d" % i, ["db%d" % i, self.net.ip(i)])
        return ["tls_cert = %s" % cert, "tls_key = %s" % key,
                "tls_ca = %s" % self.ca.cert]

    def machine(self, i, lines):
        d = HostDaemon(self.net, i, os.path.join(self.dir, "db%d" % i),
                       ["id = %d" % i] + lines + self.tls(i))
        self.daemons[i] = d
        return d

    def test_found_add_remove_restart_every_daemon(self):
        """The guide's sections 4, 10 and 7 in order; each founder's
        file keeps cluster= naming the first three (one WARN line at its
        restarts), db4's keeps join=. A founder restarted after the
        change exited 1 ("the stored one wins; drop cluster=")."""
        # Section 4: three machines, the same cluster= on each.
        for i in (1, 2, 3):
            self.machine(i, ["cluster = %s" % FOUNDERS,
                             "listen = 0.0.0.0:%d" % PORT])
        write_through(self, self.daemons[1], "CREATE TABLE t(v TEXT)")
        for d in self.daemons.values():
            write_through(self, d, "INSERT INTO t VALUES (?)",
                          "founded %d" % d.id)
        self.assertEqual(call(self.daemons[2].db,
                              "SELECT json_extract(raft_status(), '$.tls')"),
                         "certificates")
        confs = {}

        # Section 10, "Add a machine": db4 in every /etc/hosts, join=.
        self.names["db4"] = 4
        self.net.hosts(self.names)
        d4 = self.machine(4, ["join = db1:%d" % PORT,
                              "listen = 0.0.0.0:%d" % PORT,
                              "advertise = db4:%d" % PORT])
        wait_voters(self.daemons[1], (1, 2, 3, 4))
        write_through(self, d4, "INSERT INTO t VALUES ('added 4')")

        # "Remove a machine": raft_remove on any member, then the daemon
        # stopped and disabled there.
        settled(self.daemons[3].db, "SELECT raft_remove(2)")
        self.assertEqual(self.daemons.pop(2).stop(), 0)
        wait_voters(self.daemons[1], (1, 3, 4))
        for i, d in self.daemons.items():
            with open(d.conf) as f:
                confs[i] = f.read()

        # Section 7: every daemon restarted in turn, its file unchanged;
        # then kill -9 of the leader.
        for i in sorted(self.daemons):
            restart_daemon(self, self.daemons[i])
        lead = settled(self.daemons[1].db, "SELECT raft_leader()")
        restart_daemon(self, self.daemons[lead], kill=True)
        for i, d in self.daemons.items():
            with open(d.conf) as f:
                self.assertEqual(f.read(), confs[i])
            if i != 4:
                self.assertIn("WARN: cluster= ignored: it says %s;" % FOUNDERS,
                              d.log())

        # The replicas agree.
        wait_voters(self.daemons[4], (1, 3, 4))
        write_through(self, self.daemons[4], "INSERT INTO t VALUES ('end')")
        want = read_rows(self.daemons[4].db, "SELECT v FROM t ORDER BY v")
        self.assertEqual(len(want), 3 + 1 + 3 + 1 + 1, want)
        for d in self.daemons.values():
            wait_for("daemon %d holds every row" % d.id,
                     lambda d=d: read_rows(d.db, "SELECT v FROM t ORDER BY v")
                     == want, 30)
            verify = json.loads(call(d.db, "SELECT raft_verify()"))
            self.assertTrue(verify["equal"], verify)


if __name__ == "__main__":
    unittest.main()
