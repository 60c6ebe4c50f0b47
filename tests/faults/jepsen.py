"""The long fault campaign (make jepsen): every fault kind, on 3-node and
5-node clusters, until each kind was injected JEPSEN_FAULTS times on each
size, with the fault suite's workloads and checkers (tests/faults/run.py:
registers checked for linearizability, list-append transactions for
serializability, the bank's raft_exec and plain transfers for its
invariant, the bounded-stale local reads and "now" beside them).

Usage: RAFTSQL_TESTHOST=build/san/raftsql-testhost \\
       /usr/bin/python3 tests/faults/jepsen.py [--table]

The campaign is a series of episodes (run.py's Episode). Each one takes the
cluster size with the most faults still to inject, and draws its faults
among the kinds that size still lacks. After each episode its record (what
Episode.record() returns) is appended to JEPSEN_RECORD, a file in the
repository (tests/faults/campaign/<mode>.jsonl: the campaign takes days,
longer than a machine lasts; commit it), so the campaign resumes where it
stopped: run it again and it goes on with the next seed until no kind
lacks a fault; stopping it (^C, SIGTERM, or JEPSEN_S) loses at most the
episode under way. It prints the summary table of every record at the
end, also when stopped; --table prints it without running anything.
Remove JEPSEN_RECORD (make jepsen-clean) to start a new campaign.

A failed episode (a check failed, or a finding) keeps its node logs and
history.jsonl in JEPSEN_DIR/suspicious/seed-<S>/, and the table lists it
with its replay line. Once its cause is fixed (with a test that
reproduces it and fails on the old code), a line in JEPSEN_FIXED names
the seed, the fixing commit and what it was; the table then says "fixed
in <commit>" beside it, and it no longer fails the campaign's exit code
(the record itself is never rewritten: the episode did fail on the code
it ran).

Environment (all optional):
  JEPSEN_FAULTS   faults of each kind on each cluster size (default 1000)
  JEPSEN_NODES    the cluster sizes, comma-separated (default 3,5)
  JEPSEN_KINDS    comma-separated kinds (default: every nemesis.KINDS)
  JEPSEN_EPISODE  faults per episode (default 25)
  JEPSEN_S        stop injecting after this many seconds of this run
                  (default: no bound); the episode under way is checked
  JEPSEN_SEED     seed of a new campaign's first episode (default: the
                  time); a resumed campaign takes the seed after its last
  JEPSEN_HOSTS    loopback (default: every node on 127.0.0.1) or netns
                  (each node on a host of its own: network namespaces on
                  a bridge, peers over TLS, as make faults-netns; root
                  only; the default kinds are then those of hosts.KINDS)
  JEPSEN_RECORD   the episodes' records, one JSON object a line
                  (default tests/faults/campaign/loopback.jsonl, or
                  netns.jsonl with JEPSEN_HOSTS=netns: a campaign of each
                  mode of its own)
  JEPSEN_DIR      the suspicious episodes' histories and logs (default
                  build/jepsen, build/jepsen-netns with JEPSEN_HOSTS=netns)
  JEPSEN_FIXED    the failed episodes whose cause is fixed, one JSON
                  object a line: {"seed": S, "fix": "<commit>", "what":
                  "<the cause>"} (default: the record's path with
                  -fixed.jsonl for .jsonl)
and run.py's client counts (FAULTS_CLIENTS, ...).

Exits 0 when every recorded episode that failed is listed as fixed, 1
otherwise, 2 on bad settings (or a JEPSEN_FIXED line that is not such an
object, or names a seed the record does not hold as failed), 130 when
stopped by a signal.
"""

import collections
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import history  # noqa: E402
import run  # noqa: E402
from nemesis import NODE_COUNTS  # noqa: E402

# The fewest faults an episode injects (fewer when JEPSEN_EPISODE is
# lower): an episode of one fault made about 90 operations, too few for
# every path a check wants taken (seed 27028: no ok register write
# through plain-host), so the last episodes may overshoot the target.
MIN_EPISODE = 10
# The fields of a record (run.Episode.record()) that the campaign reads.
FIELDS = ("seed", "nodes", "faults", "ops", "checks", "findings",
          "recovery", "converge_s", "elapsed", "failed", "kept", "replay")
