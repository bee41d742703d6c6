#!/usr/bin/env python3
"""[sm90a] ptxas's report on steps 19's, 20's and 21's kernels: no default kernel may have its wgmmas serialized.

When ptxas cannot keep a warpgroup's wgmmas in flight (too few registers, accumulators touched between
issue and wait, a wgmma on one side of a branch) it serializes them and says so with a C75xx warning
("Potential Performance Loss: wgmma.mma_async instructions are serialized ..."). The kernel still runs
and passes every check, only slower: a measurement of it measures the compiler's choice. This test
compiles steps/19_hopper_backward/kernel.cu for sm_90a with -Xptxas -v and requires that every default
kernel — each storage type, each head dimension of kHeadDims, --deterministic off and on, --dq centered, --dropout,
the default dQ split and product order — is compiled and carries no such warning. The ablations' warnings are
listed (docs/19_hopper_backward.md, "Read the compiler's report before reading an ablation"). Step 20's
kernels (docs/20_persistent.md, "Registers") the same way: every storage type, head dimension and --exp2,
the lazy rescale on; its spills are listed. Step 21's forward (docs/21_fp8.md, "Registers and shared
memory"): each head dimension and each way of bringing Vᵀ (--v) built there, at the default --pv and --ops of that d.
  tests/ptxas_serialization.py NVCC REPO_ROOT
"""
import os
import re
import subprocess
import sys
import tempfile


def compile_report(nvcc, root, step):
    """ptxas's -v report of a step's kernel.cu for sm_90a: (output, return code)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
               "-I" + os.path.join(root, "common"), "-I" + step, "-c", os.path.join(step, "kernel.cu"),
               "-o", os.path.join(tmp, "kernel.o")]
        run = subprocess.run(cmd, capture_output=True, text=True)
    return run.stdout + run.stderr, run.returncode


def serialization_warnings(out):
    warned = {}
    for code, fn in re.findall(r"\((C75\d\d)\) Potential Performance Loss: wgmma[^']*function '([^']+)'", out):
        warned.setdefault(fn, []).append(code)
    return warned


def check_step(nvcc, root, folder, nn, pattern, classify, expected):
    """Compile steps/FOLDER/kernel.cu and hold the kernels `pattern` matches: classify(match) gives a kernel's
    key, its name and whether it is a default one. Every key of `expected` must be among the defaults'
    keys, and no default kernel may have its wgmmas serialized. Each kernel's warnings and spill are listed."""
    step = os.path.join(root, "steps", folder)
    out, rc = compile_report(nvcc, root, step)
    if rc != 0:
        print(out[-4000:])
        print(f"ptxas_serialization: nvcc exited {rc} on step {nn}")
        return 1
    entries = re.findall(r"Compiling entry function '([^']+)' for 'sm_90a'\n(?:.*\n)*?.*?(\d+) bytes spill stores", out)
    warned = serialization_warnings(out)
    found, bad = set(), []
    for fn, spill in entries:
        m = re.search(pattern, fn)
        if not m:
            continue
        key, name, default = classify(m)
        w = ",".join(warned.get(fn, [])) or "none"
        print(f"{'default ' if default else 'ablation'}  step {nn} {name}: wgmma serialization warnings {w}, {spill} bytes spilled")
        if default:
            found.add(key)
            if fn in warned:
                bad.append(name)
    missing = [k for k in expected if k not in found]
    for m in missing:
        print(f"ptxas_serialization: no step {nn} kernel compiled for {m} (has the template changed?)")
    for b in bad:
        print(f"ptxas_serialization: ptxas serialized the wgmmas of a step {nn} kernel: {b}")
    print(f"ptxas_serialization: step {nn}: {len(found)} default kernels checked, {len(bad)} serialized, {len(missing)} missing")
    return 1 if bad or missing else 0


def head_dims(root, folder):
    sched = open(os.path.join(root, "steps", folder, "schedule.hpp")).read()
    return sched, [int(x) for x in re.search(r"kHeadDims\[\] = \{([^}]*)\}", sched).group(1).split(",")]


