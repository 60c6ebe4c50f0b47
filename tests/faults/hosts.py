"""The fault suite's host mode (FAULTS_HOSTS=netns): every node on a host
of its own, a network namespace (tests/e2e/netns.py: eth0 at 10.77.0.<i>
on a bridge in one more namespace), peers over TLS with certificates made
by openssl for the episode (tests/e2e/certs.py), and faults made by the
kernel rather than by a proxy:

- a node's link down: its eth0 set down (the host's own routes go, its
  connects fail at once) or its bridge port set down (the cable pulled at
  the switch: its packets vanish);
- a directed link a -> b (a's connection to b's port, as in net.py) cut
  by a policy rule in a's namespace matching TCP to b's address and port
  PORT: `prohibit` (connects refused with EACCES; the established
  connections of that link are first killed with `ss -K`, as a firewall
  rejecting with a reset would) or, as a black hole, a lookup in a table
  whose route goes through a gateway that does not exist (a permanent
  neighbour entry with a MAC no host has: the packets go out on the
  bridge and nobody takes them);
- connection resets: `ss -K` of a link's established connections in its
  sender's namespace.

Nothing here needs iptables, nftables or netem. Delays, packet loss and
held traffic need one of them (or a proxy) and are not in this mode.

HostNet offers the methods of net.Net that the nemesis calls (links, set,
reset, heal), plus isolate(); HostCluster is a FaultCluster whose nodes run
in the namespaces. The names of every namespace end in the run's pid
(rsqf<pid>h<i>, rsqf<pid>br); stale() finds those of a run that died, and
sweep() removes them, their processes first.
"""

import os
import re
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(os.path.dirname(HERE), "e2e")
if E2E not in sys.path:
    sys.path.append(E2E)

import certs  # noqa: E402
from netns import SUBNET, Netns  # noqa: E402
from nodes import FaultCluster  # noqa: E402

TAG = "rsqf"   # namespaces of the fault suite: rsqf<pid>br, rsqf<pid>h<i>
PORT = 7001    # every node listens on <its address>:PORT
# Black holes: the table of the rules in "drop", and the gateway it routes
# through, an address of the subnet with a MAC that no host has.
DROP_TABLE = 77
PHANTOM = SUBNET + ".254"
PHANTOM_MAC = "02:00:00:00:00:fe"
RULE_PREF = 1000  # the rule of link a -> b has priority RULE_PREF + b
IP_TIMEOUT_S = 30.0  # a call of ip(8) or ss(8) that takes longer fails

# The nemesis kinds of this mode, and why the others are not.
KINDS = ("partition", "oneway", "drop", "reset", "pause", "kill", "disk",
         "member", "clock", "asym", "bridge", "power")
LEFT_OUT = {
    "delay": "needs netem (or a proxy) to delay packets",
    "loss": "needs netem (or a proxy) to lose packets",
    "hold": "needs a proxy to hold bytes and release them late",
}
# How a partition cuts its side off: the proxies' two modes as rules, and
# the link down two ways.
PARTITION_MODES = ("cut", "drop", "down", "unplug")
NAME = re.compile(r"^%s([0-9]+)(br|h[0-9]+)$" % TAG)


def mode_kinds(kinds, explicit):
    """The kinds of this mode among kinds: when not explicit (the
    default, every kind) those in KINDS; when the user named them, all of
    them, or ValueError naming those that do not apply and why."""
    if not explicit:
        return [k for k in kinds if k in KINDS]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError("not in FAULTS_HOSTS=netns: %s" % "; ".join(
            "%s (%s)" % (k, LEFT_OUT.get(k, "unknown here")) for k in bad))
    return list(kinds)


def stale(names, alive):
    """The namespaces of names (as `ip netns list` prints them: a name,
    maybe followed by " (id: N)") made by a fault run whose pid is not
    alive (alive(pid) -> bool): what an earlier run that was killed left
    behind. The bridge's namespace comes last."""
    out = []
    for line in names:
        name = line.split()[0] if line.split() else ""
        m = NAME.match(name)
        if m and not alive(int(m.group(1))):
            out.append(name)
    return sorted(out, key=lambda n: (n.endswith("br"), n))


def stale_dirs(mounts, tmp, alive):
    """The episode directories (tmp/raftsql-faults-<pid>-*) of a fault
    run whose pid is not alive, and their mount points, from mounts, the
    lines of /proc/mounts: ([directory], [mount point]), the deepest
    mount points first."""
    pattern = re.compile(r"^(%s/raftsql-faults-([0-9]+)-[^/]+)(/.*)?$" %
                         re.escape(tmp.rstrip("/")))
    dirs, points = set(), []
    for line in mounts:
        fields = line.split()
        if len(fields) < 2:
            continue
        m = pattern.match(fields[1])
        if m and not alive(int(m.group(2))):
            dirs.add(m.group(1))
            points.append(fields[1])
    return sorted(dirs), sorted(points, key=lambda p: (-p.count("/"), p))


