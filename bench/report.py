"""Turn the RESULT lines of one bench/compare.sh run into its table and chart.

Usage: report.py RESULTS_FILE TXT_OUT PNG_OUT TITLE [NOTE]
       report.py --show TXT [PNG_OUT]

RESULTS_FILE holds one line per run, either
    RESULT name=NAME writes_per_s=X p50_ms=X p99_ms=X p999_ms=X [k=v ...]
or  FAILED name=NAME reason...
each with round=N (compare.sh's ROUNDS; none is round 1). Writes the table
(runs, ratios against the peers, the targets of bench/README.md) to stdout
and TXT_OUT, and the charts (writes/s on a log scale, CPU ms and kB
written per write; one bar per run, its median, with the rounds' min-max)
to PNG_OUT with gnuplot. NOTE, if given, is printed under the title. The
RESULT and FAILED lines themselves end TXT_OUT, so that `--show TXT`
prints the same report again from a results file (and redraws the chart,
to PNG_OUT or TXT's name with .png). A PNG_OUT of '-' draws no chart.

With several rounds there is one table per round, then a table of each
run's median and min-max over the rounds; each ratio is taken within each
round (both runs of the same round), and its line gives the median over
the rounds, marked against the target, then every round's value. A round
whose local-1 p50 (this disk's fsync) is over 1.5 x the median of the
rounds' is flagged, and its values marked with '!'.

The floor: in a round with local-1 (its p50 is one fsync of this disk)
and rtt-loopback (build/rtt-probe: the loopback TCP round trip), the
report adds a run floor-1, what one client could do at best: 1 / (2 x
fsync + RTT) writes/s (a follower's log commit takes two fsyncs, one
after the other, then its answer travels back), p50 2 x fsync + RTT; and
the one-client runs' ratios to it.

RATIOS (environment): the ratio lines, as space-separated "A/B" run names
(each line: A's writes/s over B's, and the same pair's CPU per write);
by default the standing set of ratio_defs() for the runs that were made.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

# The order of the rows: every run compare.sh makes.
ORDER = [
    "raftsql-1-leader", "raftsql-1-leader-tls", "raftsql-1-follower",
    "raftsql-64-leader", "raftsql-64-leader-tls", "raftsql-64-follower",
    "raftsql-plain-1-leader", "raftsql-plain-1-follower",
    "raftsql-plain-64-leader", "raftsql-plain-64-follower",
    "raftsql-plain-1-leader-proc", "raftsql-plain-1-follower-proc",
    "raftsql-plain-64-leader-proc", "raftsql-plain-64-follower-proc",
    "dqlite-1", "dqlite-64",
    "etcd-1", "etcd-64",
    "local-1", "local-64", "rtt-loopback", "floor-1",
    "raftsql-1-leader-rtt1", "etcd-1-rtt1",
    "raftsql-64-leader-rtt1", "etcd-64-rtt1",
    "raftsql-1-leader-rtt10", "etcd-1-rtt10",
    "raftsql-64-leader-rtt10", "etcd-64-rtt10",
]


def parse(path):
    """Return {round: ({name: {key: value}}, {name: failure reason})}."""
    rounds = {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            name = kv.get("name")
            if name is None:
                continue
            try:
                rnd = int(kv.get("round", "1"))
            except ValueError:
                rnd = 1
            runs, failed = rounds.setdefault(rnd, ({}, {}))
            if words[0] == "RESULT":
                runs[name] = kv
            elif words[0] == "FAILED":
                failed[name] = " ".join(
                    w for w in words[1:]
                    if not w.startswith("name=") and not w.startswith("round="))
    for runs, _ in rounds.values():
        add_floor(runs)
    return rounds


def add_floor(runs):
    """Add the run floor-1 to the round's @runs when it has local-1 and
    rtt-loopback: 1 / (2 x fsync + RTT) writes/s, fsync being local-1's
    p50 and RTT rtt-loopback's."""
    fsync = num(runs.get("local-1", {}), "p50_ms")
    rtt = num(runs.get("rtt-loopback", {}), "p50_ms")
    if fsync is None or rtt is None or 2 * fsync + rtt <= 0:
        return
    ms = 2 * fsync + rtt
    runs["floor-1"] = {"name": "floor-1", "writes_per_s": "%.1f" % (1000 / ms),
                       "p50_ms": "%.3f" % ms, "fsync_ms": "%.3f" % fsync,
                       "rtt_ms": "%.3f" % rtt}


