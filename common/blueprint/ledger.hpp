// The ledger: what a schedule costs, counted by construction.
//
// A blueprint (steps/NN/blueprint.cpp) touches global memory only through GlobalMat, shared memory only
// through Smem/SmemTile, tensor cores only through Frag16 and mma(), and synchronizes through
// barrier(). Each of these adds to a Ledger, so the numbers below are counted, never typed:
//   gmem_read / gmem_write bytes requested from global memory by loads and stores, before L2
//                          and DRAM (HBM): what Nsight's requested-bytes counters see; the bytes
//                          that reach HBM (Nsight's dram__bytes) are fewer where L2 serves re-reads
//   gmem_atomic            bytes of fp32 atomic adds to global memory (reductions, resolved in L2)
//   smem_read / smem_write bytes moved to and from shared memory
//   barriers               block-wide barriers executed, summed over blocks
//   matmul_flops           tensor-core FLOPs issued (2·16·16·16 per fragment product, padding included)
//   cuda_core_flops        matrix-product FLOPs done on CUDA cores instead (step 02's dot products)
//   nonmatmul_ops          scalar operations on S and P (scale, max, exp, add, mul, ...)
//   exps                   the exponentials among them (one per S entry computed, plus each row's
//                          rescale factors): the special-function unit's work, a resource of its own.
//                          Counted as the kernel evaluates them: masked entries where it takes
//                          exp(−inf) = 0 (not where its loop stops before them: step 01, the naive
//                          backward); alpha in every lane that computes it (four per row in the
//                          mma.sync and wgmma layouts); none behind a guard on m = −inf that holds
//                          ([rescale-guard], steps 02–11: a row's first tile, a row that sees no key);
//                          the backward's recompute of P; none on a skipped tile
//   tiles_*                S tiles computed / containing masked entries / skipped
//   smem_peak              the largest shared-memory footprint of one block, in bytes
//   workspace              extra global memory the step allocates (S and P in step 01)
#pragma once
#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"

namespace fa {

struct Ledger {
  int64_t gmem_read = 0, gmem_write = 0;
  int64_t gmem_atomic = 0;
  int64_t smem_read = 0, smem_write = 0;
  int64_t barriers = 0;
  int64_t matmul_flops = 0;
  int64_t cuda_core_flops = 0;
  int64_t nonmatmul_ops = 0;
  int64_t exps = 0;      // exponentials on the special-function unit (MUFU.EX2)
  int64_t fma_exps = 0;  // [exp2-poly] exponentials computed on the FMA units (their operations are in nonmatmul_ops)
  int64_t tiles_computed = 0, tiles_masked = 0, tiles_skipped = 0;
  int64_t smem_peak = 0;
  int64_t workspace = 0;

  Ledger& operator+=(const Ledger& o);
  bool operator==(const Ledger& o) const { return diff(o).empty(); }
  // The fields that differ, as "field: a vs b; ..."; "" when equal.
  std::string diff(const Ledger& o) const;
};

// A step's ledger, kernel by kernel (Nsight reports per kernel too).
struct LedgerSet {
  std::vector<std::pair<std::string, Ledger>> kernels;
  Ledger& operator[](const std::string& kernel);  // finds or appends
  Ledger total() const;
  std::string diff(const LedgerSet& o) const;
};

void print_ledger(std::ostream& os, const LedgerSet& ls);
// CSV: a header line, then one line per kernel.
void write_ledger_csv(std::ostream& os, const LedgerSet& ls);

// How an element is stored: fp32 (4 bytes), the storage type (2 bytes, rounded on store), or an e4m3
// code (1 byte, rounded to e4m3 on store: [fp8], step 21 — its values are codes, the scales apart).
struct Store {
  int bytes = 4;
  bool rounds = false;
  DType dtype = DType::f16;
  bool e4m3 = false;
  static Store f32() { return {4, false, DType::f16, false}; }
  static Store of(DType t) { return {2, true, t, false}; }
  static Store code8() { return {1, true, DType::f16, true}; }
  float apply(float x) const { return !rounds ? x : e4m3 ? round_to_e4m3(x) : round_to(dtype, x); }
};

// A matrix in global memory ("HBM"), rows × cols with leading dimension ld. Every element access
// through the view is counted; an access outside the matrix is a bug in the blueprint and throws.
class GlobalMat {
 public:
  GlobalMat(float* data, int64_t rows, int64_t cols, int64_t ld, Store st, Ledger& led)
      : p_(data), rows_(rows), cols_(cols), ld_(ld), st_(st), L_(&led) {}
  GlobalMat(const float* data, int64_t rows, int64_t cols, int64_t ld, Store st, Ledger& led)
      : GlobalMat(const_cast<float*>(data), rows, cols, ld, st, led) { read_only_ = true; }
  float load(int64_t r, int64_t c) const;
  void store(int64_t r, int64_t c, float x);
  // atomicAdd: element += x, counted as gmem_atomic (fp32 matrices only).
  void atomic_add(int64_t r, int64_t c, float x);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const Store& storage() const { return st_; }
  void retarget(Ledger& led) { L_ = &led; }

