// Where each element of an mma.sync.m16n8k16 operand lives: which lane of the warp holds it, in
// which of its registers. Steps 09 onwards keep S, P and O in registers in this layout, so the
// kernels and their CPU blueprints index fragments through these functions (host and device) and
// cannot disagree. The layout is the PTX ISA's ("Matrix Fragments for mma.m16n8k16 with floating
// point type"), for fp16 and bf16 inputs and fp32 accumulators:
//
//   lane = 4·g + t   (g = lane / 4, the "group", 0..7;  t = lane % 4, the thread in the group)
//
//   A (16 × 16, row major), 8 halves per lane:   element i -> row g + 8·((i / 2) % 2),
//                                                            col 2t + (i % 2) + 8·(i / 4)
//   B (16 × 8, "col": k down, n across), 4 halves: element i -> k 2t + (i % 2) + 8·(i / 2), n g
//   C, D (16 × 8, fp32), 4 floats:                 element i -> row g + 8·(i / 2), col 2t + (i % 2)
//
// Consecutive element pairs (i, i + 1 with i even) are adjacent in memory along a row of A, down a
// column of B and along a row of C: one 32-bit register holds each pair of halves.
//
// [c-to-a] The trick step 09 is built on: the accumulators of two neighbouring 16 × 8 C tiles
// (columns 8j .. 8j + 15) hold, lane by lane, exactly the elements the same lane needs as its A
// fragment for columns 8j .. 8j + 15 of the next product. So P = exp(S − m), computed in the C
// layout of S, is already P·V's A operand: convert to fp16/bf16 in registers, no shared memory.
//   A element i of the lane  =  C tile (i / 4), element (i % 4)
#pragma once

#include "kernel/attn_params.hpp"

namespace fa::m16n8k16 {

struct Coord {
  int row, col;
};

FA_HD constexpr int group(int lane) { return lane / 4; }
FA_HD constexpr int thread_in_group(int lane) { return lane % 4; }

// Element i (0..7) of lane's A fragment, as (row, col) of the 16 × 16 A tile.
FA_HD constexpr Coord a_elem(int lane, int i) {
  return {group(lane) + 8 * ((i / 2) % 2), 2 * thread_in_group(lane) + (i % 2) + 8 * (i / 4)};
}
// Element i (0..3) of lane's B fragment, as (k, n) of the 16 × 8 B tile.
FA_HD constexpr Coord b_elem(int lane, int i) {
  return {2 * thread_in_group(lane) + (i % 2) + 8 * (i / 2), group(lane)};
}
// Element i (0..3) of lane's C (or D) fragment, as (row, col) of the 16 × 8 C tile.
FA_HD constexpr Coord c_elem(int lane, int i) { return {group(lane) + 8 * (i / 2), 2 * thread_in_group(lane) + (i % 2)}; }

// [ldmatrix] ldmatrix.m8n8 loads 8 × 8 matrices of 16-bit values from shared memory, one per group
// of 8 lanes' row addresses (lane 8m + r gives row r of matrix m). Lane l then holds, in its
// register m, two elements of matrix m: without .trans, row l / 4 and columns 2(l % 4), 2(l % 4) + 1
// (exactly a C-like layout); with .trans, the transpose: rows 2(l % 4), 2(l % 4) + 1 of column l / 4.
// Element e (0, 1) of lane's register, as (row, col) of its 8 × 8 matrix:
FA_HD constexpr Coord ldm_elem(int lane, int e, bool trans) {
  return trans ? Coord{2 * thread_in_group(lane) + e, group(lane)} : Coord{group(lane), 2 * thread_in_group(lane) + e};
}

// [c-to-a] A element i of a lane comes from C tile (i / 4) of the pair, element (i % 4).
FA_HD constexpr int a_from_c_tile(int i) { return i / 4; }
FA_HD constexpr int a_from_c_elem(int i) { return i % 4; }

}  // namespace fa::m16n8k16
