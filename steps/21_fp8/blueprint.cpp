// Step 21 — the blueprint: the kernel's arithmetic on the CPU, layout for layout. The quantize kernels
// block by block (each block's amax, then the codes: they must make the reference's own codes,
// common/reference/quantize.cpp, or the blueprint throws); then step 16's turns on the codes, with the
// products as FP8 wgmmas of k = 32 (common/blueprint/wgmma_emu.hpp), P·256 cast to e4m3 into the A
// fragment in the kernel's key order ([key-order]), Vᵀ built by the same 4 × 4 byte transposes as the
// producer's warps ([transpose4]) or read as the quantize kernel wrote it, the descales where the
// kernel applies them ([descale], [v-descale]), O in bf16 from the registers.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "schedule.hpp"
#include "blueprint/wgmma_emu.hpp"
#include "blueprint/wgmma_forward.hpp"
#include "core/dtype.hpp"

// [pingpong] Step 16's turns, unchanged (steps/16_pingpong/blueprint.cpp).
namespace fa::step16 {
void turns(int64_t Tcount, int64_t G, wgmma_bp::Consumer& c);
}

namespace fa::step21 {

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t log2_of(int64_t d) {
  int64_t k = 0;
  while ((int64_t(1) << k) < d) ++k;
  return k;
}
// [incoherent] The transform's operations per element: the sign, log2 d butterflies, 1/√d.
int64_t transform_ops(const Shape& s) { return 2 + log2_of(s.d); }

// The codes of one tensor as the quantize kernels leave them (values of e4m3 codes, as floats): [B,
// heads, rows, d], or Vᵀ [B, heads, d, nk32] in the key order.
struct Codes {
  Tensor4 x;
  std::vector<float> descale;  // [B · heads · groups]
  int64_t groups = 1;
};

// [quantize] step21_amax and step21_quantize on tensor t (0 Q, 1 K, 2 V), block of 32 rows by block.
Codes quantize_blocks(const Shape& s, const Tensor4& src, int t, bool vt, Ledger& la, Ledger& led) {
  const int64_t heads = src.H, rows = src.rows, d = s.d, nk32 = (rows + 31) / 32 * 32;
  const bool transform = s.incoherent && t < 2, block = s.fp8_block;
  const int64_t groups = fp8::groups(rows, block), out_rows = vt ? nk32 : rows;
  Codes c;
  c.groups = groups;
  c.x = vt ? Tensor4(s.B, heads, d, nk32) : Tensor4(s.B, heads, rows, d);
  c.descale.assign(size_t(s.B * heads * groups), 1.0f);
  std::vector<float> amax(size_t(s.B * heads * groups), 0.0f);
  la.gmem_write += int64_t(amax.size()) * 4;  // the memset of the amax words
  const Store bf = Store::of(DType::bf16), code = Store::code8();
  const int64_t ops_per_elem = transform ? transform_ops(s) : 0;
  std::vector<float> y(static_cast<size_t>(d), 0.0f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t bh = b * heads + h;
      GlobalMat X(src.head(b, h), rows, d, d, bf, la);
      Ledger* on = &la;  // the kernel whose work a row's read and transform are
      auto row_of = [&](int64_t r) {
        for (int64_t col = 0; col < d; ++col) y[size_t(col)] = X.load(r, col);
        if (transform) fp8::hadamard_row(y.data(), int(d));
        on->nonmatmul_ops += ops_per_elem * d;
      };
      // step21_amax: a block's largest magnitude, then one atomicMax into its group
      for (int64_t r0 = 0; r0 < rows; r0 += kQuantRows) {
        float m = 0.0f;
        for (int64_t r = r0; r < std::min(r0 + kQuantRows, rows); ++r) {
          row_of(r);
          for (float v : y) m = std::max(m, std::fabs(v));
          la.nonmatmul_ops += d;
        }
        float& a = amax[size_t(bh * groups + fp8::group_of(r0, block))];
        a = std::max(a, m);
        la.gmem_atomic += 4;
      }
      X.retarget(led), on = &led;
      // step21_quantize: the descale by a group's first block, the codes by every block
      GlobalMat out(c.x.head(b, h), vt ? d : rows, vt ? nk32 : d, vt ? nk32 : d, code, led);
      for (int64_t r0 = 0; r0 < out_rows; r0 += kQuantRows) {
        const int64_t g = bh * groups + fp8::group_of(r0, block);
        const float f = fp8::quant_factor(amax[size_t(g)]);
        if (block ? r0 % fp8::kBlockRows == 0 : r0 == 0) {  // the group's first block
          c.descale[size_t(g)] = fp8::descale(amax[size_t(g)]);
          led.gmem_write += 4;
        }
        for (int64_t r = r0; r < std::min(r0 + kQuantRows, out_rows); ++r) {
          if (r < rows) row_of(r);
          else std::fill(y.begin(), y.end(), 0.0f);  // Vᵀ's keys past Nk: zeros
          for (int64_t col = 0; col < d; ++col) {
            if (vt) out.store(col, 32 * (r / 32) + slot_of_key(int(r % 32)), y[size_t(col)] * f);  // [key-order]
            else out.store(r, col, y[size_t(col)] * f);
          }
          led.nonmatmul_ops += 2 * d;
        }
      }
    }
  return c;
}

// The blueprint's codes against the reference's quantization, code for code.
void agree(const Codes& c, const Fp8Tensor& ref, bool vt, const char* what) {
  for (size_t g = 0; g < c.descale.size(); ++g)
    if (c.descale[g] != ref.descales[g]) throw std::logic_error(std::string("step21: the quantize kernels' descale of ") + what + " differs from quantize_fp8's");
  for (int64_t b = 0; b < ref.B; ++b)
    for (int64_t h = 0; h < ref.heads; ++h)
      for (int64_t r = 0; r < ref.rows; ++r)
        for (int64_t col = 0; col < ref.d; ++col) {
          const float v = vt ? c.x.at(b, h, col, 32 * (r / 32) + slot_of_key(int(r % 32))) : c.x.at(b, h, r, col);
          if (float_to_e4m3_bits(v) != ref.code(b, h, r, col))
            throw std::logic_error(std::string("step21: the quantize kernels' code of ") + what + " differs from quantize_fp8's");
        }
}

// One consumer warpgroup across its block's tiles.
struct WarpGroup {
  std::vector<wgmma::Acc> o;                            // [128-column part of O]
  std::vector<std::vector<std::array<float, 2>>> m, l;  // [warp][lane][row half]
  wgmma::Acc s{128};
  std::vector<std::vector<wgmma::AFrag8>> pa;           // [kk][warp]
  float dv_prev = 1.0f, dv_cur = 1.0f;                  // [v-descale]
  std::array<std::array<float, 2>, 128> alpha{};        // [warp·32 + lane][row half], for the rescale
  std::array<std::array<float, 2>, 128> f_next{};       // [lean-ops] Õ's factor, kept for the next tile's sum
  int64_t s_tile = -1, p_tile = -1;
};

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc, int v_layout, int ops) {
  if (!s.fp8) throw std::invalid_argument("step21: FP8 only (--dtype e4m3)");
  if (s.d % 32 != 0) throw std::invalid_argument("step21: d must be a multiple of 32 (an FP8 wgmma's k), got " + std::to_string(s.d));
  if (!valid(sc)) throw std::invalid_argument("step21: the tile is not valid ([tile-sizes] in steps/21_fp8/schedule.hpp)");
  const bool vt = v_layout == kVPretransposed, fold = ops_fold(ops), fuse = ops_fuse(ops);  // [lean-ops] --ops
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  // [quantize]
  for (const char* k : {"amax", "quantize", "fp8"}) res.ledger[k];  // all three first: the set's vector may move
  Ledger& la = res.ledger["amax"];
  Ledger& lq = res.ledger["quantize"];
  const Codes cq = quantize_blocks(s, in.q, 0, false, la, lq), ck = quantize_blocks(s, in.k, 1, false, la, lq),
              cv = quantize_blocks(s, in.v, 2, vt, la, lq);
  {
    const Fp8Inputs ref = quantize_fp8(s, in);
    agree(cq, ref.q, false, "Q"), agree(ck, ref.k, false, "K"), agree(cv, ref.v, vt, "V");
  }
  lq.workspace = int64_t(workspace_bytes(s, {{"v", kVLayoutNames[v_layout]}}));

  Ledger& led = res.ledger["fp8"];
  const Store code = Store::code8(), bf = Store::of(DType::bf16), f32 = Store::f32();
  const int64_t d = s.d, Br = sc.Br, Bc = sc.Bc, G = sc.consumers(), Tc = num_tiles(s.Nk, Bc), Tr = num_tiles(s.N, Br);
  const int64_t PN = std::min<int64_t>(d, 128), parts = d / PN, nk32 = (s.Nk + 31) / 32 * 32;
  const float sl2_base = static_cast<float>(s.softmax_scale()) * kLog2e;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = s.kv_head(h), bhk = b * s.hkv() + hk;
      const GlobalMat Q(cq.x.head(b, h), s.N, d, d, code, led);
      GlobalMat Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, bf, led);
      for (int64_t it = 0; it < Tr; ++it) {
        const int64_t i0 = it * Br, rows = std::min(Br, s.N - i0);
        Smem smem(kSmemBudget, led);
        SmemTile Qs = smem.tile(Br, d, code);
        std::vector<SmemTile> Ks, Vts, Vrs;
        for (int64_t st = 0; st < sc.stages; ++st) {
          Ks.push_back(smem.tile(Bc, d, code));
          Vts.push_back(smem.tile(d, Bc, code));
          if (sc.raw_v) Vrs.push_back(smem.tile(Bc, d, code));
        }
        smem.tile(1, 256, f32);  // [mbarrier] the barriers' 1 KB
        barrier(led);
        const int64_t jbeg = first_kv_tile(i0, i0 + rows, s.N, s.Nk, Bc, s.causal, s.window);
        const int64_t Tcount = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, Bc, s.causal) - jbeg;
        const int64_t kv0 = jbeg * Bc;
        const GlobalMat K(ck.x.head(b, hk) + kv0 * d, s.Nk - kv0, d, d, code, led);
        const GlobalMat V(cv.x.head(b, hk) + (vt ? kv0 : kv0 * d), vt ? d : s.Nk - kv0, vt ? nk32 - kv0 : d, vt ? nk32 : d, code, led);
        // [descale]
        const float dq = cq.descale[size_t((b * s.H + h) * cq.groups + (cq.groups > 1 ? i0 / fp8::kBlockRows : 0))];
        auto dk = [&](int64_t j) { return ck.descale[size_t(bhk * ck.groups + (ck.groups > 1 ? jbeg + j : 0))]; };
        auto dv = [&](int64_t j) { return cv.descale[size_t(bhk * cv.groups + (cv.groups > 1 ? jbeg + j : 0))]; };
        led.gmem_read += 4 + 8 * Tcount;  // the descales: a word per block and two per tile (one request each)

        // [producer] Q, and tile j's K and V (or Vᵀ) into stage j % stages; [v-transpose] V into Vᵀ.
        auto load = [&](int64_t j) {
          const size_t st = size_t(j % sc.stages);
          Ks[st].load_from(K, j * Bc, 0);
          if (vt) {
            Vts[st].load_from(V, 0, j * Bc);
            return;
          }
          Vrs[st].load_from(V, j * Bc, 0);
          // lab:begin v-transpose-cpu {O}: [v-transpose] [transpose4]: the producer's warps, unit by unit …
          for (int u = 0; u < transpose_units(int(Bc), int(d)); ++u) {
            const TransposeUnit tu = transpose_unit(u, int(d));  // [transpose-banks] the kernel's lanes' order
            const int n0 = 4 * tu.dim_group, slot0 = 4 * tu.slot_group;
            uint32_t r[4], t[4];
            for (int i = 0; i < 4; ++i) {
              const int key = 32 * (slot0 / 32) + key_of_slot(slot0 % 32 + i);
              r[i] = 0;
              for (int byte = 0; byte < 4; ++byte) r[i] |= uint32_t(float_to_e4m3_bits(Vrs[st].read(key, n0 + byte))) << (8 * byte);
            }
            transpose4(r, t);
            for (int i = 0; i < 4; ++i)
              for (int byte = 0; byte < 4; ++byte) Vts[st].write(n0 + i, slot0 + byte, e4m3_bits_to_float(uint8_t(t[i] >> (8 * byte))));
          }
          // lab:end
        };
        if (Tcount > 0) Qs.load_from(Q, i0, 0);
        for (int64_t j = 0; j < std::min<int64_t>(Tcount, sc.stages); ++j) load(j);

        std::vector<WarpGroup> wgs(static_cast<size_t>(G));
        for (auto& g : wgs) {
          g.o.assign(size_t(parts), wgmma::Acc(int(PN)));
          g.m.assign(4, std::vector<std::array<float, 2>>(32, {-kInf, -kInf}));
          g.l.assign(4, std::vector<std::array<float, 2>>(32, {0.0f, 0.0f}));
        }
        wgmma_bp::Consumer con;
        con.s = [&](int64_t g, int64_t j) {  // [s-wgmma]
          WarpGroup& wg = wgs[size_t(g)];
          wg.s = wgmma::Acc(int(Bc));
          wg.s_tile = j;
          for (int64_t kk = 0; kk < d / 32; ++kk) wgmma::mma_ss_e4m3(wg.s, Qs, 64 * g, Ks[size_t(j % sc.stages)], 0, kk, kk > 0, led);
        };
        con.softmax = [&](int64_t g, int64_t j) {
          WarpGroup& wg = wgs[size_t(g)];
          if (wg.s_tile != j) throw std::logic_error("step21: the softmax of tile " + std::to_string(j) + " before its S");
          wgmma::Acc& S = wg.s;
          const int64_t j0 = (jbeg + j) * Bc;
          const float sl2 = sl2_base * dq * dk(j);  // [descale]
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, Bc, s.causal, s.window);
          for (int w = 0; w < 4; ++w) {
            if (masked)  // [causal-mask]
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < int(Bc) / 2; ++r) {
                  const mf::Coord c = wgmma::acc_elem(w, lane, r);
                  if (!key_visible(i0 + 64 * g + c.row, j0 + c.col, s.N, s.Nk, s.causal, s.window)) S.reg(w, lane, r) = -kInf;
                }
            // [softmax-regs] Each row's max over its group's four lanes, for every lane before any p replaces S.
            std::array<std::array<float, 2>, 32> gmax{};
            for (int lane = 0; lane < 32; ++lane)
              for (int hr = 0; hr < 2; ++hr) {
                float mx = -kInf;
                for (int q = 4 * mf::group(lane); q < 4 * mf::group(lane) + 4; ++q)
                  for (int n = 0; n < int(Bc) / 8; ++n) mx = std::max({mx, S.reg(w, q, 4 * n + 2 * hr), S.reg(w, q, 4 * n + 2 * hr + 1)});
                gmax[size_t(lane)][size_t(hr)] = mx;
              }
            for (int lane = 0; lane < 32; ++lane)
              for (int hr = 0; hr < 2; ++hr) {
                const float mx = gmax[size_t(lane)][size_t(hr)];
                float& m = wg.m[size_t(w)][size_t(lane)][size_t(hr)];
                const float m_new = std::max(m, mx * sl2);
                const float m_use = m_new == -kInf ? 0.0f : m_new;  // [rescale-guard]
                wg.alpha[size_t(32 * w + lane)][size_t(hr)] = std::exp2(m - m_use);
                m = m_new;
                const float m_exp = fold ? m_use - fp8::kLog2PScale : m_use;  // [lean-ops] P·256 = 2^(x − m + 8)
                float rs = 0.0f;
                for (int n = 0; n < int(Bc) / 8; ++n)
                  for (int e = 0; e < 2; ++e) {
                    float& v = S.reg(w, lane, 4 * n + 2 * hr + e);
                    v = std::exp2(std::fma(v, sl2, -m_exp));
                    rs += v;
                  }
                float& l = wg.l[size_t(w)][size_t(lane)][size_t(hr)];
                l = l * wg.alpha[size_t(32 * w + lane)][size_t(hr)] + rs;
              }
            led.exps += 32 * 2 * (1 + Bc / 4);
            led.nonmatmul_ops += 16 * Bc * (masked ? 6 : 5) + 3 * 16;
          }
          wg.dv_prev = wg.dv_cur, wg.dv_cur = dv(j);
          // [deferred] [v-descale] Õ *= α · dv_prev / dv_cur; [p-fp8] [key-order] P·256 in e4m3 into the A fragments.
          const float vr = wg.dv_prev / wg.dv_cur;
          if (fuse)  // [lean-ops] the factor waits for the next tile's sum; s holds P·256 already
            for (int i = 0; i < 128; ++i)
              for (int hr = 0; hr < 2; ++hr) wg.f_next[size_t(i)][size_t(hr)] = wg.alpha[size_t(i)][size_t(hr)] * vr;
          else
            for (auto& op : wg.o)
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane)
                  for (int hr = 0; hr < 2; ++hr) {
                    const float f = wg.alpha[size_t(32 * w + lane)][size_t(hr)] * vr;
                    for (int n = 0; n < op.n / 8; ++n) op.reg(w, lane, 4 * n + 2 * hr) *= f, op.reg(w, lane, 4 * n + 2 * hr + 1) *= f;
                  }
          led.nonmatmul_ops += (fuse ? 0 : 4 * 16 * d) + (fold ? 0 : 4 * 16 * Bc);  // the rescale of Õ; P·256
          wg.pa.assign(size_t(Bc / 32), std::vector<wgmma::AFrag8>(4, wgmma::AFrag8(32)));
          const float ps = fold ? 1.0f : fp8::kPScale;  // [lean-ops] under fold S holds P·256 already (x · 1 is x)
          // lab:begin p-pack {O}: [p-fp8] [key-order]: byte i of register q of each lane: its own accumulator …
          for (int64_t kk = 0; kk < Bc / 32; ++kk)
            for (int w = 0; w < 4; ++w)
              for (int lane = 0; lane < 32; ++lane)
                for (int q = 0; q < 4; ++q)
                  for (int i = 0; i < 4; ++i)
                    wg.pa[size_t(kk)][size_t(w)][size_t(lane)][size_t(4 * q + i)] =
                        round_to_e4m3(S.reg(w, lane, acc_reg_of(int(kk), q, i)) * ps);
          // lab:end
          wg.p_tile = j;
        };
        con.pv = [&](int64_t g, int64_t j) {  // [pv-wgmma] [two-level] P̃ Ṽ_j afresh, Vᵀ K-major; Õ += it in fp32
          WarpGroup& wg = wgs[size_t(g)];
          if (wg.p_tile != j) throw std::logic_error("step21: P·V of tile " + std::to_string(j) + " without its P");
          for (int64_t pn = 0; pn < parts; ++pn) {
            wgmma::Acc pv{int(PN)};
            for (int64_t kk = 0; kk < Bc / 32; ++kk)
              wgmma::mma_rs_e4m3(pv, wg.pa[size_t(kk)], Vts[size_t(j % sc.stages)], PN * pn, kk, kk > 0, led);
            if (fuse)  // [lean-ops] Õ · f + P̃·Ṽ, one rounding
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane)
                  for (int r = 0; r < int(PN) / 2; ++r) {
                    float& o = wg.o[size_t(pn)].reg(w, lane, r);
                    o = std::fma(o, wg.f_next[size_t(32 * w + lane)][size_t((r % 4) / 2)], pv.reg(w, lane, r));
                  }
            else
              for (size_t t = 0; t < pv.tiles.size(); ++t)
                for (int lane = 0; lane < 32; ++lane)
                  for (int e = 0; e < 4; ++e) wg.o[size_t(pn)].tiles[t][size_t(lane)][size_t(e)] += pv.tiles[t][size_t(lane)][size_t(e)];
          }
          led.nonmatmul_ops += 4 * 16 * d;  // [two-level] the tile's sum into Õ
        };
        con.release = [&](int64_t j) {
          if (j + sc.stages < Tcount) load(j + sc.stages);
        };
        step16::turns(Tcount, G, con);
        for (int64_t j = 0; j < Tcount; ++j) {
          const int64_t j0 = (jbeg + j) * Bc;
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + Bc, s.Nk), s.N, s.Nk, s.causal, s.window) == TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - Tcount;
        // [o-direct] O = Õ · dv / (256 l) in bf16, from the registers; L = (m + log2 l)·ln 2.
        for (int64_t g = 0; g < G; ++g)
          for (int w = 0; w < 4; ++w) {
            const WarpGroup& wg = wgs[size_t(g)];
            for (int lane = 0; lane < 32; ++lane) {
              const int g0 = 4 * mf::group(lane);
              float lsum[2];
              for (int hr = 0; hr < 2; ++hr)
                lsum[hr] = (wg.l[size_t(w)][size_t(g0)][size_t(hr)] + wg.l[size_t(w)][size_t(g0 + 1)][size_t(hr)]) +
                           (wg.l[size_t(w)][size_t(g0 + 2)][size_t(hr)] + wg.l[size_t(w)][size_t(g0 + 3)][size_t(hr)]);
              const float ls = fold ? 1.0f : fp8::kPScale;  // [lean-ops] l summed P·256 already
              const float inv[2] = {lsum[0] > 0.0f ? wg.dv_cur / (ls * lsum[0]) : 0.0f,
                                    lsum[1] > 0.0f ? wg.dv_cur / (ls * lsum[1]) : 0.0f};
              for (int64_t pn = 0; pn < parts; ++pn)
                for (int r = 0; r < int(PN) / 2; ++r) {
                  const mf::Coord c = wgmma::acc_elem(w, lane, r);
                  const int64_t row = i0 + 64 * g + c.row;
                  if (row >= s.N) continue;
                  O.store(row, PN * pn + c.col, wg.o[size_t(pn)].reg(w, lane, r) * inv[(r % 4) / 2]);
                  ++led.nonmatmul_ops;
                }
              if (mf::thread_in_group(lane) == 0)
                for (int hr = 0; hr < 2; ++hr) {
                  const int64_t row = i0 + 64 * g + 16 * w + mf::group(lane) + 8 * hr;
                  if (row >= s.N) continue;
                  const float m = wg.m[size_t(w)][size_t(lane)][size_t(hr)];
                  Lse.store(0, row, lsum[hr] > 0.0f ? (m + std::log2(lsum[hr]) - (fold ? fp8::kLog2PScale : 0.0f)) * kLn2 : kInf);
                  led.nonmatmul_ops += 2;
                }
            }
          }
      }
    }
  return res;
}