def num(run, key):
    """The float value of run[key], or None if absent or 'n/a'."""
    try:
        return float(run[key])
    except (KeyError, TypeError, ValueError):
        return None


def fmt(v, digits=2):
    return "n/a" if v is None else "%.*f" % (digits, v)


# What the cost columns count, per system (bench/README.md "The numbers").
COST_NOTES = [
    "CPU s/write: user + system CPU seconds of the system's processes in the"
    " window over the writes in it; bytes/write: their write_bytes",
    "(/proc/<pid>/io: 4 KiB pages they made dirty, to be written to the "
    "disk) over the same writes. Included:",
    "  raftsql-*: node 1's process (the client threads too: 'clients' in "
    "the notes is their share; -proc rows: the client process, counted "
    "with node 1), nodes 2 and 3; not the delay proxies",
    "  dqlite-*: the 3 dqlite-benchmark processes; node 1's runs the "
    "workers (Go), included; sampled every 0.25 s, window aligned",
    "  etcd-*: the 3 members; not wrk (the client: 'wrk' in the notes, "
    "not in the column) nor the delay proxies",
    "  local-*: the one process (SQLite and its writer); per row",
]


def cost_notes(r):
    """The notes of the cost columns' extra figures in run @r."""
    out = []
    c = num(r, "clients_cpu_s_per_write")
    if c is not None:
        out.append("CPU s/write of which clients %.6f" % c)
    c = num(r, "wrk_cpu_s_per_write")
    if c is not None:
        out.append("wrk (not included) %.6f CPU s/write" % c)
    if "cpu1_s" in r:
        out.append("CPU s node1/2/3 %s/%s/%s" % (
            r.get("cpu1_s"), r.get("cpu2_s"), r.get("cpu3_s")))
    return out


def table(runs, failed):
    lines = []
    head = "%-25s %11s %9s %9s %9s %7s %11s %11s  %s" % (
        "run", "writes/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
        "CPU s/write", "bytes/write", "notes")
    lines.append(head)
    lines.append("-" * len(head))
    names = [n for n in ORDER if n in runs or n in failed]
    names += sorted(n for n in list(runs) + list(failed) if n not in ORDER)
    for name in names:
        if name in failed:
            lines.append("%-25s %11s  FAILED: %s" % (name, "-", failed[name]))
            continue
        r = runs[name]
        notes = []
        if name.startswith("raftsql-plain"):
            notes.append("SQLITE_BUSY %s (the only error allowed)"
                         % r.get("busy", "?"))
        if name.startswith("raftsql"):
            notes.append("entries/fsync %s (followers %s), entries/append %s"
                         % (r.get("entries_per_fsync", "n/a"),
                            r.get("entries_per_fsync_followers", "n/a"),
                            r.get("entries_per_append", "n/a")))
            rss = ["%s->%s" % (r.get("rss%d_kb_start" % i, "?"),
                               r.get("rss%d_kb_end" % i, "?"))
                   for i in (1, 2, 3)]
            anon = ["%s->%s" % (r.get("anon%d_kb_start" % i, "?"),
                                r.get("anon%d_kb_end" % i, "?"))
                    for i in (1, 2, 3)]
            notes.append("RSS kB " + " ".join(rss))
            notes.append("anon kB " + " ".join(anon))
        if name.startswith("local"):
            notes.append("%s commits/s" % r.get("commits_per_s", "?"))
        if name == "floor-1":
            notes.append("1 / (2 x fsync %s ms (local-1 p50) + RTT %s ms "
                         "(rtt-loopback p50)): not a run" %
                         (r.get("fsync_ms"), r.get("rtt_ms")))
        if name == "rtt-loopback":
            notes.append("loopback TCP round trip of %s bytes and an answer "
                         "(build/rtt-probe, %s round trips): not a run" %
                         (r.get("size", "?"), r.get("round_trips", "?")))
        notes = cost_notes(r) + notes
        lines.append("%-25s %11s %9s %9s %9s %7s %11s %11s  %s" % (
            name, fmt(num(r, "writes_per_s"), 0), fmt(num(r, "p50_ms"), 3),
            fmt(num(r, "p99_ms"), 3), fmt(num(r, "p999_ms"), 3),
            r.get("errors", "0"), fmt(num(r, "cpu_s_per_write"), 6),
            fmt(num(r, "bytes_per_write"), 0), "; ".join(notes)))
    return lines


