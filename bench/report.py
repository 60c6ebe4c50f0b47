"""Turn the RESULT lines of one bench/compare.sh run into its table and chart.

Usage: report.py RESULTS_FILE TXT_OUT PNG_OUT TITLE [NOTE]

RESULTS_FILE holds one line per run, either
    RESULT name=NAME writes_per_s=X p50_ms=X p99_ms=X p999_ms=X [k=v ...]
or  FAILED name=NAME reason...
each with round=N (compare.sh's ROUNDS; none is round 1). Writes the table
(runs, ratios against the peers, the targets of bench/README.md) to stdout
and TXT_OUT, and a bar chart of writes/s (log scale, one bar per run) to
PNG_OUT with gnuplot. NOTE, if given, is printed under the title.

With several rounds there is one table per round; each ratio is taken
within each round (both runs of the same round), and its line gives the
median over the rounds, marked against the target, then every round's
value. The chart shows each run's median writes/s.
"""

import os
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
    "dqlite-1", "dqlite-64",
    "etcd-1", "etcd-64",
    "local-1", "local-64",
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
    return rounds


def num(run, key):
    """The float value of run[key], or None if absent or 'n/a'."""
    try:
        return float(run[key])
    except (KeyError, TypeError, ValueError):
        return None


def fmt(v, digits=2):
    return "n/a" if v is None else "%.*f" % (digits, v)


def table(runs, failed):
    lines = []
    head = "%-25s %11s %9s %9s %9s %7s  %s" % (
        "run", "writes/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
        "notes")
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
        lines.append("%-25s %11s %9s %9s %9s %7s  %s" % (
            name, fmt(num(r, "writes_per_s"), 0), fmt(num(r, "p50_ms"), 3),
            fmt(num(r, "p99_ms"), 3), fmt(num(r, "p999_ms"), 3),
            r.get("errors", "0"), "; ".join(notes)))
    return lines


def ratio_defs(attempted):
    """The ratio lines: (label, numerator run, denominator run, target or
    None). The standing targets always; the others when their first run
    (for the delayed links, either run) was attempted (in @attempted)."""
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
    always = len(out)
    for rtt in ("1", "10"):
        for n in ("1", "64"):
            r, e = "raftsql-%s-leader-rtt%s" % (n, rtt), "etcd-%s-rtt%s" % (n, rtt)
            if e in attempted:
                attempted = attempted | {r}
            out.append((r, e, None))
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
    return [("%s / %s" % (a, b), a, b, t) for i, (a, b, t) in enumerate(out)
            if i < always or a in attempted]


def wps_ratio(runs, a, b):
    """writes/s of run @a over run @b within one round, or None."""
    x = num(runs.get(a, {}), "writes_per_s")
    y = num(runs.get(b, {}), "writes_per_s")
    if x is None or y is None or y == 0:
        return None
    return x / y


def median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def ratios(rounds):
    """The ratio lines under the tables, each taken within every round."""
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
            vals = " ".join(fmt(x, 3 if better < 0 else 2) for x in per_round)
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
    for label, a, b, target in ratio_defs(attempted):
        per_round = [wps_ratio(rounds[k][0], a, b) for k in keys]
        lines.append(line(label, per_round, target, 1))
    lines.append("")
    for role in ("leader", "follower"):
        name = "raftsql-64-" + role
        per_round = [num(rounds[k][0].get(name, {}), "p99_ms") for k in keys]
        lines.append(line("%s p99 ms" % name, per_round, 10, -1))
    return lines


def chart(rounds, png, title):
    """A bar per run: its median writes/s over the rounds."""
    per_name = {}
    for runs, _ in rounds.values():
        for n, r in runs.items():
            per_name.setdefault(n, []).append(num(r, "writes_per_s"))
    runs = {n: {"writes_per_s": median(v)} for n, v in per_name.items()}
    names = [n for n in ORDER if n in runs] + \
        sorted(n for n in runs if n not in ORDER)
    if not names:
        return
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data.txt")
        with open(data, "w") as f:
            for i, n in enumerate(names):
                v = num(runs[n], "writes_per_s") or 0.0
                kind = (0 if n.startswith("raftsql") else
                        1 if n.startswith("dqlite") else
                        2 if n.startswith("etcd") else 3)
                f.write("%d %s %.1f %d\n" % (i, n, max(v, 1.0), kind))
        script = """
set terminal pngcairo size 1100,620 font ",10"
set output '%s'
set title '%s'
set logscale y
set ylabel 'writes/s (log scale)'
set yrange [1:*]
set style fill solid 0.85 border -1
set boxwidth 0.7
set grid ytics mytics
set xtics rotate by 30 right nomirror
set key off
set palette maxcolors 4
set palette defined (0 '#1f77b4', 1 '#d62728', 2 '#2ca02c', 3 '#7f7f7f')
set cbrange [0:3]
unset colorbox
set xrange [-0.6:%f]
plot '%s' using 1:3:4:xtic(2) with boxes lc palette, \\
     '' using 1:($3*1.15):(sprintf('%%.0f',$3)) with labels font ",9"
""" % (png, title.replace("'", ""), len(names) - 0.4, data)
        subprocess.run(["gnuplot"], input=script.encode(), check=True)


def main():
    if len(sys.argv) not in (5, 6):
        sys.stderr.write(__doc__)
        return 2
    src, txt, png, title = sys.argv[1:5]
    note = sys.argv[5] if len(sys.argv) == 6 else ""
    rounds = parse(src) or {1: ({}, {})}
    lines = [title] + ([note] if note else []) + [""]
    for k in sorted(rounds):
        if len(rounds) > 1:
            lines += ["round %d" % k]
        lines += table(*rounds[k]) + [""]
    lines += ratios(rounds)[1:]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(txt, "w") as f:
        f.write(text)
    chart(rounds, png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
