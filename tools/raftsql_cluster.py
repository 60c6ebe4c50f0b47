"""Start and drive a local raftsql cluster of separate node processes.

Each node is a `raftsql-testhost DBFILE` process (tools/raftsql_testhost.c) that
answers one JSON line per request line on its stdin/stdout. Used by the
demo (tools/demo.py) and the end-to-end tests (tests/e2e/).
"""

import json
import os
import random
import shutil
import socket
import subprocess
import time


# Ports handed out by free_ports in this process: never again.
_HANDED_OUT = set()

# Where free_ports picks from: below Linux's default ephemeral range
# (32768-60999, /proc/sys/net/ipv4/ip_local_port_range), which every
# outgoing connection on the machine draws from. A port picked from that
# range, free when checked, was taken by another process's connection
# before its node listened on it ("bind: address already in use") while
# other test runs shared the machine.
_PORT_LOW, _PORT_HIGH = 20000, 32767


def free_ports(n):
    """Return n distinct free TCP ports on 127.0.0.1, none handed out by
    this process before, from below the ephemeral range (each is free
    when checked; a port is only bound later, by its node); under
    tests/e2e/run.py (E2E_SLOT, E2E_SLOTS in the environment) from its
    worker's slice of that range."""
    low, high = _PORT_LOW, _PORT_HIGH
    slot, slots = os.environ.get("E2E_SLOT"), os.environ.get("E2E_SLOTS")
    if slot and slots and slot.isdigit() and slots.isdigit() and \
            int(slot) < int(slots):
        # tests/e2e/run.py's worker @slot of @slots: a slice of the range
        # of its own, so that files run side by side never pick the same
        # port between its check here and its node's bind.
        width = (_PORT_HIGH - _PORT_LOW + 1) // int(slots)
        low = _PORT_LOW + int(slot) * width
        high = low + width - 1
    ports = []
    for _ in range(2000):
        if len(ports) == n:
            return ports
        port = random.randint(low, high)
        if port in _HANDED_OUT:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _HANDED_OUT.add(port)
        ports.append(port)
    raise RuntimeError("free_ports: no %d free ports in %d-%d after 2000 "
                       "tries" % (n, low, high))


def remove_node_files(workdir, node_id):
    """Remove node @node_id's database, its side files and directories
    and its log from @workdir (a start that failed)."""
    prefix = "node%d." % node_id
    for name in os.listdir(workdir):
        if name.startswith(prefix):
            path = os.path.join(workdir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


class NodeError(Exception):
    """A SQL request answered with an error: .code is SQLite's code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class Node:
    """One node process: its id, database file and request pipe; env adds
    variables to the process's environment, prefix runs it through a
    command (e.g. ["ip", "netns", "exec", "ns1"], which execs it)."""

    def __init__(self, binary, node_id, db, log_path, env=None, prefix=None):
        self.id = node_id
        self.db = db
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            list(prefix or []) + [binary, db], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log,
            env=dict(os.environ, **(env or {})))

    def sql(self, text, *params):
        """Run one statement on the node's connection; return its rows.

        Raises NodeError when the statement fails."""
        line = json.dumps([text, *params]) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise NodeError("node %d exited (see %s)" % (self.id,
                                                         self.log_path), -1)
        obj = json.loads(reply)
        if "error" in obj:
            raise NodeError(obj["error"], obj["code"])
        return obj["rows"]

    def value(self, text, *params):
        """Run a statement returning one value, and return it."""
        return self.sql(text, *params)[0][0]

    def status(self):
        """The node's raft_status() as a dict."""
        return json.loads(self.value("SELECT raft_status()"))

    def begin_stop(self):
        """Close the request pipe, which tells the node to stop; stop()
        waits for its exit."""
        if self.proc.poll() is None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def stop(self, timeout=20):
        """Close the request pipe; the node stops and exits. Returns its
        exit code."""
        if self.proc.poll() is None:
            self.begin_stop()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._log.close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL the node process."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (BrokenPipeError, ValueError):
                pass
        self._log.close()


class Cluster:
    """A cluster of n node processes with databases in workdir.

    ports: the nodes' listening ports (default: free ones); dial: a
    function of a node id giving that node's dial= value (where it dials
    the others), or None for none; host: the host of every node's address
    ("[::1]", "localhost"); env: a node id -> variables added to that
    node's process environment (test faults such as
    RAFTSQL_TEST_APPLY_DELAY_MS), also when it restarts."""

    def __init__(self, binary, workdir, n=3, extra="", ports=None,
                 dial=None, host="127.0.0.1", env=None):
        self.binary = binary
        self.env = env or {}
        self.workdir = workdir
        self.extra = extra
        self.dial = dial
        # A free port can be taken by another process between the check
        # and the node's bind (another test run, a demo): with ports of
        # its own choosing, the cluster starts again on new ones.
        for attempt in range(5):
            chosen = ports or free_ports(n)
            self.members = ",".join("%d@%s:%d" % (i + 1, host, p)
                                    for i, p in enumerate(chosen))
            self.nodes = []
            try:
                for i in range(n):
                    self.nodes.append(self.spawn(i + 1))
                return
            except NodeError as e:
                if ports or "address already in use" not in str(e) or \
                        attempt == 4:
                    raise
                for node in self.nodes:
                    node.kill()
                for i in range(n):
                    remove_node_files(workdir, i + 1)

    def spawn(self, node_id):
        """Start (or restart) node node_id and its raftsql node."""
        db = os.path.join(self.workdir, "node%d.db" % node_id)
        log = os.path.join(self.workdir, "node%d.log" % node_id)
        node = Node(self.binary, node_id, db, log,
                    env=self.env.get(node_id))
        config = "id=%d cluster=%s %s" % (node_id, self.members, self.extra)
        if self.dial is not None:
            config += " dial=%s" % self.dial(node_id)
        try:
            node.sql("SELECT raft_start(?)", config)
        except NodeError:
            node.kill()
            raise
        return node

    def node(self, node_id):
        return self.nodes[node_id - 1]

    def wait_leader(self, timeout=15.0):
        """Wait until every live node names the same leader; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = {n.value("SELECT raft_leader()")
                       for n in self.nodes if n.proc.poll() is None}
            if len(leaders) == 1 and None not in leaders:
                return self.node(leaders.pop())
            time.sleep(0.05)
        raise TimeoutError("no leader within %.0f s" % timeout)

    def wait_applied(self, index, nodes=None, timeout=30.0):
        """Wait until each node (default all) has applied index."""
        deadline = time.monotonic() + timeout
        for n in nodes or self.nodes:
            while n.status()["applied"] < index:
                if time.monotonic() > deadline:
                    raise TimeoutError("node %d did not apply %d" %
                                       (n.id, index))
                time.sleep(0.02)

    def wait_all_applied(self, timeout=30.0):
        """Wait until every node has applied the highest index any node
        has applied: a write through a follower is applied there when its
        raft_exec returns, perhaps before the leader's apply thread gets
        to it, so the leader's applied index can be behind it."""
        self.wait_applied(max(n.status()["applied"] for n in self.nodes),
                          timeout=timeout)

    def stop(self):
        """Stop every node, all at once; return their exit codes. (One by
        one, each stop would wait for the one before.)"""
        for n in self.nodes:
            n.begin_stop()
        return [n.stop() for n in self.nodes]