SUSPICIOUS = "suspicious"


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def settings(environ):
    """The campaign's settings from environ (a dict of strings): faults
    per kind and size, sizes, kinds, faults per episode, seconds (None: no
    bound), first seed (None: the time), hosts mode, folder. Raises
    ValueError naming the variable that is wrong."""
    def integer(name, default, least):
        text = environ.get(name) or str(default)
        try:
            value = int(text)
        except ValueError:
            raise ValueError("%s=%r is not an integer" % (name, text))
        if value < least:
            raise ValueError("%s=%d: at least %d" % (name, value, least))
        return value

    sizes = []
    for part in (environ.get("JEPSEN_NODES") or "3,5").split(","):
        try:
            n = int(part)
        except ValueError:
            n = None
        if n not in NODE_COUNTS:
            raise ValueError("JEPSEN_NODES: %r is not a cluster size (%s)" % (
                part, " or ".join(map(str, NODE_COUNTS))))
        if n not in sizes:
            sizes.append(n)
    kinds = [k for k in (environ.get("JEPSEN_KINDS") or ",".join(
        run.KINDS)).split(",") if k]
    bad = [k for k in kinds if k not in run.KINDS]
    if bad:
        raise ValueError("JEPSEN_KINDS: unknown kinds %s (known: %s)" % (
            bad, ",".join(run.KINDS)))
    mode = environ.get("JEPSEN_HOSTS") or "loopback"
    if mode not in ("loopback", "netns"):
        raise ValueError("JEPSEN_HOSTS=%r: loopback or netns" % mode)
    if mode == "netns":
        import hosts
        try:
            kinds = hosts.mode_kinds(kinds,
                                     bool(environ.get("JEPSEN_KINDS")))
        except ValueError as e:
            raise ValueError("JEPSEN_KINDS: %s" % e)
    seconds = environ.get("JEPSEN_S")
    seed = environ.get("JEPSEN_SEED")
    cfg = {
        "faults": integer("JEPSEN_FAULTS", 1000, 1),
        "sizes": sizes, "kinds": kinds,
        "episode": integer("JEPSEN_EPISODE", 25, 1),
        "seconds": integer("JEPSEN_S", 0, 1) if seconds else None,
        "seed": integer("JEPSEN_SEED", 0, 0) if seed else None,
        "hosts": mode,
        "dir": environ.get("JEPSEN_DIR") or os.path.join(
            run.ROOT, "build", "jepsen" if mode == "loopback" else
            "jepsen-" + mode),
        "record": environ.get("JEPSEN_RECORD") or os.path.join(
            run.ROOT, "tests", "faults", "campaign", mode + ".jsonl")}
    cfg["fixed"] = environ.get("JEPSEN_FIXED") or (
        cfg["record"][:-len(".jsonl")] if cfg["record"].endswith(".jsonl")
        else cfg["record"]) + "-fixed.jsonl"
    return cfg


def load(path):
    """The records of the file @path, in order ([] when there is none).
    Raises ValueError naming the line that is not JSON, or the record that
    lacks a field the table needs."""
    if not os.path.exists(path):
        return []
    records = history.load(path)  # one JSON object a line
    for n, rec in enumerate(records, 1):
        missing = [k for k in FIELDS if k not in rec]
        if missing:
            raise ValueError("%s: record %d lacks %s" % (
                path, n, ", ".join(missing)))
    return records


def load_fixed(path, records):
    """{seed: {"seed", "fix", "what"}} of the file @path ({} when there is
    none): the failed episodes of @records whose cause is fixed. Raises
    ValueError naming the line that is not such an object, or whose seed
    is no failed episode of the records."""
    if not os.path.exists(path):
        return {}
    failed = {r["seed"] for r in records if r["failed"]}
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                fx = json.loads(line)
            except ValueError as e:
                raise ValueError("%s: line %d is not JSON (%s)" % (path, n,
                                                                   e))
            if (not isinstance(fx, dict) or
                    not isinstance(fx.get("seed"), int) or
                    not isinstance(fx.get("fix"), str) or not fx["fix"] or
                    not isinstance(fx.get("what"), str) or not fx["what"]):
                raise ValueError('%s: line %d is not {"seed": S, "fix": '
                                 '"<commit>", "what": "<the cause>"}' % (
                                     path, n))
            if fx["seed"] not in failed:
                raise ValueError("%s: line %d: seed %d is no failed "
                                 "episode of the record" % (path, n,
                                                            fx["seed"]))
            out[fx["seed"]] = fx
    return out


def unfixed(records, fixed):
    """The failed records whose seed @fixed (load_fixed) does not hold."""
    return [r for r in records if r["failed"] and r["seed"] not in fixed]


def append(path, rec):
    """Append rec to the file @path (its folder made if missing), on disk
    before it returns."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def injected(records, nodes):
    """{kind: faults injected} over the records of clusters of nodes."""
    total = collections.Counter()
    for rec in records:
        if rec["nodes"] == nodes:
            total.update(rec["faults"])
    return total


def lacking(records, cfg):
    """{size: {kind: faults still to inject}} (kinds lacking none left
    out)."""
    out = {}
    for n in cfg["sizes"]:
        done = injected(records, n)
        out[n] = {k: cfg["faults"] - done[k] for k in cfg["kinds"]
                  if done[k] < cfg["faults"]}
    return out


def next_episode(records, cfg):
    """(size, kinds, fault count) of the next episode, None when no kind
    lacks a fault: the size with the most faults to inject (the smaller
    on a tie), the kinds it lacks, at most cfg["episode"] faults and at
    least MIN_EPISODE (or cfg["episode"] if lower), even when fewer
    lack."""
    todo = lacking(records, cfg)
    size = max(cfg["sizes"], key=lambda n: (sum(todo[n].values()), -n))
    left = todo[size]
    if not left:
        return None
    return size, sorted(left, key=cfg["kinds"].index), min(
        cfg["episode"], max(MIN_EPISODE, sum(left.values())))


def check_name(name):
    """A check's name without the figures run.py puts in it."""
    return name.split(" (")[0]


