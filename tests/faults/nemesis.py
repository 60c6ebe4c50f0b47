"""The faults: each one applied, held for a drawn time, then healed.

Every choice comes from the run's seeded generator; which node is the
leader (targeted half of the time) comes from the monitors, so a replay
repeats the schedule of kinds, links and times, not every interleaving.
"""

import json
import time

from nodes import NodeError
from workload import BULK

KINDS = ("partition", "oneway", "drop", "delay", "loss", "hold", "reset",
         "pause", "kill", "disk", "member", "clock")

# A node whose disk was freed must take writes again within this time.
DISK_RECOVER_S = 15.0
# Membership: a change is retried for this long (one change at a time,
# no leader during an election, outcome unknown), and restoring every
# node as a voter must be done within MEMBERS_RESTORE_S.
MEMBER_CALL_S = 10.0
MEMBERS_RESTORE_S = 60.0
# Refusals that another try would only repeat (an earlier try of unknown
# outcome may have done the change).
FINAL_ANSWERS = ("not a member", "is the last voter", "already")


class Finding:
    """Something a fault showed that is not a check: label names a known
    cause ("known: <what>"), or is "new"."""

    def __init__(self, label, text):
        self.label = label
        self.text = text

    def __str__(self):
        return "%s: %s" % (self.label, self.text)