# The columns of the medians table: (key, header, digits, width).
SUMMARY = [("writes_per_s", "writes/s", 0, 20), ("p50_ms", "p50 ms", 3, 22),
           ("p99_ms", "p99 ms", 3, 25),
           ("cpu_s_per_write", "CPU s/write", 6, 29),
           ("bytes_per_write", "bytes/write", 0, 24)]


def spread(values, digits):
    """'median (min-max)' of @values (Nones left out), or 'n/a'."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    return "%s (%s-%s)" % (fmt(statistics.median(vals), digits),
                           fmt(min(vals), digits), fmt(max(vals), digits))


def summary(rounds):
    """Each run's median and min-max over the rounds, with the rounds it
    has a value in."""
    keys = sorted(rounds)
    per_name = {}
    for k in keys:
        for n, r in rounds[k][0].items():
            per_name.setdefault(n, []).append(r)
    names = [n for n in ORDER if n in per_name]
    names += sorted(n for n in per_name if n not in ORDER)
    head = "%-25s %-6s" % ("run", "rounds") + "".join(
        " %-*s" % (w, h) for _, h, _, w in SUMMARY)
    lines = ["median (min-max) over %d rounds" % len(keys), head.rstrip(),
             "-" * len(head.rstrip())]
    for n in names:
        rs = per_name[n]
        lines.append(("%-25s %-6s" % (n, "%d/%d" % (len(rs), len(keys))) +
                      "".join(" %-*s" % (w, spread([num(r, key) for r in rs],
                                                    d))
                              for key, _, d, w in SUMMARY)).rstrip())
    return lines


def disk_flags(rounds):
    """({round: local-1 p50 ms} of the flagged rounds, the report's lines):
    a round whose local-1 p50 is over 1.5 x the median of the rounds'."""
    keys = sorted(rounds)
    p50 = {k: num(rounds[k][0].get("local-1", {}), "p50_ms") for k in keys}
    have = [v for v in p50.values() if v is not None]
    if not have:
        return {}, ["local-1 is not among the runs: no round is checked for "
                    "a slow disk (its p50 is this disk's fsync; add local-1 "
                    "to RUNS)"]
    med = statistics.median(have)
    flagged = {k: v for k, v in p50.items()
               if v is not None and v > 1.5 * med}
    line = "local-1 p50 ms by round: %s; median %.3f" % (
        " ".join(fmt(p50[k], 3) for k in keys), med)
    lines = [line]
    for k, v in sorted(flagged.items()):
        lines.append("round %d FLAGGED: local-1 p50 %.3f ms > 1.5 x the "
                     "median %.3f ms: the disk was slow; its values carry "
                     "'!' below" % (k, v, med))
    if len(have) < 2:
        lines.append("one round with local-1: nothing to compare it with "
                     "(ROUNDS of 3 or more)")
    elif not flagged:
        lines.append("no round's local-1 p50 is over 1.5 x the median")
    return flagged, lines


def ratio_defs(attempted):
    """The ratio lines: (label, numerator run, denominator run, target or
    None): those whose two runs were attempted (in @attempted), or those of
    RATIOS."""
    out = []
    for role in ("leader", "follower"):
        r1, r64 = "raftsql-1-" + role, "raftsql-64-" + role
        out += [
            (r1, "dqlite-1", 5.0),
            (r1, "etcd-1", 2.0),
            (r64, "dqlite-1", 30.0),
            (r64, "dqlite-64", None),
            (r64, "etcd-64", 4.0),
            (r64, "local-64", 0.35),
        ]
    for rtt in ("1", "10"):
        for n in ("1", "64"):
            out.append(("raftsql-%s-leader-rtt%s" % (n, rtt),
                        "etcd-%s-rtt%s" % (n, rtt), None))
    # What TLS between the peers costs (the target: at most 10 % fewer).
    for n in ("1", "64"):
        out.append(("raftsql-%s-leader-tls" % n, "raftsql-%s-leader" % n, 0.9))
    # Plain SQL writes (issue 24 item 8): beside raft_exec, themselves at
    # 1 client, and dqlite, which serialises write transactions too.
    for role in ("leader", "follower"):
        p1, p64 = "raftsql-plain-1-" + role, "raftsql-plain-64-" + role
        out += [
            (p1, "raftsql-1-" + role, 0.7),
            (p64, p1, 1.0),
            (p64, "dqlite-64", 2.0),
        ]
        # The same from another process than node 1's (an application
        # beside its node): the lease's ask goes through node 1's socket.
        out += [
            (p1 + "-proc", p1, None),
            (p64 + "-proc", p1 + "-proc", 1.0),
            (p64 + "-proc", "dqlite-64", 2.0),
        ]
    # The one-client floor (issue 25 item 4): raft_exec on the leader at
    # 0.8 of it; the others shown beside it.
    out += [("raftsql-1-leader", "floor-1", 0.8),
            ("raftsql-1-follower", "floor-1", None),
            ("raftsql-plain-1-leader", "floor-1", None),
            ("raftsql-plain-1-follower", "floor-1", None)]
    # RATIOS replaces the set, with the targets of the pairs above.
    wanted = os.environ.get("RATIOS", "").split()
    if wanted:
        targets = {(a, b): t for a, b, t in out}
        pairs = []
        for w in wanted:
            if w.count("/") != 1 or not all(w.split("/")):
                raise SystemExit("report.py: RATIOS: '%s' is not A/B "
                                 "(two run names)" % w)
            a, b = w.split("/")
            pairs.append((a, b, targets.get((a, b))))
        return [("%s / %s" % (a, b), a, b, t) for a, b, t in pairs]
    return [("%s / %s" % (a, b), a, b, t) for a, b, t in out
            if a in attempted and b in attempted]


def unmeasured_targets(attempted):
    """The standing targets (the ratio lines with a target that compare.sh
    always had) whose runs were not both made."""
    out = []
    for role in ("leader", "follower"):
        r1, r64 = "raftsql-1-" + role, "raftsql-64-" + role
        out += [(r1, "dqlite-1"), (r1, "etcd-1"), (r64, "dqlite-1"),
                (r64, "etcd-64"), (r64, "local-64")]
    if os.environ.get("RATIOS", "").split():
        return []
    return ["%s / %s" % (a, b) for a, b in out
            if a not in attempted or b not in attempted]


def run_ratio(runs, a, b, key="writes_per_s"):
    """@key of run @a over @key of run @b within one round, or None."""
    x = num(runs.get(a, {}), key)
    y = num(runs.get(b, {}), key)
    if x is None or y is None or y == 0:
        return None
    return x / y


def median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def ratios(rounds, flagged):
    """The ratio lines under the tables, each taken within every round
    (the values of a round in @flagged marked with '!')."""
    keys = sorted(rounds)
    many = len(keys) > 1
    attempted = set()
    for runs, failed in rounds.values():
        attempted.update(runs, failed)

    def line(label, per_round, target, better):
        """@better: 1 when a value >= target meets it, -1 when <=."""
        v = median(per_round)
        mark = ""
        if target is not None and v is not None:
            mark = "met" if (v - target) * better >= 0 else "MISSED"
        tgt = "-" if target is None else (
            "%s %g" % (">=" if better > 0 else "<=", target))
        text = "%-48s %9s %9s  %-6s" % (label, fmt(v, 3 if better < 0 else 2),
                                         tgt, mark)
        n_na = sum(1 for x in per_round if x is None)
        if many and n_na < len(per_round):
            vals = " ".join(fmt(x, 3 if better < 0 else 2) +
                            ("!" if k in flagged else "")
                            for k, x in zip(keys, per_round))
            text += "  rounds: " + vals
            if target is not None:
                n_met = sum(1 for x in per_round if x is not None and
                            (x - target) * better >= 0)
                text += " (met in %d of %d)" % (n_met, len(per_round))
            if n_na:
                # A run missing or FAILED in a round: the median is of the
                # other rounds only.
                text += " (n/a in %d)" % n_na
        return text.rstrip()

    lines = ["", "%-48s %9s %9s  %s" % (
        "ratio (writes/s)" + (", within each round" if many else ""),
        "median" if many else "value", "target", "")]
    defs = ratio_defs(attempted)
    for label, a, b, target in defs:
        per_round = [run_ratio(rounds[k][0], a, b) for k in keys]
        lines.append(line(label, per_round, target, 1))
    missing = unmeasured_targets(attempted)
    if missing:
        lines.append("not measured (a run not in RUNS): " + ", ".join(missing))
    cost = []
    for label, a, b, _ in defs:
        per_round = [run_ratio(rounds[k][0], a, b, "cpu_s_per_write")
                     for k in keys]
        if any(x is not None for x in per_round):
            cost.append(line(label, per_round, None, 1))
    if cost:
        lines += ["", "%-48s %9s" % (
            "cost ratio (CPU s per write; < 1: A spends less)",
            "median" if many else "value")] + cost
    lines.append("")
    for role in ("leader", "follower"):
        name = "raftsql-64-" + role
        if name in attempted:
            per_round = [num(rounds[k][0].get(name, {}), "p99_ms")
                         for k in keys]
            lines.append(line("%s p99 ms" % name, per_round, 10, -1))
    return lines


# The chart's panels: (RESULT key, scale to the axis' unit, axis label,
# label format, log scale).
PANELS = [
    ("writes_per_s", 1.0, "writes/s (log scale)", "%.0f", True),
    ("cpu_s_per_write", 1000.0, "CPU ms per write (all its processes)",
     "%.3f", False),
    ("bytes_per_write", 1 / 1024, "kB written per write", "%.0f", False),
]


def chart(rounds, png, title):
    """A bar per run and panel (writes/s, CPU and disk bytes per write):
    its median over the rounds, and a bar from the rounds' min to max. A
    panel without any value is left out."""
    per_name = {}
    for runs, _ in rounds.values():
        for n, r in runs.items():
            per_name.setdefault(n, []).append(r)
    names = [n for n in ORDER if n in per_name] + \
        sorted(n for n in per_name if n not in ORDER)
    names = [n for n in names if n != "rtt-loopback"]  # no writes
    if not names:
        return
    panels = []
    rows = [[] for _ in names]
    for key, scale, label, form, log in PANELS:
        have = False
        for i, n in enumerate(names):
            vals = [num(r, key) for r in per_name[n]]
            vals = [v * scale for v in vals if v is not None]
            have = have or bool(vals)
            if vals:
                rows[i] += ["%g" % statistics.median(vals),
                            "%g" % min(vals), "%g" % max(vals)]
            else:
                rows[i] += ["NaN"] * 3
        panels.append((have, label, form, log))
    shown = [p for p in panels if p[0]]
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data.txt")
        with open(data, "w") as f:
            for i, n in enumerate(names):
                kind = (0 if n.startswith("raftsql") else
                        1 if n.startswith("dqlite") else
                        2 if n.startswith("etcd") else 3)
                f.write("%d %s %d %s\n" % (i, n, kind, " ".join(rows[i])))
        script = """
set terminal pngcairo size 1100,%d font ",10"
set output '%s'
set multiplot layout %d,1 title '%s (median; bar: min-max of the rounds)'
set style fill solid 0.85 border -1
set boxwidth 0.7
set xtics rotate by 30 right nomirror
set key off
set palette maxcolors 4
set palette defined (0 '#1f77b4', 1 '#d62728', 2 '#2ca02c', 3 '#7f7f7f')
set cbrange [0:3]
unset colorbox
set xrange [-0.6:%f]
""" % (80 + 520 * len(shown), png, len(shown), title.replace("'", ""),
            len(names) - 0.4)
        for k, (have, label, form, log) in enumerate(panels):
            if not have:
                continue
            c = 4 + 3 * k  # the panel's median column; min, max follow
            script += """
%s
set yrange [%s:*]
set grid ytics mytics
set ylabel '%s'
plot '%s' using 1:%d:3:xtic(2) with boxes lc palette, \\
     '' using 1:%d:%d:%d with yerrorbars lc rgb 'black' pt 0, \\
     '' using 1:%d:(sprintf('%s',$%d)) with labels offset 0,0.7 font ",9"
""" % ("set logscale y" if log else "unset logscale y", "1" if log else "0",
                label, data, c, c, c + 1, c + 2, c + 2, form, c)
        script += "unset multiplot\n"
        subprocess.run(["gnuplot"], input=script.encode(), check=True)


def raw_lines(path):
    """The RESULT and FAILED lines of @path, as they are."""
    with open(path) as f:
        return [line.rstrip("\n") for line in f
                if line.startswith(("RESULT ", "FAILED "))]


def report(rounds, title, note):
    """The whole report's text: the tables, the medians, the disk check,
    the ratios and what the cost columns count."""
    flagged, disk = disk_flags(rounds)
    lines = [title] + ([note] if note else []) + [""]
    for k in sorted(rounds):
        if len(rounds) > 1:
            lines += ["round %d%s" % (k, "  FLAGGED: slow disk (below)"
                                      if k in flagged else "")]
        lines += table(*rounds[k]) + [""]
    if len(rounds) > 1:
        lines += summary(rounds) + [""]
    lines += disk + [""]
    lines += ratios(rounds, flagged)[1:]
    while lines[-1] == "":
        lines.pop()
    lines += [""] + COST_NOTES
    return lines


def main():
    args = sys.argv[1:]
    if len(args) in (2, 3) and args[0] == "--show":
        src = args[1]
        png = args[2] if len(args) == 3 else re.sub(r"\.txt$", "", src) + \
            ".png"
        with open(src) as f:
            head = f.read().split("\n")
        # The title and the note: the lines above the first blank one.
        top = head[:head.index("")] if "" in head else head[:1]
        rounds = parse(src)
        if not rounds:
            sys.stderr.write("report.py: %s holds no RESULT or FAILED line "
                             "(a results file of compare.sh before they were "
                             "kept in it?)\n" % src)
            return 1
        sys.stdout.write("\n".join(report(rounds, top[0],
                                          " ".join(top[1:]))) + "\n")
        if png != "-":
            chart(rounds, png, top[0])
        return 0
    if len(args) not in (4, 5):
        sys.stderr.write(__doc__)
        return 2
    src, txt, png, title = args[:4]
    note = args[4] if len(args) == 5 else ""
    rounds = parse(src) or {1: ({}, {})}
    lines = report(rounds, title, note)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    raw = raw_lines(src)
    with open(txt, "w") as f:
        f.write(text)
        # Kept for `report.py --show`: the table of these lines again.
        f.write("\nthe RESULT lines of the runs (report.py --show reads "
                "them back)\n" + "\n".join(raw) + "\n")
    if png != "-":
        chart(rounds, png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