def seconds(s):
    return "-" if s is None else "%.1f s" % s


def table(records, cfg, fixed=None):
    """The summary table of the records (a list of lines): faults by kind
    with the slowest recovery, operations by outcome, checker verdicts,
    the suspicious episodes (those @fixed holds, load_fixed, said fixed),
    and the time the rest will take."""
    fixed = fixed or {}
    sizes = sorted({r["nodes"] for r in records} | set(cfg["sizes"]))
    by = {n: [r for r in records if r["nodes"] == n] for n in sizes}
    lines = []
    head = " | ".join("%d nodes" % n for n in sizes)
    rule = "|---" * (len(sizes) + 1) + "|"
    lines.append("jepsen: %d episodes (%s), %d faults, %.2f h of episodes, "
                 "target %d faults of each kind on each size%s" % (
                     len(records), ", ".join(
                         "%d on %d nodes" % (len(by[n]), n) for n in sizes),
                     sum(sum(r["faults"].values()) for r in records),
                     sum(r["elapsed"] for r in records) / 3600.0,
                     cfg["faults"],
                     "; each node on a host of its own (netns, TLS)"
                     if cfg.get("hosts") == "netns" else ""))
    # Faults by kind, with each kind's slowest recovery.
    lines += ["", "| faults (slowest recovery) | %s |" % head, rule]
    kinds = list(cfg["kinds"]) + sorted(
        {k for r in records for k in r["faults"]} - set(cfg["kinds"]))
    worst = {}    # (size, kind) -> (seconds, seed, fault number)
    unmeasured = collections.Counter()
    for r in records:
        for k, (kind, s) in enumerate(r["recovery"]):
            if s is None:
                unmeasured[(r["nodes"], kind)] += 1
            elif s > worst.get((r["nodes"], kind), (-1,))[0]:
                worst[(r["nodes"], kind)] = (s, r["seed"], k + 1)
    for kind in kinds + ["all"]:
        cells = []
        for n in sizes:
            if kind == "all":
                got = sum(sum(r["faults"].values()) for r in by[n])
                w = max((v for (m, _), v in worst.items() if m == n),
                        default=None)
                miss = sum(v for (m, _), v in unmeasured.items() if m == n)
            else:
                got = sum(r["faults"].get(kind, 0) for r in by[n])
                w = worst.get((n, kind))
                miss = unmeasured[(n, kind)]
            cell = "%d" % got
            if w is not None:
                cell += " (%s, seed %d fault %d)" % (seconds(w[0]), w[1],
                                                    w[2])
            if miss:
                cell += ", %d unmeasured" % miss
            cells.append(cell)
        lines.append("| %s | %s |" % (kind, " | ".join(cells)))
    conv = {n: max((r["converge_s"] for r in by[n]
                    if r["converge_s"] is not None), default=None)
            for n in sizes}
    lines.append("| convergence after the last heal (slowest) | %s |" %
                 " | ".join(seconds(conv[n]) for n in sizes))
    # Operations by outcome.
    lines += ["", "| operations: ok / fail / info | %s |" % head, rule]
    fs = sorted({key.split(" ")[0] for r in records for key in r["ops"]})
    for f in fs + ["all"]:
        cells = []
        for n in sizes:
            c = collections.Counter()
            for r in by[n]:
                for key, v in r["ops"].items():
                    g, outcome = key.split(" ")
                    if f in ("all", g):
                        c[outcome] += v
            cells.append("%d / %d / %d" % (c["ok"], c["fail"], c["info"]))
        lines.append("| %s | %s |" % (f, " | ".join(cells)))
    # Checker verdicts.
    lines += ["", "| checks: episodes passed | %s |" % head, rule]
    names = []
    for r in records:
        for name, _ in r["checks"]:
            if check_name(name) not in names:
                names.append(check_name(name))
    for name in names:
        cells = []
        for n in sizes:
            v = [not p for r in by[n] for m, p in r["checks"]
                 if check_name(m) == name]
            cells.append("%d of %d" % (sum(v), len(v)))
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    lines.append("| episodes with a finding | %s |" % " | ".join(
        str(sum(1 for r in by[n] if r["findings"])) for n in sizes))
    # The suspicious episodes.
    bad = [r for r in records if r["failed"]]
    n_fixed = sum(1 for r in bad if r["seed"] in fixed)
    lines += ["", "suspicious episodes: %d%s" % (
        len(bad), " (%d fixed since, %d open)" % (n_fixed, len(bad) - n_fixed)
        if n_fixed else "")]
    for r in bad:
        what = ["%s: %s" % (check_name(m), "; ".join(p)[:300])
                for m, p in r["checks"] if p] + r["findings"]
        lines.append("  seed %d (%d nodes): %s" % (
            r["seed"], r["nodes"], " | ".join(what)[:600]))
        if r["seed"] in fixed:
            fx = fixed[r["seed"]]
            lines.append("    fixed in %s: %s" % (fx["fix"], fx["what"]))
        lines.append("    history and logs: %s" % r["kept"])
        lines.append("    replay: %s" % r["replay"])
    # The time the rest takes, at the pace measured.
    todo = lacking(records, cfg)
    for n in cfg["sizes"]:
        done = sum(sum(r["faults"].values()) for r in by[n])
        left = sum(todo[n].values())
        if done:
            pace = sum(r["elapsed"] for r in by[n]) / done
            lines.append("%d nodes: %.1f s per fault measured; %d faults "
                         "to go: about %.1f h" % (n, pace, left,
                                                  pace * left / 3600.0))
        else:
            lines.append("%d nodes: nothing measured yet; %d faults to go" %
                         (n, left))
    if not any(todo.values()):
        lines.append("complete: every kind has %d faults on each size" %
                     cfg["faults"])
    return lines


