"""docs/reference.md against the code (make docs-check, part of make test).

Every SQL function the extension registers (read live from
`PRAGMA function_list` of build/raftsql.so loaded into /usr/bin/python3's
sqlite3, plus the internal ones the C source registers only on demand),
every configuration key raft_start and the daemon parse (the C source's
keys[] and int_keys[], and the daemon's own `strcmp(key, "...")`), every
raft_status() field (the key names of the C code that builds the JSON,
and the fields a small live cluster on 127.0.0.1 shows), every
raft_members column (live), every RAFTSQL_* code (ext/raftsql.h) and
every metric raft_metrics() serves (live, with its type) has its row in
docs/reference.md, and nothing is documented there that does
not exist. Also: every link between the README and docs/ reaches a file
and a heading that exist. Each failure prints what is missing or extra.

Run: /usr/bin/python3 -m unittest tests/docs/test_reference.py
(RAFTSQL_SO names the library; build/raftsql.so by default.)
"""

import json
import os
import re
import sqlite3
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from raftsql_cluster import free_ports  # noqa: E402

SO = os.environ.get("RAFTSQL_SO", os.path.join(ROOT, "build", "raftsql.so"))
REFERENCE = os.environ.get("RAFTSQL_REFERENCE",
                           os.path.join(ROOT, "docs", "reference.md"))


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def reference_tables(text):
    """{section heading: [first cells of its table rows, ...]} of the
    reference: every row of every table under each `## ` heading."""
    tables = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            tables[section] = []
        elif section and line.startswith("|") and not re.match(
                r"^\|[-| ]+\|$", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            tables[section].append(cells)
    # Drop each table's header row (its first cell is a plain word).
    for rows in tables.values():
        rows[:] = [r for r in rows if r[0].startswith("`") or
                   r[0].startswith("SQLite")]
    return tables


def names(rows, pattern=r"`([^`(]+)"):
    """The backticked name at the start of each row's first cell."""
    out = []
    for r in rows:
        m = re.match(pattern, r[0])
        if m:
            out.append(m.group(1).strip())
    return out


def diff(what, documented, existing):
    """A message naming what is missing from and extra in the reference,
    or "" when the two sets are equal."""
    documented, existing = set(documented), set(existing)
    missing = sorted(existing - documented)
    extra = sorted(documented - existing)
    lines = []
    if missing:
        lines.append("%s missing from docs/reference.md: %s"
                     % (what, ", ".join(missing)))
    if extra:
        lines.append("%s in docs/reference.md that do not exist: %s"
                     % (what, ", ".join(extra)))
    return "\n".join(lines)


def c_args(text, start):
    """The top-level comma-separated arguments of the call whose opening
    parenthesis is at @start in @text."""
    depth, args, cur, i, quote = 0, [], "", start + 1, None
    while i < len(text):
        ch = text[i]
        if quote:
            cur += ch
            if ch == "\\":
                cur += text[i + 1]
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            cur += ch
        elif ch in "([{":
            depth += 1
            cur += ch
        elif ch in ")]}":
            if depth == 0:
                args.append(cur.strip())
                return args
            depth -= 1
            cur += ch
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    raise ValueError("unbalanced call at %d" % start)


def c_string(arg):
    """The value of a C string literal argument (adjacent literals
    joined), or None when @arg is no literal."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    if not parts or re.sub(r'"(?:[^"\\]|\\.)*"|\s', "", arg):
        return None
    return "".join(parts)


def status_keys_in_source():
    """Every key name the C code that builds raft_status()'s JSON sets:
    json_object_set_new's second argument and json_pack's keys."""
    text = read("ext", "runtime", "status.c")
    keys = set()
    for m in re.finditer(r"\bjson_object_set_new\s*\(", text):
        args = c_args(text, m.end() - 1)
        key = c_string(args[1])
        if key is None:
            raise AssertionError("status.c: a key that is no literal: %s"
                                 % args[1])
        keys.add(key)
    for m in re.finditer(r"\bjson_pack\s*\(", text):
        args = c_args(text, m.end() - 1)
        fmt = c_string(args[0])
        pairs = re.findall(r"s\s*:", fmt)
        for k in range(len(pairs)):
            key = c_string(args[1 + 2 * k])
            if key is None:
                raise AssertionError("status.c: json_pack key that is no "
                                     "literal: %s" % args[1 + 2 * k])
            keys.add(key)
    return keys


def config_keys_in_source():
    """raft_start's keys (config.c's keys[] and int_keys[]) and the
    daemon's own (tools/raftsql_node.c's strcmp(key, "...") tests)."""
    text = read("ext", "runtime", "config.c")
    m = re.search(r"\bkeys\[\]\s*=\s*\{(.*?)\};", text, re.S)
    keys = set(re.findall(r'"([a-z_]+)"', m.group(1)))
    m = re.search(r"\bint_keys\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    keys |= set(re.findall(r'EXT__INT_KEY\(\s*"([a-z_]+)"', m.group(1)))
    daemon = read("tools", "raftsql_node.c")
    keys |= set(re.findall(r'strcmp\(key,\s*"([a-z_]+)"\)', daemon))
    return keys


def codes_in_header():
    """{RAFTSQL_X: number} from ext/raftsql.h's defines."""
    text = read("ext", "raftsql.h")
    codes = {}
    for name, primary, n in re.findall(
            r"#define (RAFTSQL_[A-Z_]+) \(SQLITE_([A-Z]+) \| \((\d+) << 8\)\)",
            text):
        codes[name] = getattr(sqlite3, "SQLITE_" + primary) | (int(n) << 8)
    return codes


