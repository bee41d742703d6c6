// Step 20 — the blueprint: step 16's turns on the CPU (common/blueprint/wgmma_forward.cpp), with this
// step's arithmetic: the exponentials of the columns --exp2 gives the polynomial ([exp2-poly]: the same
// poly_exp2 as the kernel, bit for bit) and the lazy rescale ([lazy-rescale]). The persistent blocks
// and their order ([persistent], [work-order]) change which SM computes an item and when, not what it
// computes: the blueprint visits every item as step 16's does, and tests/test_step20.cpp holds the
// order itself (every item once, longest first, the idle tail's bound).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "schedule.hpp"
#include "blueprint/wgmma_forward.hpp"

// [pingpong] Step 16's turns, unchanged (steps/16_pingpong/blueprint.cpp): turn j of each warpgroup
// multiplies S_j and P_{j-1}·V_{j-1}, then runs the softmax of tile j; the stage of tile j − 1 is free
// after both turns j.
namespace fa::step16 {
void turns(int64_t Tcount, int64_t G, wgmma_bp::Consumer& c);
}

namespace fa::step20 {

namespace {

// [exp2-poly] The entries of column group n (a row's keys 8n … 8n + 7 of the tile): the polynomial
// where the mode gives it the group, else 2^x (the kernel's MUFU.EX2, whose approximation the
// blueprint does not model: the tolerances cover it, as for every step before).
template <int Mode>
float exp2_of_group(int n, float x) {
  float p = 0.0f;
  // lab:begin exp2-choice {O L}: [exp2-poly]: 2^x of the group's unit: poly_exp2 where poly_at says, else std::exp2
  p = poly_at(Mode, n) ? poly_exp2(x) : std::exp2(x);
  // lab:end
  return p;
}
template <int Mode>
bool on_fma(int n) {
  return poly_at(Mode, n);
}

// [lazy-rescale] Whether a row whose exponentials used m_old so far takes the tile's max m_new.
bool lazy_takes(float m_old, float m_new) {
  bool take = false;
  // lab:begin lazy-rule {O L window}: [lazy-rescale]: take m_new past the threshold (or after m_old = −∞)
  take = takes_new_max(m_old, m_new);
  // lab:end
  return take;
}

wgmma_bp::Tiles tiles(const Schedule& sc, int64_t d) {
  return {sc.Br, sc.Bc, sc.stages, wgmma_bp::Loads::Ring, kSmemBudget, smem_bytes(sc, int(d)), sc.own_o};
}

wgmma_bp::Ops ops_for(int exp2, bool lazy) {
  wgmma_bp::Ops ops;
  ops.turns = step16::turns;
  if (exp2 == kExp2Poly) ops.exp2 = exp2_of_group<kExp2Poly>, ops.exp2_on_fma = on_fma<kExp2Poly>;
  if (exp2 == kExp2Mixed) ops.exp2 = exp2_of_group<kExp2Mixed>, ops.exp2_on_fma = on_fma<kExp2Mixed>;
  ops.fma_ops_per_exp = kPolyOps;
  if (lazy) ops.takes_new_max = lazy_takes;
  return ops;
}

}  // namespace

// [persistent] One __syncthreads per block of the launch (the barriers' set-up), not per item: a grid
// of min(items, SMs) blocks, the H200's 132 for the blueprint (the GPU's own count on the GPU).
int64_t launch_barriers(const Shape& s, const Schedule& sc, bool persistent) {
  const int64_t items = s.B * s.H * num_tiles(s.N, sc.Br);
  return persistent ? std::min(items, kBlueprintSms) : items;
}

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc, const Variant& v, Stats* stats) {
  if (!valid(sc)) throw std::invalid_argument("step20: the tile is not valid ([tile-sizes] in steps/20_persistent/schedule.hpp)");
  if (v.exp2 < 0 || v.exp2 >= kExp2Choices) throw std::invalid_argument("step20: --exp2 is mufu, poly or mixed");
  wgmma_bp::Ops ops = ops_for(v.exp2, v.lazy);
  Stats local;
  Stats& st = stats ? *stats : local;
  ops.rescales = &st.rescales;
  ops.row_tiles = &st.row_tiles;
  BlueprintResult r = wgmma_bp::forward(s, in, tiles(sc, s.d), "persistent", ops);
  r.ledger["persistent"].barriers = launch_barriers(s, sc, v.persistent);
  r.ledger["persistent"].workspace = sizeof(int);  // [dynamic] the work counter
  return r;
}