def rule_lines(src, modes, ip):
    """The ip(8) batch lines that give host src's namespace the rules of
    its links: modes is {dst: "up" | "cut" | "drop"} and ip(dst) the
    address of dst. Each link's rule (priority RULE_PREF + dst) is
    deleted first (with -force a missing one is no error), then added
    again unless the link is up; a drop needs the phantom gateway's
    neighbour entry and route, put back every time (a link set down
    flushes both)."""
    lines = []
    if any(m == "drop" for m in modes.values()):
        lines.append("neigh replace %s lladdr %s dev eth0 nud permanent" % (
            PHANTOM, PHANTOM_MAC))
        lines.append("route replace %s.0/24 via %s dev eth0 table %d" % (
            SUBNET, PHANTOM, DROP_TABLE))
    for dst, mode in sorted(modes.items()):
        pref = RULE_PREF + dst
        match = "to %s/32 ipproto tcp dport %d" % (ip(dst), PORT)
        lines.append("rule del pref %d" % pref)
        if mode == "cut":
            lines.append("rule add pref %d %s prohibit" % (pref, match))
        elif mode == "drop":
            lines.append("rule add pref %d %s table %d" % (pref, match,
                                                           DROP_TABLE))
        else:
            assert mode == "up", mode
    return lines


def kill_filter(dsts, ip):
    """The ss(8) filter of the established connections to the nodes dsts
    at their port PORT: the links src -> dst of the sender src."""
    hosts = " or ".join("dst %s" % ip(d) for d in sorted(dsts))
    return ["state", "established", "(", "dport", "=", ":%d" % PORT,
            ")", "and", "(", hosts, ")"]


def batch_errors(lines, stderr):
    """The failures that matter in the stderr of `ip -force -batch` run on
    lines: each "Command failed -:N" whose line N is not a "rule del" (a
    rule deleted before it is added again, or that was never added)."""
    bad = []
    for text in stderr.splitlines():
        m = re.match(r"Command failed -:([0-9]+)", text.strip())
        if m is None:
            continue
        n = int(m.group(1))
        line = lines[n - 1] if 0 < n <= len(lines) else "?"
        if not line.startswith("rule del "):
            bad.append("line %d: %s" % (n, line))
    return bad


def by_src(pairs):
    """{src: [dst, ...]} of the directed links pairs."""
    out = {}
    for a, b in pairs:
        out.setdefault(a, []).append(b)
    return out


