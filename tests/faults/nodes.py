"""The cluster under test: raftsql-testhost processes (tools/raftsql_testhost.c,
driven as tools/raftsql_cluster.py drives them) behind the fault network,
with kill -9 and restart, SIGSTOP/SIGCONT, and log directories on small
tmpfs mounts that can be filled.

A node process answers one request at a time on its stdin, on its one
connection, so each node sits in a Slot with a lock: whoever talks to the
node holds it (a plain transaction holds it from BEGIN to COMMIT). Killing
and pausing do not take the lock (a request in flight then ends in EOF,
or waits for SIGCONT).

Each node may also have an attached writer (tests/faults/attached.py): a
process of its own that loaded raftsql on the node's file and writes
through the node's socket, one connection, with a lock of its own. It
outlives the node's kill -9 and restarts, as an application's process
does.
"""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

from net import Net  # noqa: E402


def last_lines(path, n=3):
    """The last n lines of the file at path, joined with " | "."""
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-n:])
    except OSError as e:
        return str(e)


class Timeout(NodeError):
    """The node did not answer a request in time (its pipe is now out of
    step: the node must be killed and restarted)."""

    def __init__(self, message):
        super().__init__(message, -2)


class JsonPipe:
    """The client side of a process that answers one request per line on
    its stdin ([sql, param...] as JSON) with one JSON line on its stdout
    ({"rows": ...} or {"error": ..., "code": N}): raftsql-testhost, or an
    attached writer. Needs .proc, .id, .log_path, ._log, .buf and
    .desync."""

    def sql(self, text, *params, timeout=60.0):
        """Run one statement; return its rows. Raises NodeError (code -1
        when the process is gone) or Timeout."""
        if self.desync:
            raise NodeError("%s: pipe out of step (not sent)" % self.name(),
                            -1)
        line = (json.dumps([text, *params]) + "\n").encode()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise NodeError("%s exited (not sent)" % self.name(), -1)
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.desync = True
                self.on_timeout(text)
                raise Timeout("%s did not answer within %.0f s: %s" %
                              (self.name(), timeout, text[:80]))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise NodeError("%s exited (see %s)" % (
                    self.name(), self.log_path), -1)
            self.buf += chunk
        reply, self.buf = self.buf.split(b"\n", 1)
        obj = json.loads(reply)
        if "error" in obj:
            raise NodeError(obj["error"], obj["code"])
        return obj["rows"]

    def name(self):
        return "node %d" % self.id

    def on_timeout(self, text):
        """Called when a request got no answer in time."""

    def close(self):
        """Close the pipes and the log (._log) of a process that has
        exited."""
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (BrokenPipeError, ValueError, OSError):
                pass
        self._log.close()


class FaultNode(JsonPipe, Node):
    """A node process whose requests time out (Node.sql waits forever);
    env adds variables to its environment."""

    def __init__(self, binary, node_id, db, log_path, env=None, prefix=None):
        super().__init__(binary, node_id, db, log_path, env=env,
                         prefix=prefix)
        self.buf = b""
        self.desync = False
        self.killed = False  # by us: any other exit is a death

    def on_timeout(self, text):
        """Write every thread's stack (gdb) to <log>-stacks.log beside the
        node's log (kept with it): where the node waits."""
        path = os.path.splitext(self.log_path)[0] + "-stacks.log"
        with open(path, "ab") as out:
            out.write(("no answer in time to %s; the threads of pid %d:\n"
                       % (text[:200], self.proc.pid)).encode())
            out.flush()
            try:
                subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch",
                                "-nx", "-ex", "thread apply all bt"],
                               stdin=subprocess.DEVNULL, stdout=out,
                               stderr=subprocess.STDOUT, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as e:
                out.write(("gdb: %s\n" % e).encode())

    def value(self, text, *params, timeout=60.0):
        return self.sql(text, *params, timeout=timeout)[0][0]

    def signal(self, sig):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill9(self):
        """SIGKILL and reap; the pipes stay open until close()."""
        self.killed = True
        self.signal(signal.SIGKILL)
        self.proc.wait()


