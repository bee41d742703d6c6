#!/usr/bin/env python3
"""Static opcode counts of step 19's consumer kernels (step19_bwd_kv at the default schedule: bulk adds, overlap,
dK first, --deterministic off), plain and --dq centered, from a `cuobjdump -sass` listing of the step19 program:
one line per kernel, its storage type, d, dQ split, centered or not, the total instruction count and the opcodes
that --dq centered touches (docs/19_hopper_backward.md, "--dq centered: what it costs, and why").
  cuobjdump -sass build/step19 > step19.sass && scripts/sass_opcodes.py step19.sass > counts.txt
"""
import re
import sys
from collections import Counter

OPCODES = ("SHFL", "RED", "REDG", "SEL", "FADD", "FSEL", "PRMT", "LOP3", "IMAD", "SHF", "HGMMA", "MUFU", "F2FP", "BAR", "LDS", "STS")


def main(path):
    txt = open(path).read()
    for f in re.split(r"\n\s*Function : ", txt)[1:]:
        name = f.split("\n")[0].strip()
        m = re.search(r"step19_bwd_kvI(6__half|13__nv_bfloat16)Li(\d+)ELb1ELb1ELi(\d)ELb1ELb0ELb([01])E", name)
        if not m:
            continue
        ins = [i.split(".")[0] for i in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", f)]
        c = Counter(ins)
        print(m.group(1), "d", m.group(2), "split", m.group(3), "centered", m.group(4), "total", len(ins),
              " ".join(f"{k}={c[k]}" for k in OPCODES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
