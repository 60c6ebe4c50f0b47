"""The Debian packages, installed on this machine (`make deb-test`).

Installs the three packages built in RAFTSQL_DEB_DIR with apt-get, checks
what they put in place (the extension on the dynamic linker's path, the
daemon, the template unit, the man pages, the system user and its state
directory, the -dev package's header, library and .pc), runs the README's
three-node session against the installed files only, and purges them:

- nodes 1 and 2 are the stock sqlite3 shell in a directory outside the
  tree, loading the extension by name (`.load raftsql`);
- node 3 is the installed daemon, run with the command lines of the
  installed raftsql-node@.service (ExecStartPre, ExecStart, for instance
  deb-test-<pid>) as its User= (setpriv), configured in
  /etc/raftsql/<instance>.conf, its metrics read over HTTP;
- a fourth shell writes through the daemon's node on its database file.

The packages are installed system-wide, so one run at a time (a lock in
/run/lock), and never over an install that was there before (the test
skips, saying so).
"""

import fcntl
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from e2e import free_ports, wait_for  # noqa: E402

DEB_DIR = os.environ.get("RAFTSQL_DEB_DIR",
                         os.path.join(ROOT, "build", "deb"))
PACKAGES = ("libsqlite3-mod-raftsql", "libraftsql-dev", "raftsql-node")
UNIT = "/lib/systemd/system/raftsql-node@.service"
LOCK = "/run/lock/raftsql-deb-test.lock"
APT = ["apt-get", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300"]
TIMEOUT = 30.0


def run(argv, timeout=300, **kw):
    """Run @argv, capturing its output; return the CompletedProcess."""
    return subprocess.run(argv, capture_output=True, text=True,
                          timeout=timeout, **kw)


def installed(package):
    """Whether dpkg lists @package as installed (or half so)."""
    out = run(["dpkg-query", "-W", "-f=${Status}", package])
    return out.returncode == 0 and "not-installed" not in out.stdout


def multiarch():
    """This machine's multiarch triplet, e.g. x86_64-linux-gnu."""
    return run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()


class Shell:
    """The stock sqlite3 shell on one database file, kept running as a
    terminal of the README's session: lines go to its stdin, its stdout
    is line-buffered (stdbuf) and read up to a marker line that follows
    each input, its stderr goes to a file."""

    def __init__(self, db, cwd, name):
        self.name = name
        self.err_path = os.path.join(cwd, name + ".stderr")
        self.err = open(self.err_path, "w")
        self.err_seen = 0
        self.n_runs = 0
        self.buf = b""
        env = dict(os.environ)
        env.pop("LD_LIBRARY_PATH", None)
        env.pop("LD_PRELOAD", None)
        self.proc = subprocess.Popen(
            ["stdbuf", "-oL", "sqlite3", "-batch", "-init", "/dev/null", db],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.err)

    def stderr(self):
        """What the shell wrote to stderr since the last call."""
        with open(self.err_path) as f:
            f.seek(self.err_seen)
            text = f.read()
        self.err_seen += len(text.encode())
        return text

    def run(self, sql, timeout=TIMEOUT):
        """Send @sql (lines of SQL or dot-commands) and return the lines
        it printed, and what it wrote to stderr meanwhile (a SQL error,
        the node's log lines)."""
        self.n_runs += 1
        marker = ("@@end-%d@@" % self.n_runs).encode()
        self.proc.stdin.write(sql.encode() + b"\n.print " + marker + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while marker + b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    "%s: no answer to %r within %.0f s; it printed %r; "
                    "stderr: %r" % (self.name, sql, timeout, self.buf,
                                    self.stderr()))
            os.set_blocking(fd, False)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            if not chunk:
                raise AssertionError(
                    "%s exited (status %r) on %r; it printed %r; stderr: %r"
                    % (self.name, self.proc.poll(), sql, self.buf,
                       self.stderr()))
            self.buf += chunk
        out, self.buf = self.buf.split(marker + b"\n", 1)
        return out.decode().splitlines(), self.stderr()

    def ok(self, sql, timeout=TIMEOUT):
        """run(@sql), which must write no error: return its lines."""
        lines, err = self.run(sql, timeout)
        if re.search(r"^(Error|Runtime error|Parse error)", err, re.M):
            raise AssertionError("%s: %r failed: %s (printed %r)"
                                 % (self.name, sql, err, lines))
        return lines

    def close(self):
        """End the shell (its stdin closed, else killed after 20 s);
        return its exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.err.close()
        return self.proc.returncode


class DebTest(unittest.TestCase):
    """Install, use and purge the packages of RAFTSQL_DEB_DIR."""

    @classmethod
    def setUpClass(cls):
        cls.lock = None
        cls.did_install = False
        if os.geteuid() != 0:
            raise unittest.SkipTest("deb-test: skipped: installing the "
                                    "packages needs root")
        for tool in ("apt-get", "dpkg-query", "stdbuf", "sqlite3",
                     "setpriv", "pkg-config", "cc"):
            if shutil.which(tool) is None:
                raise unittest.SkipTest("deb-test: skipped: %s is missing"
                                        % tool)
        ver = run(["dpkg-parsechangelog", "-S", "Version",
                   "-l", os.path.join(ROOT, "debian", "changelog")])
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        cls.debs = [os.path.join(DEB_DIR, "%s_%s_%s.deb"
                                 % (p, ver.stdout.strip(), arch))
                    for p in PACKAGES]
        missing = [d for d in cls.debs if not os.path.isfile(d)]
        if missing:
            raise AssertionError("no such packages (make deb-test builds "
                                 "them): %s" % missing)
        os.makedirs(os.path.dirname(LOCK), exist_ok=True)
        cls.lock = open(LOCK, "w")
        wait_for("the lock %s (another deb-test running)" % LOCK,
                 cls.try_lock, timeout=300)
        there = [p for p in PACKAGES if installed(p)]
        if there:
            cls.unlock()
            raise unittest.SkipTest(
                "deb-test: skipped: %s installed on this machine already; "
                "the test installs and purges the packages, so it leaves "
                "that install alone (apt-get purge %s to run it)"
                % (", ".join(there), " ".join(there)))
        cls.did_install = True
        out = run(APT + ["install", "--no-install-recommends"] +
                  [os.path.abspath(d) for d in cls.debs])
        if out.returncode != 0:
            cls.purge()
            raise AssertionError("apt-get install failed: %s%s"
                                 % (out.stdout, out.stderr))
        cls.triplet = multiarch()
        cls.dir = tempfile.mkdtemp(prefix="raftsql-deb-test-")

    @classmethod
    def try_lock(cls):
        try:
            fcntl.flock(cls.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    @classmethod
    def unlock(cls):
        if cls.lock is not None:
            cls.lock.close()
            cls.lock = None

    @classmethod
    def purge(cls):
        """Purge the packages; raise AssertionError when apt-get fails or
        leaves any of their files, or the state directory, behind."""
        out = run(APT + ["purge"] + list(PACKAGES))
        left = [p for p in PACKAGES if installed(p)]
        if out.returncode != 0 or left:
            raise AssertionError("apt-get purge failed (%s still "
                                 "installed): %s%s"
                                 % (left, out.stdout, out.stderr))
        files = [f for f in (
            "/usr/lib/%s/raftsql.so" % multiarch(), "/usr/sbin/raftsql-node",
            UNIT, "/var/lib/raftsql", "/etc/raftsql",
            "/usr/include/raftsql.h") if os.path.lexists(f)]
        if files:
            raise AssertionError("purge left %s" % files)

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "dir", None):
                shutil.rmtree(cls.dir, ignore_errors=True)
            if cls.did_install:
                cls.purge()
        finally:
            cls.unlock()

    def test_files(self):
        """Each package put its files where Debian looks for them: the
        extension on the dynamic linker's search path, the daemon with
        its unit, man pages and example, a system user raftsql owning a
        0750 /var/lib/raftsql."""
        lists = {p: run(["dpkg", "-L", p]).stdout.split() for p in PACKAGES}
        lib = "/usr/lib/%s" % self.triplet
        self.assertIn(lib + "/raftsql.so", lists["libsqlite3-mod-raftsql"])
        self.assertIn("/usr/share/man/man7/raftsql.7.gz",
                      lists["libsqlite3-mod-raftsql"])
        for f in ("/usr/include/raftsql.h", lib + "/libraftsql.a",
                  lib + "/pkgconfig/raftsql.pc"):
            self.assertIn(f, lists["libraftsql-dev"])
        for f in ("/usr/sbin/raftsql-node", UNIT,
                  "/usr/share/man/man8/raftsql-node.8.gz",
                  "/usr/share/doc/raftsql-node/examples/node.conf"):
            self.assertIn(f, lists["raftsql-node"])
        user = pwd.getpwnam("raftsql")
        self.assertLess(user.pw_uid, 1000, "raftsql is no system user")
        self.assertEqual(user.pw_dir, "/var/lib/raftsql")
        st = os.stat("/var/lib/raftsql")
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777),
                         (user.pw_uid, user.pw_gid, 0o750))
        # The man pages are found by name and render without a warning.
        for page in ("raftsql-node", "raftsql"):
            self.assertEqual(run(["man", "-w", page]).returncode, 0, page)
            out = run(["man", "--warnings", "-E", "UTF-8", page],
                      env=dict(os.environ, MANWIDTH="80"))
            self.assertEqual((out.returncode, out.stderr), (0, ""), page)
        # The template unit passes systemd's own check for an instance.
        if shutil.which("systemd-analyze"):
            out = run(["systemd-analyze", "verify",
                       "raftsql-node@deb-test.service"])
            self.assertEqual((out.returncode, out.stderr), (0, ""))

    def test_dev_package(self):
        """examples/embedded.c, outside the tree, builds against the
        installed -dev package with pkg-config only, and runs a one-node
        cluster."""
        d = tempfile.mkdtemp(dir=self.dir)
        shutil.copy(os.path.join(ROOT, "examples", "embedded.c"),
                    os.path.join(d, "app.c"))
        flags = run(["pkg-config", "--cflags", "--libs", "raftsql"])
        self.assertEqual(flags.returncode, 0, flags.stderr)
        self.assertIn("-lraftsql", flags.stdout.split())
        out = run(["cc", "app.c"] + flags.stdout.split() + ["-o", "app"],
                  cwd=d)
        self.assertEqual(out.returncode, 0, out.stderr)
        port = free_ports(1)[0]
        out = run(["./app", os.path.join(d, "app.db"), str(port)], cwd=d,
                  timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("ok", out.stdout.splitlines(), out.stdout)

    def unit_commands(self, instance):
        """The installed unit's User=, ExecStartPre= and ExecStart=, with
        %i replaced by @instance: (user, [argv, argv])."""
        with open(UNIT) as f:
            text = f.read()
        keys = dict(re.findall(r"^(User|ExecStartPre|ExecStart)=(.*)$",
                               text, re.M))
        self.assertEqual(set(keys), {"User", "ExecStartPre", "ExecStart"},
                         text)
        return keys["User"], [keys[k].replace("%i", instance).split()
                              for k in ("ExecStartPre", "ExecStart")]

    def test_three_node_session(self):
        """The README's session on the installed files: two sqlite3 shells
        load the extension by name and start nodes 1 and 2, the daemon
        runs node 3 as its unit would; raft_exec, plain writes on the
        leader's and a follower's terminal, a fourth shell writing through
        the daemon's node, and every replica equal at the end."""
        instance = "deb-test-%d" % os.getpid()
        conf = "/etc/raftsql/%s.conf" % instance
        db3 = "/var/lib/raftsql/%s.db" % instance
        p = free_ports(4)
        cluster = ",".join("%d@127.0.0.1:%d" % (i + 1, p[i])
                           for i in range(3))
        with open(conf, "w") as f:
            f.write("database = %s\nid = 3\ncluster = %s\n"
                    "metrics_listen = 127.0.0.1:%d\n" % (db3, cluster, p[3]))
        self.addCleanup(os.remove, conf)
        user, (check, start) = self.unit_commands(instance)
        as_user = ["setpriv", "--reuid", user, "--regid", user,
                   "--init-groups", "--"]
        out = run(as_user + check)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        log_path = os.path.join(self.dir, "daemon.log")
        log = open(log_path, "w")
        self.addCleanup(log.close)
        daemon = subprocess.Popen(as_user + start,
                                  stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT)

        def stop_daemon():
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        self.addCleanup(stop_daemon)

        # The daemon runs as the unit's user, and its files are that
        # user's.
        uid = pwd.getpwnam(user).pw_uid
        wait_for("the daemon's pointer file %s-raftsql" % db3,
                 lambda: os.path.exists(db3 + "-raftsql"))
        self.assertEqual(os.stat("/proc/%d" % daemon.pid).st_uid, uid)
        self.assertEqual(os.stat(db3).st_uid, uid)

        shells = {}
        for i in (1, 2):
            shells[i] = Shell(os.path.join(self.dir, "node%d.db" % i),
                              self.dir, "node%d" % i)
            self.addCleanup(shells[i].close)
            shells[i].ok(".load raftsql")
            lines = shells[i].ok(
                "SELECT raft_start('id=%d cluster=%s');" % (i, cluster))
            self.assertEqual(lines, [
                "node %d started, listening on 127.0.0.1:%d, log in %s"
                % (i, p[i - 1],
                   os.path.join(self.dir, "node%d.db-raft" % i))])
        # The extension came from the package, loaded by name.
        with open("/proc/%d/maps" % shells[1].proc.pid) as f:
            maps = f.read()
        self.assertIn("/usr/lib/%s/raftsql.so" % self.triplet, maps)

        def leader():
            lines = shells[1].ok("SELECT raft_leader();")
            return int(lines[0]) if lines and lines[0] else None
        leader_id = wait_for("a leader", leader)
        shells[4] = Shell(db3, self.dir, "terminal4")
        self.addCleanup(shells[4].close)
        shells[4].ok(".load raftsql\n.timeout 5000")
        self.assertEqual(shells[4].ok(
            "SELECT json_extract(raft_status(), '$.id');"), ["3"])

        t1 = shells[1]
        self.assertEqual(t1.ok("SELECT raft_exec('CREATE TABLE kv(k TEXT "
                               "PRIMARY KEY, v)');"), ["0"])
        self.assertEqual(t1.ok("SELECT raft_exec('INSERT INTO kv VALUES(?, "
                               "?)', 'greeting', 'hello');"), ["1"])
        # Plain SQL on the leader's terminal (the fourth shell when the
        # daemon's node leads).
        lt = shells[4 if leader_id == 3 else leader_id]
        self.assertEqual(lt.ok(
            ".timeout 5000\nINSERT INTO kv VALUES('plain', 'sql');\n"
            "BEGIN;\nUPDATE kv SET v = upper(v) WHERE k = 'plain';\n"
            "COMMIT;"), [])
        # A follower's terminal reads the replica and writes to it.
        fid = 2 if leader_id == 1 else 1
        ft = shells[fid]
        ft.ok(".timeout 5000")
        wait_for("the rows on follower %d" % fid, lambda: ft.ok(
            "SELECT * FROM kv;") == ["greeting|hello", "plain|SQL"])
        self.assertEqual(ft.ok("INSERT INTO kv VALUES('x', 1);"), [])
        # (The leadership may have moved since: the role must agree with
        # the leader the status names.)
        status = json.loads(ft.ok("SELECT raft_status();")[0])
        self.assertEqual(status["id"], fid, status)
        self.assertIn(status["leader"], (1, 2, 3), status)
        self.assertEqual(status["role"], "leader" if status["leader"] == fid
                         else "follower", status)
        # The fourth terminal writes through the daemon's node.
        t4 = shells[4]
        self.assertEqual(t4.ok(
            "INSERT INTO kv VALUES('y', 1);\n"
            "SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', 'from', "
            "'terminal 4');\n"
            "SELECT * FROM kv WHERE k IN ('y', 'from');"),
            ["1", "from|terminal 4", "y|1"])
        want = ["from|terminal 4", "greeting|hello", "plain|SQL", "x|1",
                "y|1"]
        for i in (1, 2, 4):
            lines = shells[i].ok("SELECT raft_barrier() > 0;\n"
                                 "SELECT * FROM kv ORDER BY k;")
            self.assertEqual(lines, ["1"] + want, "shell %d" % i)

        # The daemon serves its metrics (libmicrohttpd) on loopback.
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % p[3],
                                    timeout=TIMEOUT) as r:
            metrics = r.read().decode()
        self.assertIn("raftsql_node_id 3", metrics.splitlines(), metrics)

        # The daemon's graceful stop: exit 0, saying so.
        daemon.send_signal(signal.SIGTERM)
        try:
            rc = daemon.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        with open(log_path) as f:
            logged = f.read()
        self.assertEqual(rc, 0, logged)
        self.assertIn("node 3 started", logged)
        self.assertEqual(logged.splitlines()[-1],
                         "raftsql-node: stopped; exiting 0")
        for i in (1, 2):
            self.assertEqual(shells[i].ok("SELECT raft_stop();"),
                             ["stopped"])


if __name__ == "__main__":
    unittest.main()
