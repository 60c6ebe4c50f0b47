"""Fault-injection runs against real raftsql-testhost processes.

Usage: RAFTSQL_TESTHOST=build/san/raftsql-testhost python3 tests/faults/run.py

A run is a series of episodes, each a fresh cluster of FAULTS_NODES nodes
behind the fault network (tests/faults/net.py) with clients writing
(tests/faults/workload.py) while faults come one after another
(tests/faults/nemesis.py). At an episode's end every fault is healed, the
cluster must converge, and the checks (tests/faults/checks.py) run.

Besides the bank clients, register clients (tests/faults/registers.py)
and list-append clients (tests/faults/appends.py) run; every client
operation goes into the episode's history (tests/faults/history.py),
checked for linearizability (tests/faults/linearizable.py) and
serializability (tests/faults/elle.py); local reads on the node started
with max_staleness_ms (tests/faults/local_reads.py) for bounded staleness
(tests/faults/staleness.py); and "now" stamped into raft_exec entries
(tests/faults/clock.py), never running backwards in log order
(tests/faults/monotonic.py). A failed episode keeps its
history, history.jsonl, beside its node logs.

Environment (all optional):
  FAULTS_SEED     seed of the first episode (default: the time); episode k
                  uses FAULTS_SEED + k
  FAULTS_COUNT    faults in all (default 200)
  FAULTS_S        bound on the time spent in faults, seconds (default 1800)
  FAULTS_EPISODE  faults per episode (default 25)
  FAULTS_KINDS    comma-separated kinds (default: all of nemesis.KINDS)
  FAULTS_NODES    nodes per cluster: 3 (default) or 5; a fault stops,
                  kills or cuts off at most a minority (1 of 3, 2 of 5)
  FAULTS_HOSTS    loopback (default: every node on 127.0.0.1, its links
                  through the proxies of net.py) or netns (every node on
                  a host of its own, a network namespace, peers over TLS,
                  the faults made by the kernel: tests/faults/hosts.py;
                  root only; default kinds those of hosts.KINDS)
  FAULTS_CLIENTS  bank client threads (default 3)
  FAULTS_REGISTER_CLIENTS, FAULTS_APPEND_CLIENTS
                  register and list-append client threads (default 2
                  each)
  FAULTS_LOCAL_CLIENTS
                  the writer and the threads reading locally on the
                  episode's node with max_staleness_ms (default 2: one
                  of each)
  FAULTS_CLOCK_CLIENTS
                  threads stamping "now" through raft_exec (default 2)
  FAULTS_KEEP     where the logs of a failed episode are copied
                  (default build/faults)
  RAFTSQL_SO      the library attached writers load (build/raftsql.so)
  POWERLOSS_SO    the power-loss shim (build/powerloss.so), with the
                  kind power: every node process runs under it

Prints the seed first, one line per fault, the figures and checks of each
episode, and for a failure the one-line command that replays it. Exits 0
only when every check of every episode held and nothing wedged.
"""

import collections
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import appends  # noqa: E402
import checks  # noqa: E402
import clock  # noqa: E402
import history  # noqa: E402
import local_reads  # noqa: E402
import paths  # noqa: E402
import powerloss  # noqa: E402
import recovery  # noqa: E402
import registers  # noqa: E402
from nemesis import (KINDS, NODE_COUNTS, Finding, Nemesis,  # noqa: E402
                     fault_plan)
from nodes import FaultCluster, NodeError, mount_permitted  # noqa: E402
from workload import SCHEMA, Workload  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
NODE = os.environ.get("RAFTSQL_TESTHOST",
                      os.path.join(ROOT, "build", "san", "raftsql-testhost"))
# The library the attached writers (Python processes) load.
SO = os.environ.get("RAFTSQL_SO", os.path.join(ROOT, "build", "raftsql.so"))
POWERLOSS_SO = os.environ.get("POWERLOSS_SO",
                              os.path.join(ROOT, "build", "powerloss.so"))
EXEC_TIMEOUT_MS = 3000
REQUEST_TIMEOUT = EXEC_TIMEOUT_MS / 1000 + 20  # then a node counts stuck
CONVERGE_S = 60.0
TMPFS_MB = 128


