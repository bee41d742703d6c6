"""scripts/sass_opcodes.py on a small made-up cuobjdump listing (no GPU): the default step 19 consumer kernels are
found, plain and centered told apart, their opcodes counted (predicated ones too), other kernels left out.

Run: python3 tests/test_sass_opcodes.py   (ctest runs it; exit status 0 when every check holds)."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

LISTING = """
	code for sm_90a
		Function : _ZN2fa6step1913step19_bwd_kvI13__nv_bfloat16Li64ELb1ELb1ELi1ELb1ELb0ELb1EEEvNS0_4MapsENS_9BwdParamsE
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
        /*0010*/                   SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;         /* 0x0e201f0002037f89 */
        /*0020*/              @!P0 SHFL.BFLY PT, R4, R2, 0x8, 0x1f ;          /* 0x0e201f0002047f89 */
        /*0030*/                   FADD R5, R3, R4 ;                           /* 0x0000000403057221 */
        /*0040*/                   REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU P0, RZ, desc[UR4][R6.64], R8 ;  /* 0x0000000806007986 */
		Function : _ZN2fa6step1913step19_bwd_kvI13__nv_bfloat16Li64ELb1ELb1ELi1ELb1ELb0ELb0EEEvNS0_4MapsENS_9BwdParamsE
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
        /*0010*/                   FADD R5, R3, R4 ;                           /* 0x0000000403057221 */
		Function : _ZN2fa6step1913step19_bwd_kvI6__halfLi64ELb0ELb1ELi1ELb1ELb0ELb0EEEvNS0_4MapsENS_9BwdParamsE
        /*0000*/                   SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;         /* 0x0e201f0002037f89 */
"""


class Counts(unittest.TestCase):
    def test_listing(self):
        path = os.path.join(tempfile.mkdtemp(), "l.sass")
        with open(path, "w") as f:
            f.write(LISTING)
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_opcodes.py"), path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.strip().split("\n")
        self.assertEqual(len(lines), 2)  # the ablated kernel (bulk off) is not a default one
        cent, plain = (dict(kv.split("=") for kv in l.split()[9:]) for l in lines)
        self.assertIn("centered 1 total 5", lines[0])
        self.assertIn("centered 0 total 2", lines[1])
        self.assertEqual((cent["SHFL"], cent["REDG"], cent["FADD"]), ("2", "1", "1"))  # the predicated SHFL counted
        self.assertEqual((plain["SHFL"], plain["FADD"]), ("0", "1"))


if __name__ == "__main__":
    unittest.main()
