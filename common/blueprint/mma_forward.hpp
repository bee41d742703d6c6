// The register-resident forward of steps 09, 10 and 11 on the CPU, written once: Q as A fragments, S
// and O as accumulators, P converted in registers into the A operand of P·V, split-Q warps of 16
// rows, the softmax in the log2 domain, deferred normalization and causal skipping. The three steps
// differ only in how a lane gets its B fragments from the K and V tiles — step 09 by hand
// (b_elem), steps 10 and 11 by ldmatrix — so each passes its two loaders; step 11 also keeps two
// stages of K/V tiles and loads tile j + 1 before it multiplies tile j (Tiles::stages).
//
// Each warp's registers are arrays indexed [lane][slot]; every fragment is filled and read through
// the layout functions of common/kernel/mma_layout.hpp, exactly as the kernels do, and the tensor-core
// product (mma_emu) gathers A and B from the lanes, multiplies, and scatters D back — so a wrong
// index in a layout shows here as a wrong result. Shared memory holds K_j and V_j only.
#pragma once
#include <cstdint>
#include <string>

#include "blueprint/ledger.hpp"
#include "blueprint/mma_emu.hpp"
#include "core/problem.hpp"
#include "core/step.hpp"

namespace fa::mma_bp {

// A step's tiles: Br queries per block (one warp per 16 rows), Bc keys per K/V tile, the row
// padding of the K and V tiles (elements), the shared-memory budget and the step's footprint, and
// how many K/V stages shared memory holds (1: load, then multiply; 2: step 11's pipeline).
struct Tiles {
  int64_t Br, Bc, pad, smem_budget, smem_peak, stages = 1;
  int64_t warps() const { return Br / 16; }
};

// A B fragment from a K/V tile in shared memory. For K: keys [8n, 8n + 8), dims [16kk, 16kk + 16)
// (called as (Ks, n, kk)); for V: keys [16kk, 16kk + 16), dims [8n, 8n + 8) (called as (Vs, kk, n)).
using BLoader = m16n8k16::BFrag (*)(const SmemTile& tile, int64_t a, int64_t b);

// The forward; its ledger is `kernel`'s.
BlueprintResult forward(const Shape& s, const Inputs& in, const Tiles& sc, const std::string& kernel, BLoader k_frag,
                        BLoader v_frag);
// The same ledger in closed form.
LedgerSet closed_form(const Shape& s, const Tiles& sc, const std::string& kernel);

}  // namespace fa::mma_bp