def run(cmd, stdin=None):
    """Run cmd (ip or ss); return its result. Raises RuntimeError with its
    stderr when it fails or takes longer than IP_TIMEOUT_S."""
    try:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                           timeout=IP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s: no end within %.0f s" % (" ".join(cmd),
                                                         IP_TIMEOUT_S))
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(say, tmp):
    """Remove what an earlier fault run that was killed left: its
    namespaces (their processes killed first; a namespace with a process
    in it outlives `ip netns del`), their /etc/netns directories, and the
    tmpfs mounts of its episode directories in tmp (then those)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True,
                       text=True, timeout=IP_TIMEOUT_S)
    for ns in stale(r.stdout.splitlines(), pid_alive):
        pids = subprocess.run(["ip", "netns", "pids", ns],
                              capture_output=True, text=True,
                              timeout=IP_TIMEOUT_S).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True,
                       timeout=IP_TIMEOUT_S)
        subprocess.run(["rm", "-rf", os.path.join("/etc/netns", ns)],
                       timeout=IP_TIMEOUT_S)
        say("faults: removed %s, left by a fault run that is gone (%d "
            "processes killed)" % (ns, len(pids)))
    with open("/proc/mounts") as f:
        dirs, points = stale_dirs(f.read().splitlines(), tmp, pid_alive)
    for point in points:
        for args in (["umount", point], ["umount", "-l", point]):
            if subprocess.run(args, capture_output=True,
                              timeout=IP_TIMEOUT_S).returncode == 0:
                break
    for d in dirs:
        subprocess.run(["rm", "-rf", "--one-file-system", d],
                       timeout=IP_TIMEOUT_S)
        say("faults: removed %s (%d mounts), left by a fault run that is "
            "gone" % (d, len([p for p in points if p.startswith(d + "/")])))


class HostNet:
    """The directed links between n hosts (1..n) of a Netns, cut by
    policy rules, and each host's link, set down. Call start() first and
    close() at the end (it deletes the namespaces: every veth, the bridge
    and the interfaces go with them)."""

    PARTITION_MODES = PARTITION_MODES  # the nemesis's partition modes

    def __init__(self, n):
        self.ns = Netns(n, tag=TAG)
        self.ids = list(range(1, n + 1))
        self.links = {(a, b): "up" for a in self.ids for b in self.ids
                      if a != b}
        self.down = {}  # node -> "down" | "unplug"

    def start(self):
        self.ns.start()
        self.ns.hosts({"n%d" % i: i for i in self.ids})

    def close(self):
        self.ns.close()

    def ip(self, i):
        return self.ns.ip(i)

    def prefix(self, i):
        return self.ns.prefix(i)

    def _batch(self, i, lines):
        """Run lines in host i's namespace (0: the bridge's) with one ip
        -batch; raise RuntimeError on a failure that matters."""
        if not lines:
            return
        cmd = ["ip", "-n", self.ns.name(i), "-force", "-batch", "-"]
        try:
            r = subprocess.run(cmd, input="\n".join(lines) + "\n",
                               capture_output=True, text=True,
                               timeout=IP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError("%s: no end within %.0f s" % (
                " ".join(cmd), IP_TIMEOUT_S))
        bad = batch_errors(lines, r.stderr)
        if bad:
            raise RuntimeError("%s: %s (%s)" % (" ".join(cmd), "; ".join(
                bad), r.stderr.strip()[:300]))

    def _kill(self, src, dsts):
        """ss -K the established connections of the links src -> dsts."""
        if dsts:
            run(self.prefix(src) + ["ss", "-K", "-t", "-n"] +
                kill_filter(dsts, self.ip))

    def set(self, pairs, mode="up", delay=0.0, jitter=0.0, loss=0.0):
        """Put every link (src, dst) of pairs in mode: up, cut or drop.
        The proxies' delay, jitter, loss and hold are not to be had."""
        if mode not in ("up", "cut", "drop") or delay or jitter or loss:
            raise ValueError("host links are up, cut or drop, not %s "
                             "(delay %s, loss %s)" % (mode, delay, loss))
        changed = by_src([p for p in pairs if self.links[p] != mode])
        for src, dsts in sorted(changed.items()):
            if mode == "cut":
                self._kill(src, dsts)
            for d in dsts:
                self.links[(src, d)] = mode
            self._batch(src, rule_lines(src, {d: mode for d in dsts},
                                        self.ip))

    def reset(self, pairs):
        """Kill the established connections of the links (re-dialled)."""
        for src, dsts in sorted(by_src(pairs).items()):
            self._kill(src, dsts)

    def isolate(self, nodes, how):
        """Cut each node of nodes off from every other: its eth0 down
        ("down") or its bridge port down ("unplug")."""
        for i in nodes:
            self.down[i] = how
            if how == "down":
                run(["ip", "-n", self.ns.name(i), "link", "set", "eth0",
                     "down"])
            else:
                run(["ip", "-n", self.ns.name(0), "link", "set", "p%d" % i,
                     "down"])

    def heal(self):
        """Every link up: rules deleted, eth0 and bridge ports up (all of
        them, whatever this object believes: a heal must heal)."""
        for i in self.ids:
            self._batch(i, ["link set eth0 up"] + rule_lines(
                i, {d: "up" for d in self.ids if d != i}, self.ip))
        self._batch(0, ["link set p%d up" % i for i in self.ids])
        self.down.clear()
        for p in self.links:
            self.links[p] = "up"

    def state(self):
        """{(src, dst): mode}, and the nodes whose link is down."""
        return dict(self.links), dict(self.down)


class HostCluster(FaultCluster):
    """A FaultCluster whose node i runs in host i of a HostNet, listening
    on its address at PORT, known to the others as n<i> (the hosts file of
    each namespace), with a certificate of the episode's CA naming n<i>
    alone. Its attached writer runs in the same host."""

    def make_net(self, seed):
        self.ca = certs.CA(self.workdir)
        self.tls = {i: self.ca.tls_keys("node%d" % i, ["n%d" % i])
                    for i in self.ids}
        net = HostNet(len(self.ids))
        try:
            net.start()
        except Exception:
            net.close()
            raise
        return net

    def members(self):
        return ",".join("%d@n%d:%d" % (j, j, PORT) for j in self.ids)

    def address(self, i):
        return "n%d:%d" % (i, PORT)

    def config(self, i):
        cfg = "id=%d listen=%s:%d advertise=n%d:%d cluster=%s %s %s" % (
            i, self.net.ip(i), PORT, i, PORT, self.members(), self.tls[i],
            self.extra)
        if i in self.node_extra:
            cfg += " " + self.node_extra[i]
        if i in self.disks:
            cfg += " dir=%s" % self.disks[i].path
        return cfg

    def launch(self, i, env):
        """Run in host i, the environment set by env(1) after `ip netns
        exec` (so that an LD_PRELOAD reaches the node, not ip)."""
        return (self.net.prefix(i) + ["/usr/bin/env"] +
                ["%s=%s" % kv for kv in sorted(env.items())]), {}