def env_int(name, default):
    """The integer of environment variable name (default when unset or
    empty); exits naming the variable when it is not an integer."""
    text = os.environ.get(name) or str(default)
    try:
        return int(text)
    except ValueError:
        sys.exit("faults: %s=%r is not an integer" % (name, text))


def node_count():
    """FAULTS_NODES, which must be one of NODE_COUNTS (exits otherwise)."""
    n = env_int("FAULTS_NODES", 3)
    if n not in NODE_COUNTS:
        sys.exit("faults: FAULTS_NODES=%d: a cluster of %s nodes only (the "
                 "faults take down at most a minority)" % (
                     n, " or ".join(map(str, NODE_COUNTS))))
    return n


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def node_config(rng):
    """Timing and compaction of an episode's nodes, drawn from its seed."""
    threshold = rng.choice((200, 1000, 8192))
    return ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=%d "
            "snapshot_threshold=%d trailing_entries=%d "
            "snapshot_chunk_bytes=%d log_level=info" % (
                EXEC_TIMEOUT_MS, threshold, rng.choice((0, 50, 500)),
                rng.choice((4096, 65536, 1048576))))


def known_causes(snaps_or_status, logs):
    """Labels of the known causes the states and logs show."""
    labels = set()
    for st in snaps_or_status:
        if st.get("log_full"):
            labels.add("known: the log fills for good")
        err = "%s %s" % (st.get("last_error"), st.get("apply_error"))
        if "space" in err or "Input/output" in err or "disk" in err:
            labels.add("known: a full disk needs a restart")
    for text in logs:
        if "apply stopped" in text or re.search(
                r"apply: entry [0-9]+ has index [0-9]+, expected", text):
            labels.add("known: snapshot install and apply race")
    return sorted(labels) or ["new"]


