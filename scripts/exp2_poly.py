#!/usr/bin/env python3
"""The polynomial step 20 computes 2^f with on the FMA units ([exp2-poly], steps/20_persistent/schedule.hpp).

  python3 scripts/exp2_poly.py [--degree 3] [--check HEADER]

Fits p(f) ≈ 2^f on [0, 1] minimizing the largest relative error max |p(f)/2^f − 1| (the Remez exchange:
the error of the best fit of degree n equioscillates at n + 2 points, so the fit solves for those points'
alternating errors and moves them to the new extrema until they stop moving), then prints the
coefficients (constant term first) and the error, for degrees 2 to 5 or the one asked for.

--check HEADER reads the kExp2Coeffs coefficients out of a step's schedule.hpp and exits 1 unless they are
this script's cubic (to float precision) and the error kExp2PolyRelErr states is the fit's: the
header's numbers come from here, not from a keyboard (tests/CMakeLists.txt runs it). Standard library only.
"""
import argparse
import math
import re
import sys

GRID = 20000  # points of [0, 1] the extrema are looked for on


def solve(a, b):
    """Gaussian elimination with partial pivoting: x with a·x = b."""
    n = len(b)
    m = [row[:] + [v] for row, v in zip(a, b)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def rel_err(c, x):
    return (sum(ck * x ** k for k, ck in enumerate(c)) - 2.0 ** x) / 2.0 ** x


def fit(degree, iterations=40):
    """(coefficients, the largest relative error on the grid) of the minimax fit of 2^f on [0, 1]."""
    n = degree
    xs = [0.5 - 0.5 * math.cos(math.pi * i / (n + 1)) for i in range(n + 2)]  # Chebyshev points to start
    grid = [i / GRID for i in range(GRID + 1)]
    c = []
    for _ in range(iterations):
        # p(x_i) − 2^x_i = (−1)^i E 2^x_i at the n + 2 points: n + 1 coefficients and E
        sol = solve([[x ** k for k in range(n + 1)] + [(-1) ** i * 2.0 ** x] for i, x in enumerate(xs)],
                    [2.0 ** x for x in xs])
        c = sol[:n + 1]
        es = [rel_err(c, x) for x in grid]
        peaks = [i for i in range(len(grid))
                 if (i == 0 or abs(es[i]) >= abs(es[i - 1])) and (i == len(grid) - 1 or abs(es[i]) >= abs(es[i + 1]))]
        alt = []  # one extremum per run of one sign: the largest
        for i in peaks:
            if alt and (es[i] > 0) == (es[alt[-1]] > 0):
                if abs(es[i]) > abs(es[alt[-1]]):
                    alt[-1] = i
            else:
                alt.append(i)
        while len(alt) > n + 2:
            alt.pop(0 if abs(es[alt[0]]) < abs(es[alt[-1]]) else -1)
        xs = [grid[i] for i in alt]
    return c, max(abs(rel_err(c, x)) for x in grid)


def check(header):
    text = open(header, encoding="utf-8").read()
    m = re.search(r"kExp2Coeffs\[4\]\s*=\s*\{([^}]*)\}", text)
    e = re.search(r"kExp2PolyRelErr\s*=\s*([0-9.eE+-]+)", text)
    if not m or not e:
        print(f"exp2_poly.py: {header} has no kExp2Coeffs[4] or kExp2PolyRelErr", file=sys.stderr)
        return 1
    got = [float(x.strip().rstrip("f")) for x in m.group(1).split(",")]
    want, err = fit(3)
    bad = [(g, w) for g, w in zip(got, want) if abs(g - w) > 1e-6 * max(1.0, abs(w))]
    if len(got) != 4 or bad:
        print(f"exp2_poly.py: {header}'s coefficients {got} are not the cubic fit {want}", file=sys.stderr)
        return 1
    stated = float(e.group(1))
    if abs(stated - err) > 1e-3 * err:
        print(f"exp2_poly.py: {header} states a relative error of {stated}, the fit's is {err:.5g}", file=sys.stderr)
        return 1
    print(f"exp2_poly.py: {header}: the cubic and its error ({err:.5g}) are this script's")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--degree", type=int, default=0, help="one degree (default: 2 to 5)")
    ap.add_argument("--check", metavar="HEADER", help="a schedule.hpp whose kExp2Coeffs must be this script's cubic")
    a = ap.parse_args()
    if a.check:
        return check(a.check)
    if a.degree and not 1 <= a.degree <= 8:
        ap.error("--degree: 1 to 8")
    for n in [a.degree] if a.degree else [2, 3, 4, 5]:
        c, err = fit(n)
        print(f"degree {n}: max relative error {err:.5g} (2^{math.log2(err):.2f}); coefficients "
              + ", ".join(f"{x!r}" for x in c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