// The ledger in closed form (docs/20_persistent.md): step 16's — the persistent blocks load the same
// tiles and stage the same O — but one __syncthreads per block of the launch (launch_barriers). The
// polynomial's share of the exponentials moves from `exps` to the FMA units' non-matmul operations,
// kPolyOps each. The lazy rescale is counted as if every tile rescaled: the most the kernel does (what
// the data saves, Stats counts).
LedgerSet closed_form(const Shape& s, const Schedule& sc, const Variant& v) {
  LedgerSet ls = wgmma_bp::closed_form(s, tiles(sc, s.d), "persistent");
  Ledger& led = ls["persistent"];
  int64_t groups = 0;
  for (int n = 0; n < sc.Bc / 8; ++n) groups += poly_at(v.exp2, n);
  const int64_t row_pairs = led.exps / (sc.Bc + 4);  // visited pairs × Br, over every (b, h)
  led.exps -= row_pairs * 8 * groups;               // 8 keys per column group of a row
  led.fma_exps = row_pairs * 8 * groups;
  led.nonmatmul_ops += row_pairs * 8 * groups * kPolyOps;
  led.barriers = launch_barriers(s, sc, v.persistent);
  led.workspace = sizeof(int);  // [dynamic] the work counter
  return ls;
}

Variant variant_of(const StepOptions& o) {
  const int a = ablation_of(o);
  return Variant{exp2_of(o), a != kNoLazy, a != kNoPersistent, a != kNoLpt};
}

int ablation_of(const StepOptions& opts) { return choice_index(opts, "ablate", kAblationNames, kAblations, "step20"); }
// --exp2, absent meaning its default (mufu: the flag's first choice and kExp2Names' first).
int exp2_of(const StepOptions& opts) { return choice_index(opts, "exp2", kExp2Names, kExp2Choices, "step20"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d)), variant_of(o));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, schedule_for(int(s.d)), variant_of(o)); }
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(schedule_for(int(s.d)), int(s.d)); }
// [ablation] persistent and lpt are run-time choices every kernel takes; rescale is a kernel of its own,
// compiled for fp16 at d = 64 and 128; and each runs with --exp2 at its default.
std::string run_options_reason(const Shape& s, const StepOptions& o) {
  const int a = ablation_of(o);
  if (a != kFull && exp2_of(o) != kExp2Mufu) return "--ablate runs with --exp2 mufu (its default) only";
  if (a == kNoLazy && (s.dtype != DType::f16 || s.d > 128))
    return "--ablate rescale is compiled for fp16 at d = 64 and 128 only (docs/20_persistent.md)";
  return "";
}
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "20";
    i.slug = "persistent";
    i.title = "A persistent forward: resident blocks over a longest-first work order, 2^x on the FMA units, the lazy rescale";
    i.teaches = "a persistent tile scheduler (LPT order, head chunks for L2), a polynomial exp2, a rescale threshold";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag e{"exp2", {}, "the exponentials: mufu (the special-function unit, the default), poly (a cubic on the FMA units), mixed (one column group in four on the FMA units)"};
      for (const char* n : kExp2Names) e.choices.push_back(n);
      StepFlag a{"ablate", {}, "take a change out (same results up to rounding): none, persistent (a block per item), lpt (step 16's order), rescale (every tile rescales) — an experiment, fp16 only"};
      for (const char* n : kAblationNames) a.choices.push_back(n);
      a.sweep = false;
      i.flags = {e, a};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.options_reason = run_options_reason;
    i.experiments_everywhere = true;  // persistent and lpt everywhere; rescale refused by options_reason elsewhere
    i.supports_gqa = true;     // [gqa] step 16's tensor maps over Hkv heads
    i.supports_window = true;  // [window] an item visits its band's tiles alone
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async, TMA and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "step 16's: a TMA box of one 128-byte swizzled row holds 64 columns ([stored-d], steps/20_persistent/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step20_";
    return i;
  }();
  return step;
}

}  // namespace fa::step20
