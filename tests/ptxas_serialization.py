#!/usr/bin/env python3
"""[sm90a] ptxas's report on steps 19's, 20's and 21's kernels: no default kernel may have its wgmmas serialized.

When ptxas cannot keep a warpgroup's wgmmas in flight (too few registers, accumulators touched between
issue and wait, a wgmma on one side of a branch) it serializes them and says so with a C75xx warning
("Potential Performance Loss: wgmma.mma_async instructions are serialized ..."). The kernel still runs
and passes every check, only slower: a measurement of it measures the compiler's choice. This test
compiles steps/19_hopper_backward/kernel.cu for sm_90a with -Xptxas -v and requires that every default
kernel — each storage type, each head dimension of kHeadDims, --deterministic off and on, the default
dQ split and product order — is compiled and carries no such warning. The ablations' warnings are
listed (docs/19_hopper_backward.md, "Read the compiler's report before reading an ablation"). Step 20's
kernels (docs/20_persistent.md, "Registers") the same way: every storage type, head dimension and --exp2,
the lazy rescale on; its spills are listed. Step 21's forward (docs/21_fp8.md, "Registers and shared
memory"): each head dimension, Vᵀ transposed in the kernel and pretransposed.
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


def step20(nvcc, root):
    """Step 20: every kernel of the defaults (each type, head dimension and --exp2, the lazy rescale on)
    compiled and unserialized; the rescale ablation's listed."""
    step = os.path.join(root, "steps", "20_persistent")
    sched = open(os.path.join(step, "schedule.hpp")).read()
    dims = [int(x) for x in re.search(r"kHeadDims\[\] = \{([^}]*)\}", sched).group(1).split(",")]
    modes = [x.split("=")[0].strip() for x in re.search(r"enum Exp2 : int \{([^}]*)\}", sched).group(1).split(",")]
    modes = [m for m in modes if m != "kExp2Choices"]
    out, rc = compile_report(nvcc, root, step)
    if rc != 0:
        print(out[-4000:])
        print(f"ptxas_serialization: nvcc exited {rc} on step 20")
        return 1
    entries = re.findall(r"Compiling entry function '([^']+)' for 'sm_90a'\n(?:.*\n)*?.*?(\d+) bytes spill stores", out)
    warned = serialization_warnings(out)
    pat = re.compile(r"step20_persistentI(6__half|13__nv_bfloat16)Li(\d+)ELi\d+ELi\d+ELi\d+ELb[01]ELi(\d+)ELb([01])E")
    found, bad = set(), []
    for fn, spill in entries:
        m = pat.search(fn)
        if not m:
            continue
        t, d, ex, lazy = m.groups()
        name = f"{'fp16' if 'half' in t else 'bf16'} d={d} exp2={modes[int(ex)]} lazy={lazy}"
        w = ",".join(warned.get(fn, [])) or "none"
        print(f"{'default ' if lazy == '1' else 'ablation'}  step 20 {name}: wgmma serialization warnings {w}, "
              f"{spill} bytes spilled")
        if lazy == "1":
            found.add((t, int(d), int(ex)))
            if fn in warned:
                bad.append(name)
    missing = [(t, d, e) for t in ("6__half", "13__nv_bfloat16") for d in dims for e in range(len(modes)) if (t, d, e) not in found]
    for m in missing:
        print(f"ptxas_serialization: no step 20 kernel compiled for {m} (has the template changed?)")
    for b in bad:
        print(f"ptxas_serialization: ptxas serialized the wgmmas of a step 20 kernel: {b}")
    print(f"ptxas_serialization: step 20: {len(found)} default kernels checked, {len(bad)} serialized, {len(missing)} missing")
    return 1 if bad or missing else 0