 private:
  void bounds(int64_t r, int64_t c) const;
  float* p_;
  int64_t rows_, cols_, ld_;
  Store st_;
  Ledger* L_;
  bool read_only_ = false;
};

class Smem;

// A tile in shared memory: rows × cols values, laid out with `ld` >= cols (padding counts toward
// the footprint, as it does on the GPU). Reads and writes are counted.
class SmemTile {
 public:
  float read(int64_t r, int64_t c) const;
  void write(int64_t r, int64_t c, float x);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Copy the tile whose top-left corner is (r0, c0) of g into this tile. Elements outside g are
  // zero-filled and cost no HBM bytes; every element written here costs shared-memory bytes.
  void load_from(const GlobalMat& g, int64_t r0, int64_t c0);
  // Store the part of this tile that lies inside g at (r0, c0); `f` maps each value on the way.
  template <class F>
  void store_to(GlobalMat& g, int64_t r0, int64_t c0, F f) const {
    for (int64_t r = 0; r < rows_ && r0 + r < g.rows(); ++r)
      for (int64_t c = 0; c < cols_ && c0 + c < g.cols(); ++c) g.store(r0 + r, c0 + c, f(read(r, c)));
  }
  void store_to(GlobalMat& g, int64_t r0, int64_t c0) const { store_to(g, r0, c0, [](float x) { return x; }); }

 private:
  friend class Smem;
  SmemTile(int64_t rows, int64_t cols, Store st, Ledger& led)
      : rows_(rows), cols_(cols), st_(st), L_(&led), v_(static_cast<size_t>(rows * cols), 0.0f) {}
  int64_t rows_, cols_;
  Store st_;
  Ledger* L_;
  std::vector<float> v_;
};

// One thread block's shared memory: tiles are carved from it, and asking for more than the
// schedule's budget throws (the GPU would refuse to launch). The peak is recorded in the ledger.
class Smem {
 public:
  Smem(int64_t capacity_bytes, Ledger& led) : cap_(capacity_bytes), L_(&led) {}
  SmemTile tile(int64_t rows, int64_t cols, int64_t ld, Store st);
  SmemTile tile(int64_t rows, int64_t cols, Store st) { return tile(rows, cols, cols, st); }
  // A tile written over another one's bytes (e.g. P over S): counted traffic, no extra footprint.
  SmemTile overlay(int64_t rows, int64_t cols, Store st) { return SmemTile(rows, cols, st, *L_); }
  int64_t used() const { return used_; }

 private:
  int64_t cap_, used_ = 0;
  Ledger* L_;
};

// A block-wide barrier (__syncthreads) in the blueprint: it only counts.
inline void barrier(Ledger& led) { ++led.barriers; }

// A 16×16 fragment held by one warp (WMMA's granularity). A and B fragments hold storage-type
// values; accumulators hold fp32.
struct Frag16 {
  float x[16][16] = {};
};
// Load a 16×16 fragment from a shared-memory tile: element (r, c) of the fragment is tile(r0 + r,
// c0 + c). The transposed load returns element (r, c) = tile(r0 + c, c0 + r): a K tile stored
// [key][dim] read as a block of Kᵀ (r0 = first key, c0 = first dim). Each costs 16·16 element reads.
Frag16 load_frag(const SmemTile& t, int64_t r0, int64_t c0);
Frag16 load_frag_transposed(const SmemTile& t, int64_t r0, int64_t c0);
// acc += a · b in fp32, 2·16³ matmul FLOPs.
void mma(Frag16& acc, const Frag16& a, const Frag16& b, Ledger& led);
// Store an accumulator into a shared-memory tile at (r0, c0), mapping each value through f.
template <class F>
void store_frag(SmemTile& t, int64_t r0, int64_t c0, const Frag16& acc, F f) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) t.write(r0 + r, c0 + c, f(acc.x[r][c]));
}

}  // namespace fa