def step20(nvcc, root):
    """Step 20: every kernel of the defaults (each type, head dimension and --exp2, the lazy rescale on)
    compiled and unserialized; the rescale ablation's listed."""
    sched, dims = head_dims(root, "20_persistent")
    modes = [x.split("=")[0].strip() for x in re.search(r"enum Exp2 : int \{([^}]*)\}", sched).group(1).split(",")]
    modes = [m for m in modes if m != "kExp2Choices"]

    def classify(m):
        t, d, ex, lazy = m.groups()
        return ((t, int(d), int(ex)), f"{'fp16' if 'half' in t else 'bf16'} d={d} exp2={modes[int(ex)]} lazy={lazy}", lazy == "1")
    expected = [(t, d, e) for t in ("6__half", "13__nv_bfloat16") for d in dims for e in range(len(modes))]
    return check_step(nvcc, root, "20_persistent", 20,
                      r"step20_persistentI(6__half|13__nv_bfloat16)Li(\d+)ELi\d+ELi\d+ELi\d+ELb[01]ELi(\d+)ELb([01])E", classify, expected)


def step21(nvcc, root):
    """Step 21: the forward at each head dimension, Vᵀ in the kernel (RawV, its addresses rebuilt or stepped)
    and pretransposed, compiled and unserialized; spills listed."""
    sched, dims = head_dims(root, "21_fp8")
    ways = {(False, False): "pretransposed", (True, False): "kernel", (True, True): "kernel-stepped"}  # <RawV, Stepped>
    names = re.findall(r'"([^"]+)"', re.search(r"kVLayoutNames\[kVLayouts\] = \{([^}]*)\}", sched).group(1))
    if sorted(names) != sorted(ways.values()):
        print(f"ptxas_serialization: step 21's --v choices {names} are not the kernels this test knows {sorted(ways.values())}")
        return 1

    ops_enum = [x.split("=")[0].strip() for x in re.search(r"enum Ops : int \{([^}]*)\}", sched).group(1).split(",")]
    ops_names = re.findall(r'"([^"]+)"', re.search(r"kOpsNames\[kOpsChoices\] = \{([^}]*)\}", sched).group(1))
    # [per-d-defaults] the pair --pv auto and --ops auto resolve to at each d: "d >= W ? WIDE : NARROW"
    auto = {}
    for fn in ("default_pv_order", "default_ops"):
        m = re.search(fn + r"\(int d\) \{ return d >= (\d+) \? (\w+) : (\w+); \}", sched)
        if not m:
            print(f"ptxas_serialization: step 21's {fn} is not of the form this test reads (d >= W ? A : B)")
            return 1
        auto[fn] = (int(m.group(1)), m.group(2), m.group(3))

    def auto_pair(d):  # (serial, ops index) of the defaults at d
        w, wide, narrow = auto["default_pv_order"]
        serial = (wide if d >= w else narrow) == "kPvSerial"
        w, wide, narrow = auto["default_ops"]
        return serial, ops_enum.index(wide if d >= w else narrow)
    # [sw64] the transposers (RawV) are built from kRawVMinD only
    raw_min = int(re.search(r"kRawVMinD = (\d+);", sched).group(1))

    def classify(m):  # <D, Stages, RawV, Stepped, Serial, Ops>: the defaults' --pv and --ops checked, the others listed
        d, raw, stepped = int(m.group(1)), m.group(2) == "1", m.group(3) == "1"
        serial, ops = m.group(4) == "1", int(m.group(5))
        name = f"d={d} v={ways.get((raw, stepped), '?')}" + (" pv=serial" if serial else "") + (f" ops={ops_names[ops]}" if ops else "")
        return (d, raw, stepped), name, (serial, ops) == auto_pair(d)
    return check_step(nvcc, root, "21_fp8", 21, r"step21_fp8ILi(\d+)ELi\d+ELb([01])ELb([01])ELb([01])ELi(\d)E", classify,
                      [(d, r, st) for d in dims for (r, st) in ways if d >= raw_min or not r])


