"""scripts/sass_profile.py: the control codes decoded, the loops found, the classes counted, and the chain
replayed on listings made here (each instruction's control word written from the fields it should
decode to), then on the committed listing of a real kernel (tests/data/*.sass) where there is one."""
import os
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass_profile as sp  # noqa: E402


def word(stall=1, yld=0, wbar=7, rbar=7, wait=0, reuse=0):
    ctrl = stall | yld << 4 | wbar << 5 | rbar << 8 | wait << 11 | reuse << 17
    return ctrl << 41 | 0x0000000000e00ff


def listing(name, body):
    """body: [(label or None, text, control fields)] -> cuobjdump -sass text."""
    out = [f"\tcode for sm_90", f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
    for k, (label, text, ctrl) in enumerate(body):
        if label:
            out.append(f"{label}:")
        out.append(f"        /*{16 * k:04x}*/                   {text} ;   /* 0x000000ff00007b82 */")
        out.append(f"                                                      /* {word(**ctrl):#018x} */")
    return "\n".join(out) + "\n"


LAT = {"smem-latency": 30.0, "l2-latency": 300.0, "ex2-latency": 20.0, "mma-latency": 33.0, "fma-latency": 4.0,
       "barrier-latency": 20.0}
NAME = "_ZN2fa6step0315step03_kv_outerI6__halfLi128EEEvNS_10AttnParamsEPfS4_S4_"
LOOP = [
    (None, "S2R R0, SR_TID.X", dict(stall=1, wbar=0)),
    (None, "MOV R2, RZ", dict(stall=1, wait=0b000001)),
    (".L_x_0", "LDS R4, [R0]", dict(stall=1, wbar=1)),             # sets SB1 at issue + 30
    (None, "FFMA R5, R4, R4, R2", dict(stall=4, wait=0b000010)),   # waits for SB1
    (None, "MUFU.EX2 R6, R5", dict(stall=1, wbar=2)),              # sets SB2 at issue + 20
    (None, "HMMA.16816.F32 R8, R12, R16, R8", dict(stall=2, wait=0b000100)),
    (None, "BAR.SYNC.DEFER_BLOCKING 0x0", dict(stall=1)),
    (None, "ISETP.GE.AND P0, PT, R2, 0x10, PT", dict(stall=1)),
    (None, "@!P0 BRA `(.L_x_0)", dict(stall=5)),
    (None, "EXIT", dict(stall=5)),
]


class Decode(unittest.TestCase):
    def test_control_fields_round_trip(self):
        for f in (dict(stall=0), dict(stall=15, yld=1), dict(wbar=3), dict(rbar=5, wait=0b101010), dict(reuse=0xF)):
            full = dict(dict(stall=1, yld=0, wbar=7, rbar=7, wait=0, reuse=0), **f)
            ins = sp.Instr(0, "NOP", word(**full))
            self.assertEqual((ins.stall, ins.yld, ins.wbar, ins.rbar, ins.wait, ins.reuse),
                             (full["stall"], full["yld"], full["wbar"], full["rbar"], full["wait"], full["reuse"]))

    def test_a_real_word(self):
        # IMAD.MOV's second word as cuobjdump prints it: stall 2, no scoreboard, no wait.
        ins = sp.Instr(0, "IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28]", 0x000fc400078e00ff)
        self.assertEqual((ins.stall, ins.wbar, ins.rbar, ins.wait), (2, 7, 7, 0))

    def test_parse_labels_loops_classes(self):
        (f,) = sp.parse(listing(NAME, LOOP))
        self.assertEqual(len(f.instrs), len(LOOP))
        self.assertEqual(f.labels, {".L_x_0": 2})
        self.assertEqual(f.loops(), [(2, 8)])
        c = sp.counts(f.instrs[2:9])
        self.assertEqual(c, {"gmem": 0, "smem": 1, "mma": 1, "sfu": 1, "barrier": 1, "control": 1, "alu": 2})
        self.assertEqual(sp.marker(c), "mma")
        self.assertEqual(f.instrs[8].pred, "@!P0")

    def test_identity(self):
        self.assertEqual(sp.identity(NAME), ("kv_outer", "fp16", 128))


class Chain(unittest.TestCase):
    def test_one_trip_by_hand(self):
        (f,) = sp.parse(listing(NAME, LOOP))
        body = f.instrs[2:9]
        # LDS at 0 (SB1 free at 30); FFMA waits to 30, +4 -> MUFU at 34 (SB2 free at 54), +1 -> HMMA waits to
        # 54, +2 -> BAR at 56, held 20 -> ISETP at 76, +1 -> BRA at 77, +5 -> 82.
        self.assertAlmostEqual(sp.chain(body, LAT, trips=1), 82.0)
        # The second trip starts at 82 with every scoreboard free again: the same length.
        self.assertAlmostEqual(sp.chain(body, LAT, trips=2), 82.0)

    def test_a_longer_latency_lengthens_the_chain(self):
        (f,) = sp.parse(listing(NAME, LOOP))
        body = f.instrs[2:9]
        slow = dict(LAT, **{"smem-latency": 130.0})
        self.assertAlmostEqual(sp.chain(body, slow, trips=1) - sp.chain(body, LAT, trips=1), 100.0)

    def test_a_loop_carried_wait(self):
        # A load issued at the end of one trip and waited on at the start of the next.
        body = [(".L_x_1", "FFMA R5, R4, R4, R2", dict(stall=1, wait=0b000001)),
                (None, "LDS R4, [R0]", dict(stall=1, wbar=0)),
                (None, "BRA `(.L_x_1)", dict(stall=1))]
        (f,) = sp.parse(listing(NAME, body))
        # Trip 1: FFMA 0, LDS 1 (SB0 free at 31), BRA 2 -> 3. Trip 2: FFMA waits to 31: 31 .. 34, length 31.
        self.assertAlmostEqual(sp.chain(f.instrs, LAT, trips=2), 31.0)


class Rows(unittest.TestCase):
    def test_profile_rows(self):
        rows = sp.profile_rows("03", sp.parse(listing(NAME, LOOP)), LAT)
        self.assertEqual([r["loop"] for r in rows], [-1, 0])
        root, loop = rows
        self.assertEqual((loop["kernel"], loop["dtype"], loop["d"], loop["instructions"]), ("kv_outer", "fp16", 128, 7))
        self.assertEqual((root["parent"], loop["parent"]), ("", -1))
        self.assertEqual(root["instructions"], len(LOOP) - 7)
        # R2 is compared with 0x10 but never stepped inside the loop: a count the listing cannot tell
        self.assertEqual(loop["trip_kind"], "runtime")
        self.assertEqual((loop["work_bar"], loop["work_mma"], loop["work_sfu"], loop["work_smem"]), ("1", "4096", "32", "128"))
        self.assertEqual(loop["regs_used"], 17)  # R16 is the highest register the listing names

    def test_the_harness_kernels_are_left_out(self):
        self.assertEqual(sp.profile_rows("03", sp.parse(listing("_ZN2fa8l2_flushEPv", LOOP)), LAT), [])


def strided(step_text, bound="0x200"):
    """A loop `for (i = tid; i < bound; i += step)` as the compiler writes it."""
    return [(None, "S2R R2, SR_TID.X", dict(stall=1, wbar=0)),
            (None, "ULDC UR4, c[0x0][0x0]", dict(stall=1)),
            (None, "IMAD.MOV.U32 R64, RZ, RZ, R2", dict(stall=1, wait=0b000001)),
            (".L_x_0", "LDG.E.128 R60, desc[UR6][R52.64]", dict(stall=1, wbar=2)),
            (None, step_text, dict(stall=2)),
            (None, f"ISETP.GE.AND P0, PT, R64, {bound}, PT", dict(stall=1)),
            (None, "STS.128 [R51+0x2200], R60", dict(stall=1, wait=0b000100)),
            (None, "@!P0 BRA `(.L_x_0)", dict(stall=5)),
            (None, "EXIT", dict(stall=5)),
            (None, "BRA 0x90", dict(stall=5))]  # the trap after EXIT: a branch to itself


class Trips(unittest.TestCase):
    def rule(self, body):
        (f,) = sp.parse(listing(NAME, body))
        ((lo, hi, _),) = sp.nest(f)
        return sp.trip_rule(f, lo, hi)

    def test_a_loop_strided_by_the_block(self):
        self.assertEqual(self.rule(strided("VIADD R64, R64, UR4")), ("ntid", 512, 0))
        self.assertEqual(self.rule(strided("IADD3 R64, R64, UR4, RZ")), ("ntid", 512, 0))

    def test_a_loop_stepped_by_a_constant(self):
        self.assertEqual(self.rule(strided("VIADD R64, R64, 0x100", "0xf00")), ("imm", 3840, 256))

    def test_a_bound_the_problem_sets(self):
        self.assertEqual(self.rule(strided("VIADD R64, R64, UR4", "R11")), ("runtime", 0, 0))
        self.assertEqual(self.rule(strided("VIADD R64, R64, UR9")), ("runtime", 0, 0))  # UR9: not blockDim.x

    def test_a_count_down_is_not_read(self):
        self.assertEqual(self.rule(strided("VIADD R64, R64, -0x1", "0x0")), ("runtime", 0, 0))

    def test_the_trap_after_exit_is_no_loop(self):
        (f,) = sp.parse(listing(NAME, strided("VIADD R64, R64, UR4")))
        self.assertEqual(len(f.loops()), 2)  # the loop and the trap, both backward branches
        self.assertEqual(len(sp.nest(f)), 1)


class Nest(unittest.TestCase):
    class F:
        def __init__(self, spans, n):
            self.spans, self.instrs = spans, [sp.Instr(16 * k, "@P0 BRA 0x0", 0) for k in range(n)]

        def loops(self):
            return self.spans

    def test_nested_loops_have_parents(self):
        f = self.F([(2, 3), (5, 6), (1, 8), (0, 9)], 10)
        self.assertEqual(sp.nest(f), [(0, 9, -1), (1, 8, 0), (2, 3, 1), (5, 6, 1)])

    def test_crossing_spans_are_one_loop(self):
        # A loop rotated into another: (1, 5) and (3, 8) overlap without nesting; with (4, 4) inside both.
        f = self.F([(4, 4), (1, 5), (3, 8)], 10)
        self.assertEqual(sp.nest(f), [(1, 8, -1), (4, 4, 0)])




class RealListing(unittest.TestCase):
    """tests/data/sass_step02_online_fp16_d64.sass: step 02's kernel (fp16, d = 64) as cuobjdump 13.0 printed it
    for sm_90 on the H200 (whitespace squeezed). Every expectation is counted from the text itself."""
    PATH = os.path.join(ROOT, "tests", "data", "sass_step02_online_fp16_d64.sass")

    def setUp(self):
        with open(self.PATH, encoding="utf-8") as f:
            self.text = f.read()
        (self.f,) = sp.parse(self.text)

    def test_every_instruction_and_its_control_word(self):
        lines = self.text.splitlines()
        addr = [k for k, l in enumerate(lines) if sp.INSTR.search(l)]
        self.assertEqual(len(self.f.instrs), len(addr))
        self.assertTrue(all(sp.HIGH.match(lines[k + 1]) for k in addr))  # each followed by its second word
        self.assertEqual(sp.identity(self.f.name), ("online", "fp16", 64))

    def test_classes_count_the_opcodes_in_the_text(self):
        c = sp.counts(self.f.instrs)
        self.assertEqual(sum(c.values()), len(self.f.instrs))
        self.assertEqual(c["sfu"], self.text.count(" MUFU."))
        self.assertEqual(c["gmem"], sum(self.text.count(f" {op}.") + self.text.count(f" {op} ") for op in ("LDG", "STG", "LDC")))

    def test_loops_are_the_backward_branches_but_the_fallbacks_returns(self):
        back = 0
        for ins in self.f.instrs:
            if ins.base == "BRA" and isinstance(ins.target, int) and ins.target <= ins.addr:
                back += 1
        divs = [ins for ins in self.f.instrs if ins.op == "BRA.DIV"]
        self.assertEqual(len(divs), self.text.count(" BRA.DIV "))
        self.assertGreater(len(divs), 0)
        ret = self.f.divergent_returns()
        self.assertEqual(len(ret), len(divs))  # one out-of-line fallback per shuffle reduction
        exit_at = max(k for k, ins in enumerate(self.f.instrs) if ins.base == "EXIT")
        for k in ret:  # each placed after the kernel's last EXIT, and jumping back into it
            self.assertGreater(k, exit_at)
            self.assertLess(self.f.instrs[k].target, self.f.instrs[exit_at].addr)
        self.assertEqual(len(self.f.loops()), back - len(ret))
        for lo, hi in self.f.loops():
            self.assertEqual(self.f.instrs[hi].base, "BRA")
            self.assertEqual(self.f.instrs[hi].target, self.f.instrs[lo].addr)

    def test_the_key_loop_holds_its_fast_shuffles_only(self):
        """The source loops once per key; the compiler unrolled it, so the loop's own code holds the fast
        path of each key's shuffle reduction (log2 32 = 5 shuffles each, one `BRA.DIV` before them) and
        none of the fallbacks' collective shuffles or the kernel's tail."""
        tree = sp.nest(self.f)
        runtime = [(lo, hi) for lo, hi, _ in tree if sp.trip_rule(self.f, lo, hi)[0] == "runtime"]
        self.assertEqual(len(runtime), 1)
        lo, hi = runtime[0]
        body = self.f.instrs[lo:hi + 1]
        keys = sum(1 for ins in body if ins.op == "BRA.DIV")
        self.assertGreaterEqual(keys, 1)
        self.assertEqual(sum(1 for ins in body if ins.op == "SHFL.BFLY"), keys * (32 - 1).bit_length())  # log2 32 per key
        self.assertFalse(any(ins.op.startswith("WARPSYNC") or ins.base in ("EXIT", "STG") for ins in body))
        w = sp.work_by_class(body)
        self.assertEqual(w["gmem"], keys * 2 * 64 * 2)  # a K row and a V row of d = 64 halves per key

    def test_every_instruction_has_one_owner(self):
        rows = sp.profile_rows("02", [self.f], {k: 20.0 for k in LAT})
        self.assertEqual(sum(r["instructions"] for r in rows), len(self.f.instrs))
        for cls in sp.CLASSES:
            self.assertEqual(sum(r[cls] for r in rows), sp.counts(self.f.instrs)[cls])
        tree = sp.nest(self.f)
        self.assertEqual(len(rows), 1 + len(tree))
        for lo, hi, parent in tree:  # a parent holds its child
            if parent >= 0:
                self.assertTrue(tree[parent][0] <= lo and hi <= tree[parent][1])

    def test_a_trip_is_at_least_its_issue_and_grows_with_a_latency(self):
        lat = {k: 20.0 for k in ("smem-latency", "l2-latency", "ex2-latency", "mma-latency", "fma-latency", "barrier-latency")}
        for lo, hi in self.f.loops():
            body = self.f.instrs[lo:hi + 1]
            t = sp.chain(body, lat)
            self.assertGreaterEqual(t, sum(max(1, i.stall) for i in body) - 1e-9)
            slow = dict(lat, **{"l2-latency": 2000.0})
            if any(i.klass() == "gmem" and i.wbar < 6 and i.base.startswith("LDG") for i in body):
                self.assertGreater(sp.chain(body, slow), t)


if __name__ == "__main__":
    unittest.main()
