#!/usr/bin/env python3
"""How a step's kernel.cu differs from its predecessor's, counted per anchor.

  python3 scripts/step_diff.py NN     print step NN's table: lines added and removed per anchor tag

Each step's doc has a section "## The change against step MM" (or "## The change, ...") listing the
ideas the step adds. This script derives, from the two kernel.cu files, which anchors (`// [tag]`
comments) the changed lines belong to, so that the doc's list can be checked against the diff
(`untabled`, run by tests/test_step_diff.py) and no line count is ever typed into a doc.

Before the diff, the step's own number is taken out of its names (step07_causal_skip and step06_deferred
are both stepNN_...) and the lab markers (`// lab:begin`, `// lab:end`) are dropped: neither is an idea.

Attribution, hunk by hunk (the hunks of `diff -U0`, from difflib):
  - a hunk belongs to every anchor its added lines carry;
  - else to the anchor comment nearest above it in the new file;
  - a hunk that only removes lines: to the anchor nearest above it in the old file;
  - a hunk with no anchor at all, or above the first one: to the "(no anchor)" row.
A hunk that carries several anchors counts in each of their rows, so the rows may sum to more than
the total, which is printed apart. Standard library only.
"""
import difflib
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each step's predecessor: the step its doc's change section is written against (docs/NN_*.md, the
# section "## The change ..."). REWRITE marks a kernel.cu written anew, to be read rather than
# diffed: the doc says so, and there is no table of lines.
REWRITE = "rewrite"
PREV = {
    2: (1, REWRITE),   # docs/02: one fused kernel in place of step 01's three
    3: (2, REWRITE),   # docs/03: FlashAttention-1's tiled loop, new code around step 02's update
    4: (3, None),      # docs/04, "The change against step 03"
    5: (4, None),      # docs/05, "The change against step 04"
    6: (5, None),      # docs/06, "The change against step 05"
    7: (6, None),      # docs/07, "The change against step 06"
    8: (7, REWRITE),   # docs/08: the backward pass; its forward is step 07's kernel, unchanged
    9: (7, None),      # docs/09, "The change against step 07"
    10: (9, None),     # docs/10, "The change against step 09"
    11: (10, None),    # docs/11, "The change against step 10"
    12: (11, None),    # docs/12, "The change against step 11"
    13: (8, REWRITE),  # docs/13, "The change against step 08": step 08's schedule, rewritten
    14: (12, None),    # docs/14, "The change against step 12"
    15: (14, None),    # docs/15, "The change against step 14"
    16: (15, None),    # docs/16, "The change against step 15"
    17: (12, None),    # docs/17, "The change, idea by idea": against step 12
    18: (12, REWRITE),  # docs/18: step 12's kernel runs unchanged; kernel.cu holds only the ring
    19: (13, REWRITE),  # docs/19: step 13's schedule rebuilt on steps 14-16's tools, written anew
    20: (16, None),    # docs/20, "The change against step 16"
    21: (16, None),    # docs/21, "The change against step 16"
}

# Tags the diff may attribute lines to that are not ideas of a step, and so need not be in its
# change section. Empty: every tag a diff touches is named by its doc.
IGNORE = set()

NO_ANCHOR = "(no anchor)"
# An anchor: a `//` comment that begins with one or more bracketed tags, `// [a]` or `// [a] [b]`.
# A tag is followed by a space or the line's end: "[lane][slot]" is an index, not an anchor (the same
# rule as tests/test_docs.cpp's code-to-doc test).
ANCHOR = re.compile(r"//\s*((?:\[[a-z][a-z0-9-]*\](?=\s|$)\s*)+)")
TAG = re.compile(r"\[([a-z][a-z0-9-]*)\]")
NAMED = re.compile(r"`\[([a-z0-9][a-z0-9-]*)\]`")


def anchors(line):
    """The tags of the anchor comments on one line, in order."""
    out = []
    for m in ANCHOR.finditer(line):
        out += TAG.findall(m.group(1))
    return out


def nearest_above(lines, i):
    """The tags of the nearest anchor comment on a line before index i (i excluded), or []."""
    for k in range(min(i, len(lines)) - 1, -1, -1):
        tags = anchors(lines[k])
        if tags:
            return tags
    return []


def attribute(old, new):
    """{tag: [added, removed]} for the hunks of old -> new (lists of lines), plus the totals."""
    rows, total = {}, [0, 0]
    sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        added, removed = new[j1:j2], old[i1:i2]
        tags = []
        for line in added:
            tags += [t for t in anchors(line) if t not in tags]
        if not tags:
            tags = nearest_above(new, j1) if added else nearest_above(old, i1)
        for t in tags or [NO_ANCHOR]:
            r = rows.setdefault(t, [0, 0])
            r[0] += len(added)
            r[1] += len(removed)
        total[0] += len(added)
        total[1] += len(removed)
    return rows, total


def step_dir(step):
    found = glob.glob(os.path.join(ROOT, "steps", f"{step:02d}_*"))
    if not found:
        raise SystemExit(f"no step {step:02d} under steps/")
    return found[0]


# Not ideas, so not diffed: the step's own number in its names (step07_causal_skip, fa::step07,
# "step07: ..." in messages) and the lab markers, which only say where a handout's region lies.
STEP_ID = re.compile(r"\bstep\d\d(?=_|\b)")
LAB_MARKER = re.compile(r"^\s*// lab:(begin|end)\b")


def normalized(text):
    return [STEP_ID.sub("stepNN", line) for line in text.splitlines() if not LAB_MARKER.match(line)]


def kernel(step):
    with open(os.path.join(step_dir(step), "kernel.cu")) as f:
        return normalized(f.read())


def rel(step):
    return os.path.relpath(os.path.join(step_dir(step), "kernel.cu"), ROOT)


def table(step):
    """Markdown: the lines of step's kernel.cu added and removed against its predecessor, per anchor."""
    prev, kind = PREV[step]
    if kind == REWRITE:
        return (f"`{rel(step)}` is written anew rather than changed from `{rel(prev)}`: "
                f"it is to be read whole, not diffed.")
    rows, total = attribute(kernel(prev), kernel(step))
    order = sorted((t for t in rows if t != NO_ANCHOR), key=lambda t: (-sum(rows[t]), t))
    if NO_ANCHOR in rows:
        order.append(NO_ANCHOR)
    out = [f"`{rel(step)}` against `{rel(prev)}`, lines per anchor (a hunk that carries several "
           f"anchors counts in each):", "",
           "| anchor | added | removed |", "|---|---:|---:|"]
    own = set()  # the anchors anywhere in the step's own files
    for f in glob.glob(os.path.join(step_dir(step), "*")):
        with open(f, encoding="utf-8") as fh:
            own |= {t for line in fh for t in anchors(line)}
    for t in order:
        # An anchor only the predecessor has is named as its, without the backticks a doc uses for
        # its own step's anchors (tests/test_docs.cpp: a step's doc names only its own).
        name = t if t == NO_ANCHOR else f"`[{t}]`" if t in own else f"[{t}] (step {prev:02d}'s, gone)"
        out.append(f"| {name} | {rows[t][0]} | {rows[t][1]} |")
    out.append(f"| all hunks | {total[0]} | {total[1]} |")
    return "\n".join(out)


def change_section(doc_text):
    """The doc's change section: from its '## The change' heading to the next '## ' heading."""
    m = re.search(r"^## The change[^\n]*\n(.*?)(?=^## |\Z)", doc_text, re.S | re.M)
    return m.group(1) if m else ""


def untabled(step, doc_text):
    """Tags the diff attributes lines to that the doc's change section does not name."""
    prev, kind = PREV[step]
    if kind == REWRITE:
        return []
    rows, _ = attribute(kernel(prev), kernel(step))
    named = set(NAMED.findall(change_section(doc_text)))
    # A tag the step's own code no longer has (an idea it drops) cannot be named as `[tag]`: a step's
    # doc names only its own step's anchors and common/'s (tests/test_docs.cpp). Its doc says in words
    # what is dropped.
    own = set()
    for name in os.listdir(step_dir(step)):
        with open(os.path.join(step_dir(step), name), errors="replace") as f:
            for line in f:
                own.update(anchors(line))
    return sorted(t for t in rows if t != NO_ANCHOR and t in own and t not in named and t not in IGNORE)


def doc_path(step):
    name = os.path.basename(step_dir(step))
    return os.path.join(ROOT, "docs", name + ".md")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit() or int(argv[0]) not in PREV:
        steps = ", ".join(f"{s:02d}" for s in sorted(PREV))
        print(f"usage: scripts/step_diff.py NN   (NN one of {steps})", file=sys.stderr)
        return 2
    print(table(int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