class Episode:
    """One cluster, its faults and its checks."""

    def __init__(self, seed, count, kinds, deadline, opts):
        self.seed = seed
        self.count = count
        self.kinds = kinds
        self.deadline = deadline
        self.opts = opts
        self.rng = random.Random(seed)
        self.faults = collections.Counter()
        self.results = []   # (check name, problems)
        self.findings = []
        self.writes = {"ok": 0, "failed": 0, "unknown": 0}
        self.plain = {"ok": 0, "failed": 0, "unknown": 0}  # of writes
        self.plain_kinds = {}  # "<kind> <channel> <outcome>": count
        self.declined = 0   # plain transfers from an empty account
        self.cluster = None
        self.dir = None
        self.errors = {}    # ERROR lines of the node logs, with counts
        self.reasons = {}   # (outcome, why) of writes not ok, with counts
        self.terms = 0      # terms whose leader the monitors saw
        self.reads = 0      # bank totals read during the run
        self.history = history.History()
        self.final = []     # ids of the final reads' ops (after healing)
        self.bounded = None  # the node started with max_staleness_ms
        self.ops = {}       # "<f> <type>": count, of the history
        self.heals = []     # (kind, monotonic time its fault was healed)
        self.recovery = []  # (kind, s to the first write ok after heal)
        self.converge_s = None  # heal of everything -> converged, s
        self.elapsed = 0.0  # the episode's seconds, start to cleanup
        self.kept = None    # where its logs and history were kept

    def replay(self):
        kinds = ",".join(self.kinds)
        extra = ""
        if kinds != ",".join(KINDS):
            extra += " FAULTS_KINDS=%s" % kinds
        if self.opts["nodes"] != 3:
            extra += " FAULTS_NODES=%d" % self.opts["nodes"]
        if self.opts.get("hosts", "loopback") != "loopback":
            extra += " FAULTS_HOSTS=%s" % self.opts["hosts"]
        for name in ("FAULTS_CLIENTS",
                     "FAULTS_REGISTER_CLIENTS", "FAULTS_APPEND_CLIENTS",
                     "FAULTS_LOCAL_CLIENTS", "FAULTS_CLOCK_CLIENTS"):
            if os.environ.get(name):
                extra += " %s=%s" % (name, os.environ[name])
        return "make faults FAULTS_SEED=%d FAULTS_COUNT=%d%s" % (
            self.seed, self.count, extra)

    def run(self):
        t0 = time.monotonic()
        try:
            return self.run_episode()
        finally:
            self.elapsed = time.monotonic() - t0

    def run_episode(self):
        # The pid names the run: hosts.sweep() finds a killed run's.
        self.dir = tempfile.mkdtemp(prefix="raftsql-faults-%d-" %
                                    os.getpid())
        config = node_config(self.rng)
        say("faults: episode seed %d: %d faults, %d nodes, %s" % (
            self.seed, self.count, self.opts["nodes"], config))
        wl = None
        pools = []
        cluster = FaultCluster
        if self.opts.get("hosts") == "netns":
            import hosts
            cluster = hosts.HostCluster
        try:
            self.cluster = cluster(
                NODE, self.dir, self.opts["nodes"], config, self.seed,
                TMPFS_MB if "disk" in self.kinds else 0,
                os.path.splitext(os.path.abspath(SO))[0])
            if "power" in self.kinds:
                self.cluster.power = powerloss.PowerLoss(self.dir,
                                                         POWERLOSS_SO)
            # One node serves bounded-stale local reads (unless
            # FAULTS_LOCAL_CLIENTS=0).
            if self.opts["local"] > 0:
                self.bounded = random.Random("%d-bounded" % self.seed).choice(
                    self.cluster.ids)
                self.cluster.node_extra[self.bounded] = (
                    "max_staleness_ms=%d" % local_reads.MAX_STALENESS_MS)
                say("  node %d: max_staleness_ms=%d, its local reads "
                    "checked" % (self.bounded, local_reads.MAX_STALENESS_MS))
            for i in self.cluster.ids:
                self.cluster.start(i)
            self.setup()
            wl = Workload(self.cluster, self.seed, self.opts["clients"],
                          REQUEST_TIMEOUT, self.history)
            pools = [cls(self.cluster, self.seed, self.opts[name],
                         REQUEST_TIMEOUT, self.history)
                     for cls, name in ((registers.Registers, "registers"),
                                       (appends.Appends, "appends"),
                                       (clock.Clock, "clock"),
                                       (local_reads.LocalReads, "local"))]
            pools[-1].node_id = self.bounded
            wl.start()
            for pool in pools:
                pool.start()
            nemesis = Nemesis(self.cluster, wl, self.rng, say)
            self.inject(nemesis)
            wl.stop()
            for pool in pools:
                pool.stop()
            self.findings += nemesis.findings
            self.findings += [Finding("new", "stuck: %s" % s)
                              for s in wl.stuck]
            for pool in pools:
                self.findings += [Finding("new", "stuck: %s" % s)
                                  for s in pool.stuck]
                self.results.append(("%s clients ran without harness "
                                     "errors" % pool.name, pool.errors))
            self.writes = wl.counts()
            self.plain = wl.counts(plain=True)
            self.plain_kinds = wl.plain_counts()
            self.declined = wl.declined
            self.reasons = wl.reasons()
            self.terms, self.reads = len(wl.leaders), wl.reads
            self.finish(wl)
            self.check_history()
        except Exception as e:  # the harness itself, or no convergence
            self.results.append(("episode ran to the end", [
                "%s: %s" % (type(e).__name__, e)] +
                traceback.format_exc().splitlines()[-6:]))
        finally:
            if wl is not None:
                wl.stopping.set()
            for pool in pools:
                pool.stopping.set()
            self.cleanup()
        return self.report()

    def setup(self):
        """Create the schema once a leader exists; wait until every node
        has it."""
        end = time.monotonic() + CONVERGE_S
        while True:
            try:
                self.cluster.slots[1].request(
                    "SELECT raft_exec(?)", registers.SCHEMA +
                    appends.SCHEMA + local_reads.SCHEMA +
                    clock.SCHEMA + SCHEMA, timeout=REQUEST_TIMEOUT)
                break
            except NodeError as e:
                if time.monotonic() > end:
                    raise
                if "already exists" in str(e):
                    break  # an earlier attempt of unknown outcome applied
                time.sleep(0.2)
        for i in self.cluster.ids:
            self.wait(lambda: self.cluster.slots[i].request(
                "SELECT count(*) FROM accounts", timeout=10)[0][0] > 0,
                "node %d has the schema" % i)

    def wait(self, cond, what, timeout=CONVERGE_S):
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            try:
                if cond():
                    return
            except NodeError as e:
                last = e
            time.sleep(0.1)
        raise TimeoutError("not within %.0f s: %s (%s)" % (timeout, what,
                                                           last))

    def inject(self, nemesis):
        t0 = time.monotonic()
        for k in range(self.count):
            if time.monotonic() > self.deadline:
                say("  time bound reached after %d faults" % k)
                break
            pause, kind, nemesis.rng = fault_plan(self.rng, self.kinds)
            time.sleep(pause)
            what = nemesis.run(kind)
            self.heals.append((kind, time.monotonic()))
            self.faults[kind] += 1
            say("  fault %d/%d t=%.1fs %s: %s" % (
                k + 1, self.count, time.monotonic() - t0, kind, what))
            nemesis.repair()
        time.sleep(0.5)

    def finish(self, wl):
        """Heal everything, converge, take every node's state, check."""
        c = self.cluster
        healed = time.monotonic()
        c.net.heal()
        for i in c.ids:
            c.resume(i)
            if i in c.disks:
                c.disks[i].free()
        healer = Nemesis(c, wl, self.rng, say)
        healer.repair()
        if "member" in self.kinds:
            what = healer.restore_members()
            if what:
                say("  membership restored: %s" % "; ".join(what))
        self.findings += healer.findings
        try:
            self.converge()
            self.converge_s = time.monotonic() - healed
            for i in c.ids:
                c.died(i)
        except (TimeoutError, NodeError) as e:
            states = []
            logs = []
            for i in c.ids:
                try:
                    states.append(c.slots[i].request(
                        "SELECT raft_status()", timeout=10)[0][0])
                except NodeError as err:
                    states.append('{"error": "%s"}' % err)
                with open(c.log_path(i), errors="replace") as f:
                    logs.append(f.read())
            parsed = []
            for s in states:
                try:
                    parsed.append(json.loads(s))
                except ValueError:
                    parsed.append({})
            for label in known_causes(parsed, logs):
                self.findings.append(Finding(label, "no convergence after "
                                             "healing: %s" % e))
            for i, s in zip(c.ids, states):
                say("    node %d status: %s" % (i, s[:600]))
            self.results.append(("converged after healing", [str(e)]))
            for i in c.ids:
                c.died(i)
            self.results.append(("no node died on its own", c.deaths))
            return
        self.results.append(("converged after healing", []))
        snaps = {i: checks.snapshot(c.slots[i], c.db_path(i), REQUEST_TIMEOUT)
                 for i in c.ids}
        self.results += checks.check_writes(wl.writes, snaps)
        self.results.append(checks.check_replicas(snaps))
        self.results.append(checks.check_leaders(wl))
        if self.opts.get("hosts") == "netns":
            self.results.append(self.check_cluster_id())
        self.results.append(checks.check_bank(wl, wl.writes, snaps))
        self.results.append(checks.check_plain_reads(wl.writes, snaps))
        codes = c.stop_all()
        self.results.append(("no node died on its own", c.deaths))
        self.results.append(checks.check_logs(c, codes))
        self.errors = checks.log_errors(c)
        # Every writer of the episode loaded raftsql: a node that finds
        # its file changed behind its back is a finding.
        for line in sorted(self.errors):
            if "diverged replica" in line:
                self.findings.append(Finding("new", "a node saw a foreign "
                                             "write: %s" % line))

    def check_cluster_id(self):
        """Every node shows one cluster id, the one the first leader
        made (a check of the hosts mode, as tests/e2e/test_tls_netns.py
        checks it)."""
        seen = {}
        for i in self.cluster.ids:
            seen[i] = self.cluster.slots[i].request(
                "SELECT json_extract(raft_status(), '$.cluster_id')",
                timeout=10)[0][0]
        ids = set(seen.values())
        problems = [] if len(ids) == 1 and None not in ids else [
            "cluster ids by node: %s" % seen]
        return ("one cluster id on every node", problems)

    def final_reads(self, slot):
        """Read every register and every list once more through raft_query
        on slot, after every other operation ended, into the history
        (process "final"): a lost write shows there."""
        h = self.history
        for key in range(1, registers.KEYS + 1):
            op = h.invoke("final", slot.id, "read", None, "final", key)
            out = self.final_request(slot, registers.GET, key)
            h.complete(op, out.type, registers.query_value(out.value)
                       if out.type == "ok" else None, out.error)
        for key in range(1, appends.KEYS + 1):
            mops = [["r", key, None]]
            op = h.invoke("final", slot.id, "txn", mops, "final")
            out = self.final_request(slot, appends.READ % "?1", key)
            h.complete(op, out.type, appends.query_reads(mops, out.value)
                       if out.type == "ok" else None, out.error)
            if out.type == "ok":
                self.final.append(op)
        op = h.invoke("final", slot.id, "clock-read", None, "final")
        out = self.final_request(slot, clock.READ)
        h.complete(op, out.type, clock.query_rows(out.value)
                   if out.type == "ok" else None, out.error)

    def final_request(self, slot, sql, *params):
        """raft_query(sql, *params) on slot, as a paths.Outcome."""
        try:
            return paths.request(slot, REQUEST_TIMEOUT, "SELECT raft_query(?%s)"
                                 % (", ?" * len(params)), sql, *params)
        except paths.NotSent as e:
            return paths.Outcome("fail", error=str(e))

    def check_history(self):
        """Check the episode's history: linearizable registers,
        serializable list-append transactions."""
        ops = history.pair(self.history.events())
        self.ops = history.counts(ops)
        self.recovery = recovery.times(ops, self.heals)
        final = [op for op in ops if op.id in set(self.final)]
        self.results.append(checks.check_registers(ops))
        self.results.append(checks.check_appends(ops, final))
        if self.opts["local"] > 0:
            self.results.append(checks.check_staleness(
                ops, local_reads.MAX_STALENESS_MS))
        self.results.append(checks.check_clock(ops))

    def converge(self):
        c = self.cluster
        leader = [None]

        def one_leader():
            seen = {c.slots[i].request("SELECT raft_leader()",
                                       timeout=10)[0][0] for i in c.ids}
            leader[0] = seen.pop() if len(seen) == 1 else None
            return leader[0] is not None

        self.wait(one_leader, "every node names the same leader")
        self.wait(lambda: c.slots[leader[0]].request(
            "SELECT raft_exec('SELECT 1')", timeout=REQUEST_TIMEOUT) or True,
            "a write through leader %d" % leader[0])
        # Entries of their own: before the commit index every node must
        # reach.
        self.final_reads(c.slots[leader[0]])
        target = c.slots[leader[0]].request(
            "SELECT json_extract(raft_status(), '$.commit')", timeout=10)[0][0]
        for i in c.ids:
            self.wait(lambda: c.slots[i].request(
                "SELECT json_extract(raft_status(), '$.applied')",
                timeout=10)[0][0] >= target,
                "node %d applies index %d" % (i, target))

    def cleanup(self):
        failed = self.failed()
        if self.dir is not None:
            self.history.write(os.path.join(self.dir, "history.jsonl"))
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception as e:
                say("  cleanup: %s" % e)
        if failed and self.dir is not None:
            keep = os.path.join(self.opts["keep"], "seed-%d" % self.seed)
            shutil.rmtree(keep, ignore_errors=True)
            os.makedirs(keep, exist_ok=True)
            for name in os.listdir(self.dir):
                if name.endswith(".log") or name == "history.jsonl":
                    shutil.copy(os.path.join(self.dir, name), keep)
            self.kept = keep
            say("  node logs and history.jsonl kept in %s" % keep)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def failed(self):
        return any(p for _, p in self.results) or bool(self.findings)

    def record(self):
        """What the episode did and found, as a dict that JSON can hold
        (tests/faults/jepsen.py keeps one per line): its seed, nodes and
        kinds; faults by kind; the history's operations by "<f> <type>";
        every check with its problems; the findings; each fault's
        recovery in seconds (None: no write invoked after its heal was
        acknowledged); the convergence time (None: it did not converge);
        the episode's seconds; where it was kept; its replay line."""
        return {
            "seed": self.seed, "nodes": self.opts["nodes"],
            "kinds": list(self.kinds), "count": self.count,
            "faults": dict(self.faults), "ops": dict(self.ops),
            "checks": [[name, list(p)] for name, p in self.results],
            "findings": [str(f) for f in self.findings],
            "recovery": [[kind, s if s != float("inf") else None]
                         for kind, s in self.recovery],
            "converge_s": self.converge_s, "elapsed": self.elapsed,
            "failed": self.failed(), "kept": self.kept,
            "replay": self.replay()}

    def report(self):
        w = self.writes
        passed = sum(1 for _, p in self.results if not p)
        say("faults: episode seed %d: %d faults (%s); writes ok %d, failed "
            "%d, unknown %d; %d terms with a leader seen, %d reads; checks "
            "%d/%d passed" % (
                self.seed, sum(self.faults.values()),
                ", ".join("%s %d" % kv for kv in sorted(self.faults.items())),
                w["ok"], w["failed"], w["unknown"], self.terms, self.reads,
                passed, len(self.results)))
        p = self.plain
        say("  plain writes (among them): ok %d, failed %d, unknown %d (%s); "
            "%d transfers from an empty account rolled back" % (
                p["ok"], p["failed"], p["unknown"],
                ", ".join("%s %d" % kv for kv in
                          sorted(self.plain_kinds.items())),
                self.declined))
        say("  history: %d ops (%s)" % (
            sum(self.ops.values()), ", ".join(
                "%s %d" % kv for kv in sorted(self.ops.items()))))
        if self.recovery:
            k, (kind, s) = max(enumerate(self.recovery),
                               key=lambda r: r[1][1])
            say("  slowest recovery: %.1f s after fault %d (%s) to the "
                "first write acknowledged; converged %s after healing" % (
                    s, k + 1, kind, "in %.1f s" % self.converge_s
                    if self.converge_s is not None else "not"))
        for name, problems in self.results:
            say("  %s %s" % ("ok  " if not problems else "FAIL", name))
            for p in problems:
                say("       %s" % p)
        for (outcome, why), n in sorted(self.reasons.items(),
                                        key=lambda kv: -kv[1]):
            say("  %-7s %5d %s" % (outcome, n, why))
        for line, n in sorted(self.errors.items()):
            say("  log  %dx %s" % (n, line))
        for f in self.findings:
            say("  FOUND %s" % f)
        if self.failed():
            say("FAIL: faults seed %d" % self.seed)
            say("replay: %s" % self.replay())
        return self


