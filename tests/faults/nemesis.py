"""The faults: each one applied, held for a drawn time, then healed.

Every choice comes from the run's seeded generator; which node is the
leader (targeted half of the time) comes from the monitors, so a replay
repeats the schedule of kinds, links and times, not every interleaving.
Each fault draws from a generator of its own (fault_plan), so that one
whose draws depend on the cluster leaves the faults after it as they
were.
"""

import json
import random
import time

import powerloss
from nodes import NodeError
from workload import BULK

KINDS = ("partition", "oneway", "drop", "delay", "loss", "hold", "reset",
         "pause", "kill", "disk", "member", "clock", "asym", "bridge",
         "power")

# Cluster sizes the faults are made for: a fault takes down, stops or cuts
# off at most minority(n) nodes at once, so a quorum remains.
NODE_COUNTS = (3, 5)


def fault_plan(rng, kinds):
    """The next fault of an episode's schedule, from the schedule's
    random.Random rng: (the pause before it, s; its kind, one of kinds;
    a random.Random of its own). The fault draws what it needs (its
    target, length, the size of its writes) from its own generator, so
    that a fault whose draws depend on what the cluster did (a full
    disk's large writes go on while the disk is full) leaves the next
    faults of the schedule as they were: a seed replays the same
    schedule."""
    pause = rng.uniform(0.2, 1.2)
    kind = rng.choice(kinds)
    return pause, kind, random.Random(rng.getrandbits(64))


def minority(n):
    """The largest number of the n voters that may be down with a quorum
    left: 1 of 3, 2 of 5."""
    return (n - 1) // 2


def cut_between(side, rest):
    """The directed links (a, b) between the nodes of side and those of
    rest, both ways."""
    pairs = [(a, b) for a in side for b in rest]
    return pairs + [(b, a) for a, b in pairs]


def asym_pairs(sender, receiver):
    """An asymmetric partition: the links to cut so that every node of
    sender can still send to every node of receiver, but none of receiver
    to any of sender (each link (a, b) carries a's messages to b, and b's
    answers come back on b's link (b, a))."""
    return [(b, a) for a in sender for b in receiver]


def bridge_pairs(ids, bridge, rng):
    """A bridge partition of ids around the node bridge: the others split
    into two halves that cannot reach each other, both ways, while both
    reach bridge and bridge reaches them. With 5 nodes, two halves of two
    (each half with bridge is a majority); with 3, the two others each
    see only bridge (a majority, bridge and either one, sees everyone).
    Returns (the links to cut; the two halves, without bridge)."""
    others = [i for i in ids if i != bridge]
    rng.shuffle(others)
    half = len(others) // 2
    left, right = sorted(others[:half]), sorted(others[half:])
    return cut_between(left, right), (left, right)