// The ledger in closed form (docs/21_fp8.md). Per (b, h): the quantize kernels read each tensor twice
// in bf16 (their amax, then their codes) and write a byte per element (Vᵀ: nk32 keys), a word per
// group (amax's memset, the descale) and an atomic per block of 32 rows; the forward is step 16's at a
// byte per element of Q, K and V, with V's transpose in shared memory, O written from the registers.
LedgerSet closed_form(const Shape& s, const Schedule& sc, int v_layout, int ops) {
  const bool vt = v_layout == kVPretransposed;
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, G = sc.consumers();
  const int64_t nk32 = (Nk + 31) / 32 * 32, Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  const bool block = s.fp8_block;
  const int64_t tr = s.incoherent ? transform_ops(s) : 0;
  LedgerSet ls;
  {
    const int64_t gq = fp8::groups(N, block), gk = fp8::groups(Nk, block);
    const int64_t groups = B * H * gq + 2 * B * Hkv * gk;
    const int64_t qe = B * H * N * d, ke = B * Hkv * Nk * d, ve = vt ? B * Hkv * d * nk32 : ke;
    Ledger& a = ls["amax"];  // read in bf16, the transform for Q and K, |y| and max per element; an atomic per 32 rows
    a.gmem_read = 2 * (qe + 2 * ke);
    a.gmem_write = 4 * groups;  // the memset of the amax words
    a.gmem_atomic = 4 * (B * H * num_tiles(N, kQuantRows) + 2 * B * Hkv * num_tiles(Nk, kQuantRows));
    a.nonmatmul_ops = tr * (qe + ke) + (qe + 2 * ke);
    Ledger& q = ls["quantize"];  // read again, the transform again, the multiply and cast per code, a descale per group
    q.gmem_read = 2 * (qe + 2 * ke);
    q.gmem_write = 4 * groups + qe + ke + ve;
    q.nonmatmul_ops = tr * (qe + ke) + 2 * (qe + ke + ve);
    q.workspace = int64_t(workspace_bytes(s, {{"v", kVLayoutNames[v_layout]}}));
  }
  Ledger& led = ls["fp8"];
  int64_t pairs = 0, masked = 0, diagonal = 0, k_rows = 0, v_cols = 0, qtiles = 0, q_rows = 0;
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    const int64_t first = first_kv_tile(i0, i1, N, Nk, Bc, s.causal, s.window);
    pairs += T - first;
    qtiles += T > first;
    if (T > first) q_rows += i1 - i0;
    for (int64_t j = first; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal, s.window);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal, s.window) == TileKind::Diagonal;
      k_rows += std::min(Bc, Nk - j * Bc);
      v_cols += std::min(Bc, (vt ? nk32 : Nk) - j * Bc);
    }
  }
  const int64_t BH = B * H, W = 4 * G;
  led.gmem_read = BH * (q_rows * d + k_rows * d + v_cols * d + Tr * 4 + pairs * 8);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  // TMA writes whole tiles; the transposers write Vᵀ
  led.smem_write = BH * (qtiles * Br * d + pairs * (Bc * d + d * Bc + (vt ? 0 : Bc * d)));
  led.smem_read = BH * pairs * (G * ((64 + Bc) * d + d * Bc) + (vt ? 0 : Bc * d));
  led.barriers = BH * Tr;
  led.matmul_flops = BH * pairs * G * 2 * (2 * 64 * Bc * d);
  // per warp and tile: the softmax (5 per entry), the row statistics, Õ's sum (16·d), and in plain its rescale
  // (16·d) and P·256 (16·Bc): --ops lean folds both away, --ops fold P·256 alone ([lean-ops])
  led.nonmatmul_ops = BH * (pairs * W * (16 * Bc * 5 + 48 + 16 * d + (ops_fuse(ops) ? 0 : 16 * d) + (ops_fold(ops) ? 0 : 16 * Bc)) + masked * W * 16 * Bc + N * d + 2 * N);
  led.exps = BH * pairs * Br * (Bc + 4);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
  led.smem_peak = smem_bytes(sc, int(d));
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d), v_layout_of(o)), v_layout_of(o), ops_of(o, int(s.d)));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) {
  return closed_form(s, schedule_for(int(s.d), v_layout_of(o)), v_layout_of(o), ops_of(o, int(s.d)));
}
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), v_layout_of(o)), int(s.d)); }
}  // namespace

