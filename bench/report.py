"""Turn the RESULT lines of one bench/compare.sh run into its table and chart.

Usage: report.py RESULTS_FILE TXT_OUT PNG_OUT TITLE [NOTE]

RESULTS_FILE holds one line per run, either
    RESULT name=NAME writes_per_s=X p50_ms=X p99_ms=X p999_ms=X [k=v ...]
or  FAILED name=NAME reason...
Writes the table (runs, ratios against the peers, the targets of
bench/README.md) to stdout and TXT_OUT, and a bar chart of writes/s (log
scale, one bar per run) to PNG_OUT with gnuplot. NOTE, if given, is
printed under the title.
"""

import os
import subprocess
import sys
import tempfile

# The order of the rows: every run compare.sh makes.
ORDER = [
    "raftsql-1-leader", "raftsql-1-leader-tls", "raftsql-1-follower",
    "raftsql-64-leader", "raftsql-64-leader-tls", "raftsql-64-follower",
    "dqlite-1", "dqlite-64",
    "etcd-1", "etcd-64",
    "local-1", "local-64",
    "raftsql-1-leader-rtt1", "etcd-1-rtt1",
    "raftsql-64-leader-rtt1", "etcd-64-rtt1",
    "raftsql-1-leader-rtt10", "etcd-1-rtt10",
    "raftsql-64-leader-rtt10", "etcd-64-rtt10",
]


def parse(path):
    """Return {name: {key: value}} and {name: failure reason}."""
    runs, failed = {}, {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            name = kv.get("name")
            if name is None:
                continue
            if words[0] == "RESULT":
                runs[name] = kv
            elif words[0] == "FAILED":
                failed[name] = " ".join(w for w in words[1:]
                                        if not w.startswith("name="))
    return runs, failed


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
    head = "%-20s %11s %9s %9s %9s %7s  %s" % (
        "run", "writes/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
        "notes")
    lines.append(head)
    lines.append("-" * len(head))
    names = [n for n in ORDER if n in runs or n in failed]
    names += sorted(n for n in list(runs) + list(failed) if n not in ORDER)
    for name in names:
        if name in failed:
            lines.append("%-20s %11s  FAILED: %s" % (name, "-", failed[name]))
            continue
        r = runs[name]
        notes = []
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
        lines.append("%-20s %11s %9s %9s %9s %7s  %s" % (
            name, fmt(num(r, "writes_per_s"), 0), fmt(num(r, "p50_ms"), 3),
            fmt(num(r, "p99_ms"), 3), fmt(num(r, "p999_ms"), 3),
            r.get("errors", "0"), "; ".join(notes)))
    return lines


def ratios(runs):
    """Ratio lines: (label, value or None, target or None, kind)."""
    def wps(name):
        return num(runs.get(name, {}), "writes_per_s")

    def ratio(a, b):
        x, y = wps(a), wps(b)
        if x is None or y is None or y == 0:
            return None
        return x / y

    out = []
    for role in ("leader", "follower"):
        r1, r64 = "raftsql-1-" + role, "raftsql-64-" + role
        out += [
            ("%s / dqlite-1" % r1, ratio(r1, "dqlite-1"), 5.0),
            ("%s / etcd-1" % r1, ratio(r1, "etcd-1"), 2.0),
            ("%s / dqlite-1" % r64, ratio(r64, "dqlite-1"), 30.0),
            ("%s / dqlite-64" % r64, ratio(r64, "dqlite-64"), None),
            ("%s / etcd-64" % r64, ratio(r64, "etcd-64"), 4.0),
            ("%s / local-64" % r64, ratio(r64, "local-64"), 0.35),
        ]
    for rtt in ("1", "10"):
        for n in ("1", "64"):
            r, e = "raftsql-%s-leader-rtt%s" % (n, rtt), "etcd-%s-rtt%s" % (n, rtt)
            if r in runs or e in runs:
                out.append(("%s / %s" % (r, e), ratio(r, e), None))
    # What TLS between the peers costs (the target: at most 10 % fewer).
    for n in ("1", "64"):
        t, r = "raftsql-%s-leader-tls" % n, "raftsql-%s-leader" % n
        if t in runs:
            out.append(("%s / %s" % (t, r), ratio(t, r), 0.9))
    lines = ["", "%-36s %9s %9s  %s" % ("ratio (writes/s)", "value",
                                         "target", "")]
    for label, v, target in out:
        mark = ""
        if target is not None and v is not None:
            mark = "met" if v >= target else "MISSED"
        lines.append("%-36s %9s %9s  %s" % (
            label, fmt(v), ">= %g" % target if target else "-", mark))
    lines.append("")
    for role in ("leader", "follower"):
        name = "raftsql-64-" + role
        p99 = num(runs.get(name, {}), "p99_ms")
        mark = "" if p99 is None else ("met" if p99 <= 10 else "MISSED")
        lines.append("%-36s %9s %9s  %s" % ("%s p99 ms" % name, fmt(p99, 3),
                                            "<= 10", mark))
    return lines


def chart(runs, png, title):
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
    runs, failed = parse(src)
    lines = [title] + ([note] if note else []) + [""]
    lines += table(runs, failed) + ratios(runs)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(txt, "w") as f:
        f.write(text)
    chart(runs, png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