def step21(nvcc, root):
    """Step 21: the forward at each head dimension, Vᵀ in the kernel (RawV) and pretransposed, compiled and
    unserialized; spills listed."""
    step = os.path.join(root, "steps", "21_fp8")
    sched = open(os.path.join(step, "schedule.hpp")).read()
    dims = [int(x) for x in re.search(r"kHeadDims\[\] = \{([^}]*)\}", sched).group(1).split(",")]
    out, rc = compile_report(nvcc, root, step)
    if rc != 0:
        print(out[-4000:])
        print(f"ptxas_serialization: nvcc exited {rc} on step 21")
        return 1
    entries = re.findall(r"Compiling entry function '([^']+)' for 'sm_90a'\n(?:.*\n)*?.*?(\d+) bytes spill stores", out)
    warned = serialization_warnings(out)
    pat = re.compile(r"step21_fp8ILi(\d+)ELi\d+ELb([01])E")
    found, bad = set(), []
    for fn, spill in entries:
        m = pat.search(fn)
        if not m:
            continue
        d, raw = int(m.group(1)), m.group(2) == "1"
        name = f"d={d} v={'kernel' if raw else 'pretransposed'}"
        w = ",".join(warned.get(fn, [])) or "none"
        print(f"default   step 21 {name}: wgmma serialization warnings {w}, {spill} bytes spilled")
        found.add((d, raw))
        if fn in warned:
            bad.append(name)
    missing = [(d, r) for d in dims for r in (False, True) if (d, r) not in found]
    for m in missing:
        print(f"ptxas_serialization: no step 21 kernel compiled for {m} (has the template changed?)")
    for b in bad:
        print(f"ptxas_serialization: ptxas serialized the wgmmas of a step 21 kernel: {b}")
    print(f"ptxas_serialization: step 21: {len(found)} default kernels checked, {len(bad)} serialized, {len(missing)} missing")
    return 1 if bad or missing else 0


def main():
    nvcc, root = sys.argv[1], sys.argv[2]
    r20 = step20(nvcc, root)
    r21 = step21(nvcc, root)
    step = os.path.join(root, "steps", "19_hopper_backward")
    sched = open(os.path.join(step, "schedule.hpp")).read()
    dims = [int(x) for x in re.search(r"kHeadDims\[\] = \{([^}]*)\}", sched).group(1).split(",")]
    splits = [x.split("=")[0].strip() for x in re.search(r"enum DqSplit : int \{([^}]*)\}", sched).group(1).split(",")]
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
    warned = {}
    for code, fn in re.findall(r"\((C75\d\d)\) Potential Performance Loss: wgmma[^']*function '([^']+)'", out):
        warned.setdefault(fn, []).append(code)
    pat = re.compile(r"step19_bwd_kvI(6__half|13__nv_bfloat16)Li(\d+)ELb([01])ELb([01])ELi(\d+)ELb([01])ELb([01])E")
    found, bad = {}, []
    for fn in sorted(entries):
        m = pat.search(fn)
        if not m:
            continue
        t, d, bulk, ov, split, dkfirst, det = m.groups()
        d = int(d)
        default_split = splits.index("kByColumns" if (d // 2) % panel == 0 else "kByTurns")
        is_default = (bulk, ov, dkfirst) == ("1", "1", "1") and int(split) == default_split
        name = f"{'fp16' if 'half' in t else 'bf16'} d={d} bulk={bulk} overlap={ov} split={splits[int(split)]} dk-first={dkfirst} det={det}"
        w = ",".join(warned.get(fn, [])) or "none"
        print(f"{'default ' if is_default else 'ablation'}  {name}: wgmma serialization warnings {w}")
        if is_default:
            found[(t, d, det)] = fn
            if fn in warned:
                bad.append(name)
    missing = [(t, d, det) for t in ("6__half", "13__nv_bfloat16") for d in dims for det in "01" if (t, d, det) not in found]
    for m in missing:
        print(f"ptxas_serialization: no default kernel compiled for {m} (has the template changed?)")
    for b in bad:
        print(f"ptxas_serialization: ptxas serialized the wgmmas of a default kernel: {b}")
    print(f"ptxas_serialization: {len(found)} default kernels checked, {len(bad)} serialized, {len(missing)} missing")
    return 1 if bad or missing or r20 or r21 else 0


if __name__ == "__main__":
    sys.exit(main())