def internal_functions_in_source():
    """Functions the C source registers under a #define'd name (the
    write guard's internal ones), which a fresh connection may not show
    (raftsql_host_authorizer exists only once raftsql_set_authorizer()
    was called)."""
    out = set()
    for folder in ("ext/surface", "ext"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not name.endswith(".c"):
                continue
            text = read(folder, name)
            defines = dict(re.findall(r'#define (\w+) "(\w+)"', text))
            for m in re.finditer(r"sqlite3_create_function_v2\s*\(", text):
                arg = c_args(text, m.end() - 1)[1]
                if arg in defines:
                    out.add(defines[arg])
    return out


def flatten(value, prefix=""):
    """{dotted path: value} of a JSON value, arrays as `name[]` (the
    paths of every element)."""
    out = {}
    if isinstance(value, dict):
        for k, v in value.items():
            path = prefix + "." + k if prefix else k
            out[path] = v
            out.update(flatten(v, path))
    elif isinstance(value, list):
        for v in value:
            out.update(flatten(v, prefix + "[]"))
    return out


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "real"
    if isinstance(v, str):
        return "text"
    if isinstance(v, list):
        return "array"
    return "object"


def slug(heading):
    """GitHub's anchor of a markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


class LiveNode:
    """A small cluster on 127.0.0.1 in this process, as the library shows
    it: the functions registered; raft_status() of a leader with a
    learner (its peers' progress), a raft_load_sql done and a plain write
    transaction holding the lease (so `peers[]`, `load` and `lease` are
    there); raft_members' columns."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="raftsql-docs-")
        self.cons = []
        try:
            self.run()
        finally:
            for con in reversed(self.cons):
                try:
                    con.execute("SELECT raft_stop()").fetchone()
                except sqlite3.Error:
                    pass  # not a node's first connection, or stopped
                con.close()
            self.dir.cleanup()

    def connect(self, name):
        con = sqlite3.connect(os.path.join(self.dir.name, name),
                              isolation_level=None, timeout=5)
        self.cons.append(con)
        return con

    def one(self, con, sql, *params):
        return con.execute(sql, params).fetchone()[0]

    def run(self):
        n1 = self.connect("n1.db")
        n1.enable_load_extension(True)
        n1.load_extension(os.path.splitext(SO)[0])
        n1.enable_load_extension(False)
        self.functions = {r[0] for r in n1.execute(
            "PRAGMA function_list") if r[0].startswith("raft")}
        self.modules = {r[0] for r in n1.execute(
            "PRAGMA module_list") if r[0].startswith("raft")}
        p1, p2 = free_ports(2)
        self.one(n1, "SELECT raft_start(?)",
                 "id=1 cluster=1@127.0.0.1:%d socket=off "
                 "election_timeout_ms=100 heartbeat_ms=20" % p1)
        deadline = time.monotonic() + 10
        while self.one(n1, "SELECT raft_leader()") != 1:
            if time.monotonic() > deadline:
                raise AssertionError("no leader within 10 s: %s"
                                     % self.one(n1, "SELECT raft_status()"))
            time.sleep(0.02)
        n2 = self.connect("n2.db")  # raftsql: loaded for the process
        self.one(n2, "SELECT raft_start(?)",
                 "id=2 listen=127.0.0.1:%d socket=off" % p2)
        self.one(n1, "SELECT raft_add(2, ?, 'learner')", "127.0.0.1:%d" % p2)
        script = os.path.join(self.dir.name, "load.sql")
        with open(script, "w") as f:
            f.write("CREATE TABLE t(x);\nINSERT INTO t VALUES(1);\n")
        self.one(n1, "SELECT raft_load_sql(?)", script)
        writer = self.connect("n1.db")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO t VALUES(2)")
        self.status = json.loads(self.one(n1, "SELECT raft_status()"))
        self.metrics = dict(re.findall(r"^# TYPE (\S+) (\S+)$", self.one(
            n1, "SELECT raft_metrics()"), re.M))
        writer.execute("COMMIT")
        cur = n1.execute("SELECT * FROM raft_members")
        cur.fetchall()
        self.members = [d[0] for d in cur.description]


class ReferenceTest(unittest.TestCase):
    live = None

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(SO):
            raise unittest.SkipTest("no %s: run make first" % SO)
        with open(REFERENCE) as f:
            cls.tables = reference_tables(f.read())
        if ReferenceTest.live is None:
            ReferenceTest.live = LiveNode()

    def section(self, name):
        self.assertIn(name, self.tables,
                      "docs/reference.md has no section '## %s'" % name)
        return self.tables[name]

    def check(self, what, documented, existing):
        dups = sorted({d for d in documented if documented.count(d) > 1})
        self.assertEqual(dups, [], "%s documented twice: %s" % (what, dups))
        msg = diff(what, documented, existing)
        self.assertEqual(msg, "", "\n" + msg)

    def test_functions(self):
        """Every function registered has its row, and no other."""
        documented = names(self.section("SQL functions"))
        existing = self.live.functions | internal_functions_in_source()
        self.assertIn("raft_exec", existing)
        self.check("SQL functions", documented, existing)

    def test_configuration_keys(self):
        """Every key parsed has its row, and no other."""
        documented = names(self.section("Configuration keys"))
        existing = config_keys_in_source()
        self.assertIn("election_timeout_ms", existing)
        self.check("configuration keys", documented, existing)

    def test_status_fields_in_source(self):
        """Every key name the JSON-building code sets is the last part of
        a documented field, and every documented field's name is set."""
        documented = names(self.section("raft_status() fields"))
        leaves = [re.sub(r"\[\]$", "", d.split(".")[-1]) for d in documented]
        self.check("raft_status() field names (status.c)", sorted(set(leaves)),
                   status_keys_in_source())

    def test_status_fields_live(self):
        """Every field of a live raft_status() is documented, with its
        type; every documented field whose parent object the live
        cluster shows is there."""
        rows = self.section("raft_status() fields")
        documented = dict(zip(names(rows), [r[1] for r in rows]))
        live = flatten(self.live.status)
        extra = sorted(set(live) - set(documented))
        self.assertEqual(extra, [], "raft_status() fields missing from "
                         "docs/reference.md: %s" % ", ".join(extra))
        absent = []
        for path in documented:
            parent = path.rsplit(".", 1)[0] if "." in path else None
            if parent is None or isinstance(live.get(parent), dict) or (
                    parent.endswith("[]") and live.get(parent[:-2])):
                if path not in live:
                    absent.append(path)
        self.assertEqual(absent, [], "documented raft_status() fields the "
                         "live cluster does not show: %s"
                         % ", ".join(absent))
        wrong = ["%s: documented %s, is %s" % (p, documented[p],
                                               json_type(v))
                 for p, v in live.items()
                 if json_type(v) not in re.findall(r"\w+", documented[p])]
        self.assertEqual(wrong, [], "raft_status() field types: %s"
                         % "; ".join(wrong))

    def test_members_columns(self):
        """Every raft_members column has its row, and no other."""
        self.assertIn("raft_members", self.live.modules)
        self.check("raft_members columns",
                   names(self.section("raft_members columns")),
                   self.live.members)

    def test_result_codes(self):
        """Every RAFTSQL_* code of ext/raftsql.h has its row, with its
        number, and no other."""
        rows = [r for r in self.section("Result codes")
                if r[0].startswith("`RAFTSQL_")]
        codes = codes_in_header()
        self.assertGreater(len(codes), 10)
        self.check("RAFTSQL_* codes", names(rows), codes)
        wrong = ["%s: documented %s, is %d" % (n, r[1], codes[n])
                 for n, r in zip(names(rows), rows)
                 if n in codes and r[1] != str(codes[n])]
        self.assertEqual(wrong, [], "; ".join(wrong))

    def test_metrics(self):
        """Every family raft_metrics() serves has its row, with its type,
        and no other."""
        rows = self.section("Metrics")
        documented = names(rows)
        self.assertGreater(len(self.live.metrics), 10)
        self.check("metrics", documented, self.live.metrics)
        wrong = ["%s: documented %s, is %s" % (n, r[1], self.live.metrics[n])
                 for n, r in zip(documented, rows)
                 if n in self.live.metrics and r[1] != self.live.metrics[n]]
        self.assertEqual(wrong, [], "; ".join(wrong))

    def test_links(self):
        """Every relative link of README.md and docs/*.md reaches a file
        that exists, and a heading of it when it names one."""
        files = ["README.md"] + ["docs/" + f for f in sorted(os.listdir(
            os.path.join(ROOT, "docs"))) if f.endswith(".md")]
        anchors = {}

        def anchors_of(path):
            if path not in anchors:
                seen, out = {}, set()
                text = re.sub(r"```.*?```", "", read(path), flags=re.S)
                for h in re.findall(r"^#+ (.*)$", text, re.M):
                    s = slug(h)
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    out.add(s if n == 0 else "%s-%d" % (s, n))
                anchors[path] = out
            return anchors[path]

        broken = []
        for path in files:
            text = re.sub(r"```.*?```", "", read(path), flags=re.S)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(
                    os.path.dirname(path), file)) if file else path
                if not os.path.exists(os.path.join(ROOT, dest)):
                    broken.append("%s: %s (no file %s)" % (path, target, dest))
                elif anchor and dest.endswith(".md") and \
                        anchor not in anchors_of(dest):
                    broken.append("%s: %s (no heading #%s in %s)"
                                  % (path, target, anchor, dest))
        self.assertEqual(broken, [], "broken links:\n" + "\n".join(broken))


if __name__ == "__main__":
    unittest.main()