# A node whose disk was freed must take writes again within this time.
DISK_RECOVER_S = 15.0
# What a node removed from the cluster answers a write (docs/errors.md,
# RAFTSQL_REMOVED): then no write through it can show it recovered.
REMOVED = "this node was removed from the cluster"
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

    def targets(self):
        """1 to minority(n) distinct nodes, the first one target()."""
        x = self.target()
        most = minority(len(self.cluster.ids))
        if most == 1:
            return [x]  # no draw: 3-node schedules as before
        others = [i for i in self.cluster.ids if i != x]
        return [x] + self.rng.sample(others, self.rng.randint(1, most) - 1)

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
        side = set(self.targets())
        rest = [i for i in self.cluster.ids if i not in side]
        pairs = cut_between(side, rest)
        mode = self.rng.choice(getattr(self.cluster.net, "PARTITION_MODES",
                                       ("cut", "drop")))
        d = self.rng.uniform(0.5, 4.0)
        if mode in ("down", "unplug"):
            # Hosts (hosts.py): each node of side on its own, link down.
            self.cluster.net.isolate(sorted(side), mode)
            what = "%s %s (link %s)" % (sorted(side), "each alone" if
                                        len(side) > 1 else "alone", mode)
        else:
            self.cluster.net.set(pairs, mode)
            what = "%s | %s (%s)" % (sorted(side), rest, mode)
        time.sleep(d)
        self.cluster.net.heal()
        return "%s for %.1f s" % (what, d)

    def _asym(self):
        """An asymmetric partition: a minority (1 to minority(n) nodes, the
        leader half of the time) can send to the majority but hears
        nothing from it, or the other way round."""
        side = sorted(self.targets())
        rest = [i for i in self.cluster.ids if i not in side]
        if self.rng.random() < 0.5:
            sender, receiver = side, rest
        else:
            sender, receiver = rest, side
        mode = self.rng.choice(("cut", "drop"))
        d = self.rng.uniform(0.5, 4.0)
        self.cluster.net.set(asym_pairs(sender, receiver), mode)
        time.sleep(d)
        self.cluster.net.heal()
        return "%s -> %s only (%s) for %.1f s" % (sender, receiver, mode, d)

    def _bridge(self):
        """A bridge partition around target(): two sides that cannot
        reach each other, both reaching the bridge node (with 3 nodes one
        side is a single node, which sees only the bridge)."""
        bridge = self.target()
        pairs, (left, right) = bridge_pairs(self.cluster.ids, bridge,
                                            self.rng)
        mode = self.rng.choice(("cut", "drop"))
        d = self.rng.uniform(0.5, 4.0)
        self.cluster.net.set(pairs, mode)
        time.sleep(d)
        self.cluster.net.heal()
        return "%s | %d | %s (%s) for %.1f s" % (left, bridge, right, mode,
                                                 d)

    def one_way_links(self):
        """The links of one way: those out of target(), those into it,
        or one link out of it (drawn in that order)."""
        x = self.target()
        way = self.rng.choice(("out", "in", "one"))
        if way == "one":
            return [(x, self.rng.choice([i for i in self.cluster.ids
                                         if i != x]))]
        return self.links_of(x, way)

    def _oneway(self):
        pairs = self.one_way_links()
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
        """Delay: every link, or a node's both ways, 20-400 ms (plus up
        to 100 ms of jitter); one time in three a slow link in one
        direction instead (_slow)."""
        if self.rng.random() < 1 / 3:
            return self._slow()
        pairs, where = self.every_or_node(("both",))
        delay = self.rng.uniform(0.02, 0.4)
        jitter = self.rng.uniform(0, 0.1)
        d = self.rng.uniform(1.0, 4.0)
        self.cluster.net.set(pairs, "up", delay, jitter)
        time.sleep(d)
        self.cluster.net.heal()
        return "%.0f+%.0f ms on %s for %.1f s" % (delay * 1000,
                                                   jitter * 1000, where, d)

    def _slow(self):
        """A link slow in one direction only: a node's links out, or in,
        or one link, 0.6-2 s late (longer than the election timeout and
        than max_staleness_ms), while the way back is quick. A node whose
        leader's messages come late must count their transit time in its
        staleness, and a leader whose followers' answers come late must
        not count them as contact of now."""
        pairs = self.one_way_links()
        delay = self.rng.uniform(0.6, 2.0)
        d = self.rng.uniform(2.0, 5.0)
        self.cluster.net.set(pairs, "up", delay)
        time.sleep(d)
        self.cluster.net.heal()
        return "one-way slow: %.0f ms on %s for %.1f s" % (delay * 1000,
                                                           pairs, d)

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
        xs = self.targets()
        d = self.rng.uniform(0.2, 3.0)
        for x in xs:
            self.cluster.pause(x)
        time.sleep(d)
        for x in xs:
            self.cluster.resume(x)
        return "SIGSTOP node%s %s for %.1f s" % (
            "s" if len(xs) > 1 else "", ", ".join(map(str, xs)), d)

    def _kill(self):
        xs = self.targets()
        d = self.rng.uniform(0.0, 2.0)
        for x in xs:
            self.cluster.kill(x)
        time.sleep(d)
        for x in xs:
            self.restart(x)
        return "kill -9 node%s %s, restarted after %.1f s" % (
            "s" if len(xs) > 1 else "", ", ".join(map(str, xs)), d)

    # ---- Power loss ------------------------------------------------------

    def _power(self):
        """A node's machine loses power: its processes die (kill -9) and
        every change to its files not yet fsynced is undone (powerloss.py,
        the cluster runs its nodes under the shim), then it restarts."""
        x = self.target()
        d = self.rng.uniform(0.0, 2.0)
        try:
            what = self.cluster.power_fail(x)
        except powerloss.JournalError as e:
            self.findings.append(Finding("new", "power loss on node %d: "
                                         "no restore: %s" % (x, e)))
            what = "NOT RESTORED: %s" % e
        time.sleep(d)
        self.restart(x)
        return "power loss on node %d (%s), restarted after %.1f s" % (
            x, what, d)

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
        recovered = self.recovers(x)
        if recovered == REMOVED:
            what += "; node %d is removed from the cluster: no write " \
                "through it to check with" % x
        elif not recovered:
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
        DISK_RECOVER_S; REMOVED when node i answers that it was removed
        from the cluster (a member fault: it takes no write at all)."""
        end = time.monotonic() + DISK_RECOVER_S
        while time.monotonic() < end:
            try:
                self.cluster.slots[i].request(
                    "SELECT raft_exec('SELECT 1')",
                    timeout=DISK_RECOVER_S + 20)
                return True
            except NodeError as e:
                if REMOVED in str(e):
                    return REMOVED
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
        """Run the membership change sql on a live node (the leader when
        known first, then each other in turn after a failed try: the
        workload's leader may be a removed node, which never finds one)
        until one answers it, for up to MEMBER_CALL_S; return its answer
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
                    answer = slots[len(tried) % len(slots)].request(
                        sql, *params, timeout=30)[0][0]
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
                           self.cluster.address(i))

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