class Attached(JsonPipe):
    """An attached writer on node node_id's database file db (a Python
    process loading the raftsql library so, without its suffix), whose
    connection has a busy timeout of busy_s seconds."""

    def __init__(self, node_id, db, so, log_path, busy_s, env=None,
                 prefix=None):
        self.id = node_id
        self.log_path = log_path
        self.buf = b""
        self.desync = False
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            list(prefix or []) + [PYTHON, os.path.join(HERE, "attached.py"),
                                  db, so, str(busy_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=dict(os.environ, **(env or {})))

    def name(self):
        return "node %d's attached writer" % self.id

    def close(self):
        """kill -9 (it holds nothing the node needs: its lease ends with
        its connection to the node's socket), reap, close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        JsonPipe.close(self)


class Slot:
    """Node id's place in the cluster: its current process (None while
    down), the lock of its request pipe, its fault state, and its
    attached writer (None until used, or after it failed) with its own
    lock."""

    def __init__(self, node_id):
        self.id = node_id
        self.lock = threading.Lock()
        self.node = None
        self.paused = False
        self.incarnations = 0
        self.attach_lock = threading.Lock()
        self.attached = None

    def request(self, text, *params, timeout=60.0):
        """Run text on the node under its lock. Raises NodeError (code -1
        when the node is down)."""
        with self.lock:
            node = self.node
            if node is None:
                raise NodeError("node %d is down (not sent)" % self.id, -1)
            return node.sql(text, *params, timeout=timeout)


class Tmpfs:
    """A small tmpfs mounted at path (root only), and a ballast file that
    fills it."""

    def __init__(self, path, size_mb):
        self.path = path
        self.mounted = False
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                            "size=%dm" % size_mb, "tmpfs", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise OSError(r.stdout.decode(errors="replace").strip() or
                          "mount failed (%d)" % r.returncode)
        self.mounted = True
        self.ballast = os.path.join(path, "ballast")

    def fill(self):
        """Write the ballast until the filesystem is full; return bytes."""
        n = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
        try:
            for size in (1 << 16, 4096, 512):
                block = b"\0" * size
                try:
                    while True:
                        n += os.write(fd, block)
                except OSError:
                    pass
        finally:
            os.close(fd)
        return n

    def free(self):
        try:
            os.remove(self.ballast)
        except FileNotFoundError:
            pass

    def umount(self):
        if not self.mounted:
            return
        for args in (["umount", self.path], ["umount", "-l", self.path]):
            if subprocess.run(args, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                self.mounted = False
                return


def mount_permitted(workdir):
    """None if a tmpfs can be mounted here, else why not. The probe is a
    new folder of its own: a fixed name ("probe") met any file of that
    name in the folder, or another run probing at the same time, and the
    full-disk fault was then skipped without a real reason (the
    campaign's seeds 450944 on, beside a stray /tmp/probe)."""
    try:
        path = tempfile.mkdtemp(prefix="raftsql-tmpfs-probe-", dir=workdir)
    except OSError as e:
        return str(e)
    try:
        Tmpfs(path, 1).umount()
    except OSError as e:
        return str(e)
    finally:
        try:
            os.rmdir(path)
        except OSError:
            pass
    return None


class FaultCluster:
    """n nodes on 127.0.0.1 whose peer links go through a Net (or, as
    hosts.HostCluster, in network namespaces of their own).

    Every node gets the same cluster= string, the nodes' real addresses,
    and node i listens on its real port; its dial= string names its
    outgoing proxies, where it dials the others. With tmpfs_mb, each
    node's dir= is a tmpfs of that size."""

    def __init__(self, binary, workdir, n, extra, seed, tmpfs_mb=0,
                 so=None):
        self.binary = binary
        self.so = so  # the raftsql library for attached writers
        self.workdir = workdir
        self.extra = extra
        self.ids = list(range(1, n + 1))
        self.net = self.make_net(seed)
        self.slots = {i: Slot(i) for i in self.ids}
        self.disks = {}
        self.node_extra = {}  # id -> more configuration of that node
        self.deaths = []  # lines: nodes that exited without being told
        self.power = None  # a powerloss.PowerLoss: nodes run under its shim
        try:
            for i in self.ids if tmpfs_mb else ():
                self.disks[i] = Tmpfs(os.path.join(workdir, "node%d-log" % i),
                                      tmpfs_mb)
        except BaseException:
            self.close()  # the network and the mounts made so far
            raise

    def make_net(self, seed):
        """The started network of the nodes' links (self.real: their
        ports)."""
        self.real = dict(zip(self.ids, free_ports(len(self.ids))))
        net = Net(self.real, seed)
        net.start()
        return net

    def address(self, i):
        """Node i's address, as raft_add takes it."""
        return "127.0.0.1:%d" % self.real[i]

    def launch(self, i, env):
        """(the command prefix, the environment) that run a process of
        node i with the variables env: here, as it is."""
        return [], env

    def members(self):
        """The cluster string, the same on every node."""
        return ",".join("%d@127.0.0.1:%d" % (j, self.real[j])
                        for j in self.ids)

    def dial(self, i):
        """Node i's dial string: its outgoing proxy to each other node."""
        return ",".join("%d@127.0.0.1:%d" % (j, self.net.port(i, j))
                        for j in self.ids if j != i)

    def config(self, i):
        cfg = "id=%d cluster=%s dial=%s %s" % (i, self.members(), self.dial(i),
                                               self.extra)
        if i in self.node_extra:
            cfg += " " + self.node_extra[i]
        if i in self.disks:
            cfg += " dir=%s" % self.disks[i].path
        return cfg

    def log_path(self, i):
        return os.path.join(self.workdir, "node%d.log" % i)

    def clock_path(self, i):
        """The file whose number (ms) skews node i's wall clock, read at
        every stamp of "now" (test builds: ext/runtime/propose.c)."""
        return os.path.join(self.workdir, "node%d.clock" % i)

    def set_clock(self, i, offset_ms):
        """Skew node i's wall clock by offset_ms from now on (a jump)."""
        tmp = self.clock_path(i) + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % offset_ms)
        os.replace(tmp, self.clock_path(i))

    def db_path(self, i):
        return os.path.join(self.workdir, "node%d.db" % i)

    def start(self, i, timeout=30.0):
        """Start node i (it must be down). Raises NodeError when raft_start
        fails; the process is then reaped."""
        slot = self.slots[i]
        env = {"RAFTSQL_TEST_CLOCK_FILE": self.clock_path(i)}
        env.update(self.power_env(i, self.binary))
        prefix, env = self.launch(i, env)
        node = FaultNode(self.binary, i, self.db_path(i), self.log_path(i),
                         env, prefix)
        try:
            node.sql("SELECT raft_start(?)", self.config(i), timeout=timeout)
        except NodeError:
            node.kill9()
            node.close()
            raise
        slot.incarnations += 1
        with slot.lock:
            slot.node = node
            slot.paused = False

    def attached(self, i, busy_s):
        """Node i's attached writer, started when there is none; the
        caller holds the slot's attach_lock."""
        slot = self.slots[i]
        if slot.attached is not None and (slot.attached.desync or
                                          slot.attached.proc.poll()
                                          is not None):
            slot.attached.close()
            slot.attached = None
        if slot.attached is None:
            prefix, env = self.launch(i, self.power_env(i, PYTHON))
            slot.attached = Attached(i, self.db_path(i), self.so,
                                     os.path.join(self.workdir,
                                                  "attached%d.log" % i),
                                     busy_s, env, prefix)
        return slot.attached

    def close_attached(self):
        """End every attached writer (waiting for the one in use)."""
        for slot in self.slots.values():
            with slot.attach_lock:
                if slot.attached is not None:
                    slot.attached.close()
                    slot.attached = None

    # ---- Power loss (powerloss.py) ---------------------------------------

    def node_files(self, i):
        """The path prefixes of node i's files: its database (and its -wal,
        -shm, -raft log directory) and its log tmpfs."""
        return [self.db_path(i)] + ([self.disks[i].path] if i in self.disks
                                    else [])

    def power_env(self, i, binary):
        """The environment that runs binary under the power-loss shim as
        one of node i's processes ({} without self.power)."""
        if self.power is None:
            return {}
        return self.power.env(i, binary, self.node_files(i))

    def power_fail(self, i):
        """Node i's machine loses power: kill -9 its attached writer and
        the node, then undo what their disk would have lost; a new
        attached writer may start only after. Returns the restore's
        summary. Raises powerloss.JournalError."""
        slot = self.slots[i]
        att = slot.attached
        if att is not None and att.proc.poll() is None:
            att.proc.kill()  # its user, if any, sees EOF and lets go
        with slot.attach_lock:
            if slot.attached is not None:
                slot.attached.close()
                slot.attached = None
            self.kill(i)
            return self.power.restore(i, self.node_files(i))

    def died(self, i):
        """Whether node i's process exited on its own (recorded once)."""
        node = self.slots[i].node
        if node is None or node.killed or node.proc.poll() is None:
            return False
        code = node.proc.returncode
        how = "exit code %d" % code
        if code < 0:
            how = "signal %s" % signal.Signals(-code).name
        self.deaths.append("node %d died on its own (%s); last log lines: "
                           "%s" % (i, how, last_lines(node.log_path)))
        node.killed = True
        return True

    def kill(self, i):
        """kill -9 node i; a request in flight on it ends."""
        slot = self.slots[i]
        node = slot.node
        if node is None:
            return
        self.died(i)
        node.kill9()
        with slot.lock:
            slot.node = None
            slot.paused = False
        node.close()

    def pause(self, i):
        slot = self.slots[i]
        if slot.node is not None and not slot.paused:
            slot.paused = True
            slot.node.signal(signal.SIGSTOP)

    def resume(self, i):
        slot = self.slots[i]
        if slot.node is not None and slot.paused:
            slot.node.signal(signal.SIGCONT)
            slot.paused = False

    def stop_all(self, timeout=20):
        """Stop every live node (close its stdin); return {id: exit code}
        of those that were running."""
        codes = {}
        self.close_attached()
        for i, slot in self.slots.items():
            self.resume(i)
            self.died(i)
        for i, slot in self.slots.items():
            with slot.lock:
                node = slot.node
                slot.node = None
            if node is None:
                continue
            if node.desync:
                node.kill9()
                node.close()
                codes[i] = "killed (pipe out of step)"
                continue
            codes[i] = node.stop(timeout)
        return codes

    def close(self):
        """Kill whatever still runs, close the network, unmount."""
        for slot in self.slots.values():
            if slot.attached is not None:  # its user is gone or stopping
                slot.attached.close()
                slot.attached = None
        for i, slot in self.slots.items():
            node = slot.node
            if node is not None:
                node.signal(signal.SIGCONT)
                node.kill9()
                node.close()
                slot.node = None
        self.net.close()
        for d in self.disks.values():
            d.free()
            d.umount()