def campaign(cfg):
    """Run episodes until no kind lacks a fault or JEPSEN_S passed;
    returns the records."""
    folder = cfg["dir"]
    os.makedirs(os.path.join(folder, SUSPICIOUS), exist_ok=True)
    records = load(cfg["record"])
    start = time.monotonic()
    deadline = start + cfg["seconds"] if cfg["seconds"] else float("inf")
    if records:
        seed = max(r["seed"] for r in records) + 1
    else:
        seed = cfg["seed"] if cfg["seed"] is not None else \
            int(time.time()) % 1000000
    say("jepsen: %d episodes recorded in %s; next seed %d; kinds %s; "
        "sizes %s; %d faults of each kind on each size%s" % (
            len(records), cfg["record"], seed, ",".join(cfg["kinds"]),
            ",".join(map(str, cfg["sizes"])), cfg["faults"],
            "; each node on a host of its own (network namespaces, TLS)"
            if cfg["hosts"] == "netns" else ""))
    while time.monotonic() < deadline:
        nxt = next_episode(records, cfg)
        if nxt is None:
            break
        size, kinds, count = nxt
        opts = run.options(size, os.path.join(folder, SUSPICIOUS),
                           cfg["hosts"])
        ep = run.Episode(seed, count, kinds, deadline, opts).run()
        if not ep.faults:
            # Cut by JEPSEN_S before its first fault: too short for the
            # checks that want every path taken; not recorded.
            say("jepsen: an episode injected no fault (seed %d, not "
                "recorded): stopping" % seed)
            break
        rec = ep.record()
        append(cfg["record"], rec)
        records.append(rec)
        seed += 1
    return records


def main():
    try:
        cfg = settings(os.environ)
    except ValueError as e:
        say("jepsen: %s" % e)
        sys.exit(2)
    if sys.argv[1:] not in ([], ["--table"]):
        say("jepsen: unknown arguments %s (only --table)" % sys.argv[1:])
        sys.exit(2)
    try:
        records = load(cfg["record"])
        fixed = load_fixed(cfg["fixed"], records)
    except ValueError as e:
        say("jepsen: %s" % e)
        sys.exit(2)
    if sys.argv[1:] == ["--table"]:
        say("\n".join(table(records, cfg, fixed)))
        sys.exit(1 if unfixed(records, fixed) else 0)
    if cfg["hosts"] == "netns":
        import hosts
        from netns import Netns
        why = Netns.unavailable()
        if why is not None:
            say("jepsen: JEPSEN_HOSTS=netns: %s" % why)
            sys.exit(2)
        hosts.sweep(say, tempfile.gettempdir())
    # The full-disk fault is left out where no tmpfs can be mounted.
    run.prepare(cfg["kinds"])
    code = 0
    try:
        records = campaign(cfg)
    except (KeyboardInterrupt, SystemExit) as e:
        say("jepsen: stopped (%s); the episode under way is not recorded"
            % (e or type(e).__name__))
        records = load(cfg["record"])
        code = 130
    say("\n".join(table(records, cfg, fixed)))
    if unfixed(records, fixed):
        code = code or 1
    sys.exit(code)


if __name__ == "__main__":
    main()