class Nemesis:
    """Applies faults to cluster (a FaultCluster) while workload runs."""

    def __init__(self, cluster, workload, rng, say):
        self.cluster = cluster
        self.wl = workload
        self.rng = rng
        self.say = say
        self.findings = []
        self.disk_effects = 0
        self.n_bulk = 0

    def run(self, kind):
        """Apply one fault of kind, hold it, heal it; return what it was."""
        return getattr(self, "_" + kind)()

    # ---- Helpers ---------------------------------------------------------

    def target(self):
        """The leader half of the time (when one is known), else any node."""
        leader = self.wl.leader()
        pick = self.rng.choice(self.cluster.ids)
        if self.rng.random() < 0.5 and leader is not None:
            return leader
        return pick

    def links_of(self, x, way):
        ids = self.cluster.ids
        out = [(x, y) for y in ids if y != x]
        into = [(y, x) for y in ids if y != x]
        return {"out": out, "in": into, "both": out + into}[way]

    def restart(self, i, attempts=20):
        """Start node i again; retry while raft_start fails."""
        for k in range(attempts):
            try:
                self.cluster.start(i)
                return True
            except NodeError as e:
                self.say("    restart of node %d failed: %s" % (i, e))
                time.sleep(0.5)
        self.findings.append(Finding("new", "node %d does not restart" % i))
        return False

    def repair(self):
        """Restart nodes that died on their own (recorded by the cluster),
        whose pipe is out of step (a request that never returned, recorded
        as stuck) or that are down."""
        for i, slot in self.cluster.slots.items():
            node = slot.node
            if self.cluster.died(i):
                self.say("    node %d died on its own: restart" % i)
                self.cluster.kill(i)
            elif node is not None and node.desync:
                self.say("    node %d did not answer: kill -9 and restart" %
                         i)
                self.cluster.kill(i)
            if self.cluster.slots[i].node is None:
                self.restart(i)

    # ---- Network faults --------------------------------------------------

    def _partition(self):
        ids = self.cluster.ids
        x = self.target()
        side = {x}
        if len(ids) >= 5 and self.rng.random() < 0.5:
            side.add(self.rng.choice([i for i in ids if i != x]))
        rest = [i for i in ids if i not in side]
        pairs = [(a, b) for a in side for b in rest]
        pairs += [(b, a) for a, b in pairs]
        mode = self.rng.choice(("cut", "drop"))
        d = self.rng.uniform(0.5, 4.0)
        self.cluster.net.set(pairs, mode)
        time.sleep(d)
        self.cluster.net.heal()
        return "%s | %s (%s) for %.1f s" % (sorted(side), rest, mode, d)

    def _oneway(self):
        x = self.target()
        way = self.rng.choice(("out", "in", "one"))
        if way == "one":
            pairs = [(x, self.rng.choice([i for i in self.cluster.ids
                                          if i != x]))]
        else:
            pairs = self.links_of(x, way)
        d = self.rng.uniform(0.5, 3.0)
        self.cluster.net.set(pairs, "cut")
        time.sleep(d)
        self.cluster.net.heal()
        return "cut %s for %.1f s" % (pairs, d)

    def _drop(self):
        links = sorted(self.cluster.net.links)
        pairs = self.rng.sample(links, self.rng.randint(1, len(links)))
        d = self.rng.uniform(0.5, 3.0)
        self.cluster.net.set(pairs, "drop")
        time.sleep(d)
        self.cluster.net.heal()
        return "black hole on %d links %s for %.1f s" % (len(pairs),
                                                         sorted(pairs), d)

    def every_or_node(self, ways):
        """(links, what): every link half of the time, else the links of
        one node (target()) one of ways."""
        if self.rng.random() < 0.5:
            return sorted(self.cluster.net.links), "every link"
        x = self.target()
        way = self.rng.choice(ways)
        return self.links_of(x, way), "links of node %d (%s)" % (x, way)

    def _delay(self):
        pairs, where = self.every_or_node(("both",))
        delay = self.rng.uniform(0.02, 0.4)
        jitter = self.rng.uniform(0, 0.1)
        d = self.rng.uniform(1.0, 4.0)
        self.cluster.net.set(pairs, "up", delay, jitter)
        time.sleep(d)
        self.cluster.net.heal()
        return "%.0f+%.0f ms on %s for %.1f s" % (delay * 1000,
                                                   jitter * 1000, where, d)

    def _loss(self):
        """Packet loss: every link, or a node's, loses 5-30 % of its chunks
        (each late by a retransmission timeout, net.py), over 0-20 ms of
        delay."""
        pairs, where = self.every_or_node(("out", "in", "both"))
        loss = self.rng.uniform(0.05, 0.3)
        delay = self.rng.uniform(0, 0.02)
        d = self.rng.uniform(1.0, 4.0)
        self.cluster.net.set(pairs, "up", delay, 0.0, loss)
        time.sleep(d)
        self.cluster.net.heal()
        return "%.0f %% loss over %.0f ms on %s for %.1f s" % (
            loss * 100, delay * 1000, where, d)

    def _hold(self):
        x = self.target()
        way = self.rng.choice(("out", "in", "both"))
        pairs = self.links_of(x, way)
        d = self.rng.uniform(0.3, 3.0)
        self.cluster.net.set(pairs, "hold")
        time.sleep(d)
        self.cluster.net.heal()
        return "hold %s of node %d for %.1f s, then release" % (way, x, d)

    def _reset(self):
        links = sorted(self.cluster.net.links)
        d = self.rng.uniform(1.0, 3.0)
        end = time.monotonic() + d
        n = 0
        while time.monotonic() < end:
            self.cluster.net.reset(self.rng.sample(
                links, self.rng.randint(1, len(links))))
            n += 1
            time.sleep(self.rng.uniform(0.05, 0.4))
        return "%d rounds of connection resets over %.1f s" % (n, d)

    # ---- Process faults --------------------------------------------------

    def _pause(self):
        x = self.target()
        d = self.rng.uniform(0.2, 3.0)
        self.cluster.pause(x)
        time.sleep(d)
        self.cluster.resume(x)
        return "SIGSTOP node %d for %.1f s" % (x, d)

    def _kill(self):
        x = self.target()
        d = self.rng.uniform(0.0, 2.0)
        self.cluster.kill(x)
        time.sleep(d)
        self.restart(x)
        return "kill -9 node %d, restarted after %.1f s" % (x, d)

    # ---- Clocks ----------------------------------------------------------

    def _clock(self):
        """A node's wall clock (the "now" it stamps as leader) jumps by up
        to 3 s either way, stays skewed 1-4 s, then jumps back to the
        machine's."""
        x = self.target()
        offset = self.rng.choice((-1, 1)) * self.rng.randint(200, 3000)
        d = self.rng.uniform(1.0, 4.0)
        self.cluster.set_clock(x, offset)
        time.sleep(d)
        self.cluster.set_clock(x, 0)
        return "node %d's clock %+d ms for %.1f s" % (x, offset, d)

    # ---- Full disk -------------------------------------------------------

    def _disk(self):
        x = self.target()
        disk = self.cluster.disks[x]
        d = self.rng.uniform(0.5, 3.0)
        filled = disk.fill()
        errors = set()
        end = time.monotonic() + d
        n_bulk = 0
        while time.monotonic() < end:
            time.sleep(0.1)
            if n_bulk < 6:
                # A few large entries, so that the full log must grow.
                n_bulk += 1
                key = "bulk-%d" % (self.n_bulk + n_bulk)
                pad = self.rng.randbytes(1024 * self.rng.randint(16, 64))
                self.wl.attempt(
                    self.cluster.slots[self.rng.choice(self.cluster.ids)],
                    key, "bulk", None, BULK, (key, {"blob": pad.hex()}))
            st = self.status(x)
            if st is not None:
                for field in ("last_error", "apply_error"):
                    if st.get(field):
                        errors.add(st[field][:160])
                if st.get("log_full"):
                    errors.add("log_full")
        disk.free()
        self.n_bulk += n_bulk
        what = ("fill node %d's log disk (%d KiB of ballast) for %.1f s, "
                "%d large writes" % (x, filled >> 10, d, n_bulk))
        if errors:
            self.disk_effects += 1
            what += "; status showed: %s" % "; ".join(sorted(errors))
        if not self.recovers(x):
            self.findings.append(Finding(
                "known: a full disk needs a restart",
                "node %d takes no write %.0f s after its log disk was freed "
                "(%s); restarted it" % (x, DISK_RECOVER_S, what)))
            self.cluster.kill(x)
            self.restart(x)
            what += "; DID NOT RECOVER, restarted"
        return what

    def status(self, i, timeout=10.0):
        """Node i's raft_status() as a dict, None when it cannot answer."""
        slot = self.cluster.slots[i]
        if slot.node is None or slot.paused:
            return None
        try:
            return json.loads(slot.request("SELECT raft_status()",
                                           timeout=timeout)[0][0])
        except NodeError:
            return None

    def recovers(self, i):
        """Whether a no-op write through node i succeeds before
        DISK_RECOVER_S."""
        end = time.monotonic() + DISK_RECOVER_S
        while time.monotonic() < end:
            try:
                self.cluster.slots[i].request(
                    "SELECT raft_exec('SELECT 1')",
                    timeout=DISK_RECOVER_S + 20)
                return True
            except NodeError:
                time.sleep(0.2)
        return False

    # ---- Membership ------------------------------------------------------

    def live_slots(self):
        """The slots of the nodes up and not paused, the leader's
        first."""
        leader = self.wl.leader()
        return [self.cluster.slots[i] for i in sorted(
            self.cluster.ids, key=lambda i: i != leader)
            if self.cluster.slots[i].node is not None and
            not self.cluster.slots[i].paused]

    def members(self):
        """{id: role} of the configuration in force, as the first live
        node that answers sees it (raft_members), the leader first; None
        when none answers."""
        for slot in self.live_slots():
            try:
                rows = slot.request("SELECT id, role FROM raft_members",
                                    timeout=10)
            except NodeError:
                continue
            if rows:
                return dict((r[0], r[1]) for r in rows)
        return None

    def change(self, sql, *params):
        """Run the membership change sql on the first live node (the
        leader when known) until one answers it, for up to MEMBER_CALL_S; return its answer
        after the errors of the tries before ("failed: <error> -> ..."):
        a try of unknown outcome may have applied, and the next then
        answers "not a member"."""
        end = time.monotonic() + MEMBER_CALL_S
        last = "no live node"
        tried = []      # the errors of earlier tries, shown with the last
        while time.monotonic() < end:
            slots = self.live_slots()
            if slots:
                try:
                    answer = slots[0].request(sql, *params, timeout=30)[0][0]
                    return " -> ".join(tried[-2:] + [answer])
                except NodeError as e:
                    last = "failed: %s" % e
                    tried.append(last)
                    if any(s in last for s in FINAL_ANSWERS):
                        return " -> ".join(tried[-3:])
            time.sleep(0.2)
        return " -> ".join(tried[-3:]) or "failed: " + last

    def add_back(self, i):
        """raft_add node i at its address (it keeps its files); it is
        promoted to voter once caught up."""
        return self.change("SELECT raft_add(?, ?)", i,
                           "127.0.0.1:%d" % self.cluster.real[i])

    def restore_members(self):
        """Make every node a voter again (add back the removed, promote
        the learners); a Finding when it is not done within
        MEMBERS_RESTORE_S. Returns what it did."""
        end = time.monotonic() + MEMBERS_RESTORE_S
        done = []
        while time.monotonic() < end:
            m = self.members()
            if m is not None and all(m.get(i) == "voter"
                                     for i in self.cluster.ids):
                return done
            for i in self.cluster.ids:
                if m is None:
                    break
                if i not in m:
                    done.append("add %d: %s" % (i, self.add_back(i)))
                elif m[i] == "learner":
                    done.append("promote %d: %s" % (i, self.change(
                        "SELECT raft_promote(?)", i)))
            time.sleep(0.3)
        self.findings.append(Finding("new", "membership not restored within "
                                     "%.0f s: %s (%s)" % (
                                         MEMBERS_RESTORE_S, self.members(),
                                         "; ".join(done[-4:]))))
        return done

    def _member(self):
        """A membership change that stays while the next faults run: when
        a node is out of the voters (removed, or a learner), it is brought
        back; otherwise one node is removed or demoted, or the leadership
        is transferred. At most one node is ever out, so a majority of
        the voters of the whole cluster remains."""
        m = self.members()
        if m is None:
            return "no node answers raft_members: nothing changed"
        out = [i for i in self.cluster.ids if m.get(i) != "voter"]
        if out:
            return "restore %s: %s" % (out, "; ".join(
                self.restore_members()))
        action = self.rng.choice(("remove", "demote", "transfer"))
        x = self.target()
        if action == "transfer":
            y = self.rng.choice(self.cluster.ids)
            return "raft_transfer(%d): %s" % (y, self.change(
                "SELECT raft_transfer(?)", y))
        sql = "SELECT raft_remove(?)" if action == "remove" else \
            "SELECT raft_demote(?)"
        return "raft_%s(%d): %s" % (action, x, self.change(sql, x))