def parse_kinds(text, variable="FAULTS_KINDS"):
    """The kinds of the comma-separated text (all of KINDS when empty);
    exits naming variable and the unknown kinds."""
    kinds = [k for k in (text or ",".join(KINDS)).split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        sys.exit("faults: %s: unknown kinds %s (known: %s)" % (
            variable, bad, ",".join(KINDS)))
    return kinds


def options(nodes, keep, hosts="loopback"):
    """The options of an episode (Episode's opts) with nodes per cluster,
    the client counts from the environment, keep the folder that
    receives a failed episode's logs and history, and hosts where the
    nodes run (loopback or netns)."""
    return {"nodes": nodes, "hosts": hosts,
            "clients": env_int("FAULTS_CLIENTS", 3),
            "registers": env_int("FAULTS_REGISTER_CLIENTS", 2),
            "appends": env_int("FAULTS_APPEND_CLIENTS", 2),
            "local": env_int("FAULTS_LOCAL_CLIENTS", 2),
            "clock": env_int("FAULTS_CLOCK_CLIENTS", 2),
            "keep": keep}


def prepare(kinds):
    """Leave out the full-disk fault where no tmpfs can be mounted (saying
    so), exit when the attached writers' library is missing, and turn
    SIGTERM into an exit that cleans up."""
    if "disk" in kinds:
        why = mount_permitted(tempfile.gettempdir())
        if why is not None:
            say("faults: skipping the full-disk fault: cannot mount a "
                "tmpfs (%s)" % why)
            kinds.remove("disk")
    if not os.path.exists(SO):
        sys.exit("faults: no %s for the attached writers (make %s)" % (
            SO, os.path.relpath(SO, ROOT)))
    if "power" in kinds and not os.path.exists(POWERLOSS_SO):
        sys.exit("faults: no %s for the power kind (make %s)" % (
            POWERLOSS_SO, os.path.relpath(POWERLOSS_SO, ROOT)))
    signal.signal(signal.SIGTERM, lambda *a: sys.exit("faults: terminated"))


def host_mode(kinds):
    """FAULTS_HOSTS (loopback or netns; exits otherwise) and the kinds of
    that mode: in netns, the default kinds are those of hosts.KINDS and
    a kind named in FAULTS_KINDS that the mode lacks exits saying why.
    In netns, exits when namespaces cannot be made here, and removes what
    an earlier killed run left."""
    mode = os.environ.get("FAULTS_HOSTS") or "loopback"
    if mode not in ("loopback", "netns"):
        sys.exit("faults: FAULTS_HOSTS=%s: loopback or netns" % mode)
    if mode == "loopback":
        return mode, kinds
    import hosts
    from netns import Netns
    try:
        kinds = hosts.mode_kinds(kinds, bool(os.environ.get("FAULTS_KINDS")))
    except ValueError as e:
        sys.exit("faults: FAULTS_KINDS: %s" % e)
    why = Netns.unavailable()
    if why is not None:
        sys.exit("faults: FAULTS_HOSTS=netns: %s" % why)
    hosts.sweep(say, tempfile.gettempdir())
    return mode, kinds


def main():
    seed = env_int("FAULTS_SEED", int(time.time()) % 1000000)
    count = env_int("FAULTS_COUNT", 200)
    seconds = env_int("FAULTS_S", 1800)
    per = env_int("FAULTS_EPISODE", 25)
    mode, kinds = host_mode(parse_kinds(os.environ.get("FAULTS_KINDS")))
    opts = options(node_count(), os.environ.get("FAULTS_KEEP") or
                   os.path.join(ROOT, "build", "faults"), mode)
    say("faults: seed %d, %d faults (%d per episode), at most %d s, kinds "
        "%s, %d nodes%s, node %s" % (
            seed, count, per, seconds, ",".join(kinds), opts["nodes"],
            ", each on a host of its own (network namespaces, TLS)"
            if mode == "netns" else "", NODE))
    prepare(kinds)
    deadline = time.monotonic() + seconds
    episodes = []
    done = 0
    k = 0
    while done < count and time.monotonic() < deadline:
        n = min(per, count - done)
        ep = Episode(seed + k, n, kinds, deadline, opts).run()
        episodes.append(ep)
        done += sum(ep.faults.values())
        k += 1
        if not ep.faults:
            break
    total = collections.Counter()
    writes = collections.Counter()
    plain = collections.Counter()
    ops = collections.Counter()
    for ep in episodes:
        ops.update(ep.ops)
        total.update(ep.faults)
        writes.update(ep.writes)
        plain.update(ep.plain)
    terms = sum(ep.terms for ep in episodes)
    reads = sum(ep.reads for ep in episodes)
    passed = sum(1 for ep in episodes for _, p in ep.results if not p)
    failed = sum(1 for ep in episodes for _, p in ep.results if p)
    bad = [ep for ep in episodes if ep.failed()]
    say("faults: seed %d: %d faults in %d episodes (%s); writes ok %d, "
        "failed %d, unknown %d (plain: ok %d, failed %d, unknown %d); %d "
        "terms with a leader seen, %d reads; checks %d passed, %d failed; "
        "%d episodes failed" % (
            seed, sum(total.values()), len(episodes),
            ", ".join("%s %d" % kv for kv in sorted(total.items())),
            writes["ok"], writes["failed"], writes["unknown"], plain["ok"],
            plain["failed"], plain["unknown"], terms, reads, passed, failed,
            len(bad)))
    say("faults: history: %d ops (%s)" % (
        sum(ops.values()), ", ".join("%s %d" % kv
                                     for kv in sorted(ops.items()))))
    for name in ("register history linearizable",
                 "list-append history serializable",
                 "local reads within max_staleness_ms",
                 "raft_exec's \"now\" never runs backwards"):
        verdicts = [not p for ep in episodes for n, p in ep.results
                    if n.startswith(name)]
        say("faults: %s: %d of %d episodes" % (name, sum(verdicts),
                                                len(verdicts)))
    for ep in bad:
        labels = sorted({f.label for f in ep.findings}) or ["check failed"]
        say("  failed: seed %d (%s): replay: %s" % (
            ep.seed, "; ".join(labels), ep.replay()))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
