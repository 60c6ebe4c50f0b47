#!/usr/bin/env python3
"""Fill a man page's Markdown (docs/man/*.md) with tables of
docs/reference.md, so that the man pages come from the reference.

Usage: man_reference.py REFERENCE.md < PAGE.md > OUT.md

A line of PAGE.md that is exactly `<!-- reference: HEADING -->` is
replaced by the table under the `## HEADING` of REFERENCE.md, as a
definition list that go-md2man turns into roff: each row's first cell in
bold (its backquotes dropped), its other cells as the paragraph, with
Markdown links reduced to their text ("[Details](x.md#y)" dropped). A
heading that REFERENCE.md lacks, or one without a table, is an error
naming it (exit 1), so a page cannot silently lose a section.
"""

import re
import sys

MARK = re.compile(r"^<!-- reference: (.+?) -->$")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def tables(ref):
    """{heading: (header cells, [row cells, ...])} of every `## heading`
    of @ref (text) with a Markdown table under it (its first)."""
    out, heading, rows, header = {}, None, None, None
    for line in ref.splitlines():
        if line.startswith("## "):
            heading, rows = line[3:].strip(), None
            continue
        if heading is None or not line.startswith("|"):
            if rows:
                out.setdefault(heading, (header, rows))
                heading = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if rows is None:
            rows, header = [], cells
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the rule under the header
        rows.append(cells)
    if heading is not None and rows:
        out.setdefault(heading, (header, rows))
    return out


def plain(text):
    """@text with links reduced to their text, "Details." links gone,
    and backquotes turned into bold."""
    text = re.sub(r"\s*\[Details\]\([^)]*\)\.?", "", text)
    text = LINK.sub(r"\1", text)
    return re.sub(r"`([^`]+)`", r"**\1**", text).strip()


def render(header, rows):
    """A definition list of @rows (under @header) for go-md2man: the
    first cell the term, the last its paragraph, the cells between
    after it as "(header: value; ...)"."""
    lines = []
    for cells in rows:
        name = cells[0].replace("`", "").replace("\\|", "|")
        text = plain(cells[-1]) if len(cells) > 1 else ""
        extra = ["%s: %s" % (h, plain(c))
                 for h, c in zip(header[1:-1], cells[1:-1]) if c]
        if extra:
            text += " (%s)" % "; ".join(extra)
        lines.append("**%s**" % name)
        lines.append(":   %s" % text)
        lines.append("")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        found = tables(f.read())
    out = []
    for n, line in enumerate(sys.stdin, 1):
        m = MARK.match(line.rstrip("\n"))
        if not m:
            out.append(line)
            continue
        heading = m.group(1)
        if heading not in found:
            sys.stderr.write("man_reference: line %d: %s has no table under "
                             "'## %s'\n" % (n, argv[1], heading))
            return 1
        out.append(render(*found[heading]) + "\n")
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
