"""Network namespaces for end-to-end tests: N hosts on one bridge.

    net = Netns(3)                      # names unique to this process
    skip = Netns.unavailable()          # None, or why it cannot run here
    net.start()                         # namespaces, veths, bridge, IPs
    net.hosts({"n1": 1, "n2": 2})       # /etc/netns/<ns>/hosts of each
    proc = subprocess.Popen(net.prefix(1) + ["cmd", ...])
    net.close()                         # idempotent; also run at exit

    workdir, net = open_hosts(test, 3, "raftsql-e2e-x-")  # a setUp
    close_hosts(net, workdir)                             # its tearDown

Host i (1-based) is the namespace net.name(i) with interface eth0 at
10.77.0.<i>/24 (net.ip(i)) and its loopback up; its eth0 is one end of a
veth pair whose other end is a port of bridge br0 in one more namespace,
net.name(0), so no interface or address is added to the machine's own
namespace. Names end in this process's pid, so runs at the same time do
not collide. close() deletes the namespaces (their interfaces go with
them) and /etc/netns/<ns>; it runs at interpreter exit too, so a failed or
interrupted test leaves nothing behind (a SIGKILL of the test process
does: `ip netns list` shows rsq<pid>*).

Names resolve through /etc/netns/<ns>/hosts, which `ip netns exec` mounts
over /etc/hosts for the command it runs (never DNS: the namespaces have no
route off the bridge). hosts() writes the files in place, so a process
already running sees a change at its next lookup (a new file would not be
the one mounted).
"""

import atexit
import os
import shutil
import subprocess
import tempfile

SUBNET = "10.77.0"


def _ip(*args, check=True):
    """Run ip(8) with args; return its result."""
    return subprocess.run(["ip"] + list(args), check=check,
                          capture_output=True, text=True)


class Netns:
    """n hosts (1..n) in namespaces of their own on one bridge."""

    def __init__(self, n, tag="rsq"):
        self.n = n
        self.base = "%s%d" % (tag, os.getpid())
        self.made = []  # namespaces created, to delete
        atexit.register(self.close)

    @staticmethod
    def unavailable():
        """None when namespaces can be made here, else the reason."""
        if os.geteuid() != 0:
            return "network namespaces need root (run as root or in CI)"
        if shutil.which("ip") is None:
            return "ip(8) is missing (Debian package iproute2)"
        probe = "rsqprobe%d" % os.getpid()
        r = _ip("netns", "add", probe, check=False)
        if r.returncode != 0:
            return "ip netns add failed: %s" % r.stderr.strip()
        _ip("netns", "del", probe, check=False)
        return None

    def name(self, i):
        """The namespace of host i (0: the bridge's)."""
        return "%s%s" % (self.base, "br" if i == 0 else "h%d" % i)

    def ip(self, i):
        """The IPv4 address of host i."""
        return "%s.%d" % (SUBNET, i)

    def prefix(self, i):
        """The command prefix that runs a program in host i."""
        return ["ip", "netns", "exec", self.name(i)]

    def start(self):
        """Create the bridge namespace and the n hosts, each with eth0 up
        at its address, on the bridge."""
        br = self.name(0)
        self._add(br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for i in range(1, self.n + 1):
            ns = self.name(i)
            self._add(ns)
            port = "p%d" % i
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer",
                "name", port, "netns", br)
            _ip("-n", br, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", "%s/24" % self.ip(i), "dev",
                "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _add(self, ns):
        _ip("netns", "add", ns)
        self.made.append(ns)

    def hosts(self, names, only=None):
        """Write the hosts file of each host (or of those in only): the
        usual loopback lines, then one line per name of names (a dict of
        hostname to host number, or to an address string)."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        for host, where in sorted(names.items()):
            addr = self.ip(where) if isinstance(where, int) else where
            lines.append("%s %s" % (addr, host))
        text = "\n".join(lines) + "\n"
        for i in only or range(1, self.n + 1):
            d = os.path.join("/etc/netns", self.name(i))
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "hosts")
            # In place: a running `ip netns exec` child has this inode
            # mounted over /etc/hosts.
            with open(path, "a+") as f:
                f.seek(0)
                f.truncate()
                f.write(text)

    def close(self):
        """Delete every namespace made and its /etc/netns directory."""
        while self.made:
            ns = self.made.pop()
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(os.path.join("/etc/netns", ns), ignore_errors=True)
        for i in range(0, self.n + 1):
            shutil.rmtree(os.path.join("/etc/netns", self.name(i)),
                          ignore_errors=True)


def open_hosts(test, n, prefix):
    """The setUp of a unittest.TestCase @test on @n hosts: skips @test,
    saying why, where namespaces cannot be made; else returns a new
    temporary directory (named @prefix...) and the started Netns. A start
    that fails removes both and raises."""
    why = Netns.unavailable()
    if why is not None:
        test.skipTest(why)
    workdir = tempfile.mkdtemp(prefix=prefix)
    net = Netns(n)
    try:
        net.start()
    except Exception:
        net.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir, net


def close_hosts(net, workdir):
    """The tearDown of open_hosts: deletes the namespaces, and @workdir
    unless KEEP_E2E is set (then says where it is)."""
    net.close()
    if os.environ.get("KEEP_E2E") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print("kept", workdir)
