#!/usr/bin/env python3
"""Apply one mutant (tests/mutants/NN_name/REGION--SLUG.patch) to a step's file, strictly.

    apply_mutant.py SRC PATCH OUT

The patch is a unified diff of one file (its first line says what the mistake is). Every hunk
must match SRC exactly at its line, and every changed line must lie inside the lab region
REGION (// lab:begin REGION ... // lab:end): a mutant is a student's mistake in a region.
OUT is written only when all of that holds; otherwise the script says why and exits 1."""
import os
import re
import sys


def fail(msg):
    sys.exit(f"apply_mutant: {msg}")


def main():
    if len(sys.argv) != 4:
        fail("usage: apply_mutant.py SRC PATCH OUT")
    src_path, patch_path, out_path = sys.argv[1:]
    region = os.path.basename(patch_path).split("--")[0]
    src = open(src_path, encoding="utf-8").read().split("\n")
    patch = open(patch_path, encoding="utf-8").read().split("\n")
    # Which source lines (0-based) lie inside REGION.
    inside, cur = set(), None
    for n, line in enumerate(src):
        m = re.match(r"\s*// lab:begin ([A-Za-z0-9_.-]+)", line)
        if m:
            cur = m.group(1)
        elif re.match(r"\s*// lab:end", line):
            cur = None
        elif cur == region:
            inside.add(n)
    if not inside:
        fail(f"{src_path} has no lab region '{region}' (the patch's name says REGION--SLUG.patch)")
    out, at, hunks, i = [], 0, 0, 0
    while i < len(patch):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", patch[i])
        if not m:
            i += 1
            continue
        hunks += 1
        start = int(m.group(1)) - 1
        if start < at:
            fail(f"hunk {hunks} overlaps the one before it")
        out.extend(src[at:start])
        at = start
        i += 1
        while i < len(patch) and patch[i][:1] in (" ", "-", "+"):
            tag, text = patch[i][0], patch[i][1:]
            if tag in " -":
                if at >= len(src) or src[at] != text:
                    fail(f"hunk {hunks} does not match {src_path}:{at + 1}: expected {text!r}")
                if tag == "-" and at not in inside:
                    fail(f"hunk {hunks} removes {src_path}:{at + 1}, outside the region '{region}'")
                if tag == " ":
                    out.append(text)
                at += 1
            else:
                if at not in inside and (at - 1) not in inside:
                    fail(f"hunk {hunks} adds a line at {src_path}:{at + 1}, outside the region '{region}'")
                out.append(text)
            i += 1
    if hunks == 0:
        fail(f"{patch_path} has no hunk")
    out.extend(src[at:])
    if out == src:
        fail(f"{patch_path} changes nothing")
    with open(out_path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    os.replace(out_path + ".tmp", out_path)


if __name__ == "__main__":
    main()