def main():
    nvcc, root = sys.argv[1], sys.argv[2]
    r20 = step20(nvcc, root)
    r21 = step21(nvcc, root)
    step = os.path.join(root, "steps", "19_hopper_backward")
    sched = open(os.path.join(step, "schedule.hpp")).read()
    dims = [int(x) for x in re.search(r"kHeadDims\[\] = \{([^}]*)\}", sched).group(1).split(",")]
    splits = [x.split("=")[0].strip() for x in re.search(r"enum DqSplit : int \{([^}]*)\}", sched).group(1).split(",")]
    issuers = [x.split("=")[0].strip() for x in re.search(r"enum LoadIssuer : int \{([^}]*)\}", sched).group(1).split(",")]
    layout = open(os.path.join(root, "common", "kernel", "wgmma_layout.hpp")).read()
    panel = int(re.search(r"constexpr int kPanel = (\d+);", layout).group(1))  # default_split: by columns where half of d is whole panels
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
               "-I" + os.path.join(root, "common"), "-I" + step, "-c", os.path.join(step, "kernel.cu"),
               "-o", os.path.join(tmp, "kernel.o")]
        run = subprocess.run(cmd, capture_output=True, text=True)
    out = run.stdout + run.stderr
    if run.returncode != 0:
        print(out[-4000:])
        print(f"ptxas_serialization: nvcc exited {run.returncode}")
        return 1
    entries = set(re.findall(r"Compiling entry function '([^']+)'", out))
    spills = dict(re.findall(r"Compiling entry function '([^']+)' for 'sm_90a'\n(?:.*\n)*?.*?(\d+) bytes spill stores", out))
    warned = {}
    for code, fn in re.findall(r"\((C75\d\d)\) Potential Performance Loss: wgmma[^']*function '([^']+)'", out):
        warned.setdefault(fn, []).append(code)
    pat = re.compile(r"step19_bwd_kvI(6__half|13__nv_bfloat16)Li(\d+)ELb([01])ELb([01])ELi(\d+)ELb([01])ELb([01])ELb([01])ELb([01])ELi(\d)ELb([01])E")
    found, bad = {}, []
    for fn in sorted(entries):
        m = pat.search(fn)
        if not m:
            continue
        t, d, bulk, ov, split, dkfirst, det, cent, drop, issue, sw = m.groups()
        d = int(d)
        default_split = splits.index("kByColumns" if (d // 2) % panel == 0 else "kByTurns")
        is_default = (bulk, ov, dkfirst, issue, sw) == ("1", "1", "1", "0", "1") and int(split) == default_split
        name = (f"{'fp16' if 'half' in t else 'bf16'} d={d} bulk={bulk} overlap={ov} split={splits[int(split)]} dk-first={dkfirst} "
                f"det={det} centered={cent} dropout={drop} loads={issuers[int(issue)]} swapped={sw}")
        w = ",".join(warned.get(fn, [])) or "none"
        print(f"{'default ' if is_default else 'ablation'}  {name}: wgmma serialization warnings {w}, {spills.get(fn, '?')} bytes spilled")
        if is_default:
            found[(t, d, det, cent, drop)] = fn
            if fn in warned:
                bad.append(name)
    # --deterministic, --dq centered and --dropout as compiled: alone, and dropout with --deterministic
    combos = (("0", "0", "0"), ("1", "0", "0"), ("0", "1", "0"), ("0", "0", "1"), ("1", "0", "1"))
    wanted = [(t, d) + c for t in ("6__half", "13__nv_bfloat16") for d in dims for c in combos]
    missing = [k for k in wanted if k not in found]
    for m in missing:
        print(f"ptxas_serialization: no default kernel compiled for {m} (has the template changed?)")
    for b in bad:
        print(f"ptxas_serialization: ptxas serialized the wgmmas of a default kernel: {b}")
    print(f"ptxas_serialization: {len(found)} default kernels checked, {len(bad)} serialized, {len(missing)} missing")
    return 1 if bad or missing or r20 or r21 else 0


if __name__ == "__main__":
    sys.exit(main())