size_t workspace_bytes(const Shape& s, const StepOptions& opts) {
  return size_t(layout(s.B, s.H, s.hkv(), s.N, s.Nk, s.d, s.fp8_block, v_layout_of(opts) == kVPretransposed).bytes);
}

int v_layout_of(const StepOptions& opts) { return choice_index(opts, "v", kVLayoutNames, kVLayouts, "step21"); }
// [per-d-defaults] A flag whose default is "auto": the head dimension's choice when absent or "auto", else
// the value named (an unknown one throws, naming the flag).
static int choice_or_auto(const StepOptions& opts, const char* flag, const char* const* names, int count, int dflt) {
  const auto it = opts.find(flag);
  return it == opts.end() || it->second == kAuto ? dflt : choice_index(opts, flag, names, count, "step21");
}
int pv_order_of(const StepOptions& opts, int d) { return choice_or_auto(opts, "pv", kPvOrderNames, kPvOrders, default_pv_order(d)); }
int ops_of(const StepOptions& opts, int d) { return choice_or_auto(opts, "ops", kOpsNames, kOpsChoices, default_ops(d)); }

namespace {
std::string run_options_reason(const Shape& s, const StepOptions& o) { return v_layout_reason(int(s.d), v_layout_of(o)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "21";
    i.slug = "fp8";
    i.title = "The FP8 forward: step 16's kernel on e4m3 codes, with their scales, V transposed in shared memory and an optional Hadamard transform";
    i.teaches = "e4m3 and its scales, FP8 wgmma (k = 32, K-major only), P cast in registers in the fragment's key order, V transposed by the producer's warps";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag f{"v", {}, "where Vᵀ comes from: pretransposed (written transposed by the quantize kernel; the fastest at d = 128 and 256), kernel (transposed in shared memory by the producer's warps), or kernel-stepped (kernel's transpose, its addresses stepped from per-lane constants) (docs/21_fp8.md)"};
      for (const char* n : kVLayoutNames) f.choices.push_back(n);
      // [pv-order] an experiment (not swept): the blueprint's arithmetic and ledger are the same either way
      // [per-d-defaults] auto first: the default is the head dimension's fastest pair of --pv and --ops
      StepFlag pv{"pv", {kAuto}, "when a consumer issues the previous tile's P·V: auto (overlap at d = 128, serial at d = 256: the faster of the two at each), overlap (in the turn that issues S, step 16's order) or serial (alone before S, summed into O before S is issued: fewer live registers at d = 256) (docs/21_fp8.md)"};
      for (const char* n : kPvOrderNames) pv.choices.push_back(n);
      pv.sweep = false;
      // [lean-ops] an experiment (not swept): the blueprint and the ledger follow it (the same bytes; fewer
      // non-matmul operations, and the kernel's roundings: the exponent's + 8, one FFMA for two)
      StepFlag ops{"ops", {kAuto}, "the consumers' FP32 instructions per entry: auto (lean at d = 128, fold at d = 256: the fastest at each), plain (step 16's: P times 256 before its cast, O rescaled by a multiply and summed by an add), lean (the 256 folded into the exponent, O's rescale fused into the next sum's FFMA) or fold (the 256 folded into the exponent alone) (docs/21_fp8.md)"};
      for (const char* n : kOpsNames) ops.choices.push_back(n);
      ops.sweep = false;
      i.flags = {f, pv, ops};
    }
    i.experiments_everywhere = true;  // [pv-order] [lean-ops] compiled for both head dimensions and every --v
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.fp8 = true;              // [fp8] --dtype e4m3, its only storage type
    i.supports_gqa = true;     // [gqa] K's and V's codes and scales per key/value head
    i.supports_window = true;  // [window] step 16's band of tiles
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async with e4m3 operands, TMA and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "Q's and K's e4m3 rows are one 64-byte swizzled row (d = 64) or 128-byte swizzled panel rows ([stored-d], steps/21_fp8/schedule.hpp)";
    i.options_reason = run_options_reason;  // [sw64] --v kernel and kernel-stepped from d = 128
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step21_";
    return i;
  }();
  return step;
}

}  // namespace fa::step21
