// Step 17 — the blueprint: the kernel's grid on the CPU. A block per (split, kv-head·chunk,
// sequence) takes a group's query heads as the rows of one tile ([gqa-pack]) and one split's keys
// ([split-kv]); per K/V tile each of its warps runs the online softmax of its rows against its
// slice of the tile's keys ([slices]), reading the cache through the block table ([paged]) and
// appending the new tokens' K/V on the way ([append]); the slices are merged at the end of the
// block, the splits by the combine ([merge]: common/reference/decode.hpp's merge). Products are plain loops
// over the storage type's values in fp32, P rounded to the storage type as the kernel packs it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/decode.hpp"
#include "schedule.hpp"

namespace fa::step17 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t blueprint_splits(const Shape& s, const StepOptions& o) {
  return choose_splits(s.B, s.H, s.hkv(), s.N, s.Nk, s.window, o, kBlueprintSms, kBlueprintBlocksPerSm);
}

// One warp's running softmax over its key slice: 16 rows (m in the log2 domain, l, Õ).
struct SliceState {
  std::vector<float> m, l, o;  // [16], [16], [16·d]
};

}  // namespace

int page_size_of(const StepOptions& o) {
  const int k = choice_index(o, "page-size", kPageSizes, 6, "step17");
  return k == 0 ? 0 : std::stoi(kPageSizes[k]);
}
Combine combine_of(const StepOptions& o) {
  const auto it = o.find("combine");
  if (it == o.end() || it->second == "fused") return Combine::fused;
  if (it->second == "kernel") return Combine::kernel;
  if (it->second == "pdl") return Combine::pdl;
  throw std::invalid_argument("step17: unknown --combine " + it->second);
}
int64_t splits_of(const StepOptions& o) {
  const auto it = o.find("splits");
  if (it == o.end() || it->second == "auto") return 0;
  return std::stoll(it->second);
}
int64_t choose_splits(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t window, const StepOptions& o,
                      int64_t sms, int64_t blocks_per_sm) {
  if (const int64_t given = splits_of(o)) return given;
  const int64_t span = window > 0 ? std::min<int64_t>(Nk, window + N) : Nk;
  return decode::num_splits(sms, blocks_per_sm, B * Hkv * row_chunks(H, Hkv, N), span, kBc, kMaxSplits);
}

BlueprintResult blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), N = s.N, d = s.d, G = H / Hkv, M = G * N;
  const int64_t chunks = row_chunks(H, Hkv, N), splits = blueprint_splits(s, o);
  const int page = page_size_of(o);
  BlueprintResult res;
  res.out.o = Tensor4(B, H, N, d);
  res.out.lse = Tensor4(B, H, N, 1);
  Ledger& led = res.ledger["split"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const float sl2 = static_cast<float>(s.softmax_scale()) * kLog2e;

  // [paged] The cache as the kernel finds it: the pool (through a shuffled block table) or the K/V
  // inputs, holding each sequence's cached tokens; everything from the first new token on NaN —
  // the new tokens come from K_new/V_new (the inputs' rows cache_lens[b] ..) and are appended.
  std::vector<int64_t> held(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) held[size_t(b)] = s.decode() ? s.cache_lens[size_t(b)] : s.Nk;
  // The table is checked for every page a sequence's keys use: the cached ones and the new ones.
  std::vector<int64_t> keys(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) keys[size_t(b)] = s.keys(b);
  const decode::PagedLayout pl = decode::shuffled_layout(keys, s.Nk, page > 0 ? page : 16, layout_seed(s));
  if (page > 0) {
    const std::string bad = decode::validate(pl, s.Nk);
    if (!bad.empty()) throw Unsupported("step17: " + bad);  // exit 2 with the message, before any launch
  }
  const int64_t cache_rows = page > 0 ? pl.num_pages * page * Hkv : B * Hkv * s.Nk;
  std::vector<float> kc(size_t(cache_rows * d), std::nanf("")), vc = kc;
  auto cache_row = [&](int64_t b, int64_t kv, int64_t t) {
    return page > 0 ? (pl.page_of(b, t) * page + t % page) * Hkv + kv : (b * Hkv + kv) * s.Nk + t;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kv = 0; kv < Hkv; ++kv)
      for (int64_t t = 0; t < held[size_t(b)]; ++t)
        for (int64_t c = 0; c < d; ++c) {
          kc[size_t(cache_row(b, kv, t) * d + c)] = in.k.at(b, kv, t, c);
          vc[size_t(cache_row(b, kv, t) * d + c)] = in.v.at(b, kv, t, c);
        }
  GlobalMat Kc(kc.data(), cache_rows, d, d, st, led), Vc(vc.data(), cache_rows, d, d, st, led);
  const GlobalMat Kin(in.k.v.data(), B * Hkv * s.Nk, d, d, st, led), Vin(in.v.v.data(), B * Hkv * s.Nk, d, d, st, led);
  const GlobalMat Qg(in.q.v.data(), B * H * N, d, d, st, led);
  GlobalMat Og(res.out.o.v.data(), B * H * N, d, d, st, led), Lg(res.out.lse.v.data(), B * H * N, 1, 1, f32, led);
  // The splits' partials (fp32, in the workspace): [row][split][d] and [row][split].
  std::vector<float> part_o(static_cast<size_t>(splits > 1 ? B * H * N * splits * d : 0)), part_l(size_t(splits > 1 ? B * H * N * splits : 0));
  GlobalMat Po(part_o.data(), B * H * N * splits, d, d, f32, led), Pl(part_l.data(), B * H * N * splits, 1, 1, f32, led);

  for (int64_t b = 0; b < B; ++b) {
    const int64_t keys_b = s.keys(b), new0 = s.decode() ? keys_b - N : keys_b;
    for (int64_t kv = 0; kv < Hkv; ++kv)
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t r0 = chunk * kRowsPerBlock, rows = std::min<int64_t>(kRowsPerBlock, M - r0);
        const int RT = row_tiles(rows), SL = key_slices(rows), KW = kBc / SL;
        int64_t qi0 = 0, qi1 = 0;
        chunk_queries(r0, r0 + rows, N, qi0, qi1);
        for (int64_t split = 0; split < splits; ++split) {  // a block
          const KeyRange range = split_range(chunk_keys(keys_b, N, qi0, qi1, s.causal, s.window), splits, split);
          const int64_t Tn = num_tiles(range.hi - range.lo, kBc);
          Smem smem(kSmemBudget, led);
          std::vector<SmemTile> Ks, Vs;
          for (int x = 0; x < kStages; ++x) {
            Ks.push_back(smem.tile(kBc, d, st));
            Vs.push_back(smem.tile(kBc, d, st));
          }
          SmemTile Qs = smem.overlay(kRowsPerBlock, d, st);  // [q-alias] over the last stage's K tile
          // [gqa-pack] Row r: query head kv·G + r / N, token r % N.
          auto q_row = [&](int64_t r) { return (b * H + kv * G + r / N) * N + r % N; };
          // [append] Load key t's K and V rows into a stage: from the cache, or for a new token
          // from K_new/V_new (the inputs' rows) — read twice, by the append's load and the copy —
          // and stored into the cache. Keys past the split's end are zero-filled, for free.
          auto load_tile = [&](int stage, int64_t j0) {
            for (int64_t r = 0; r < kBc; ++r) {
              const int64_t t = j0 + r;
              for (int64_t c = 0; c < d; ++c) {
                if (t >= range.hi) {
                  Ks[size_t(stage)].write(r, c, 0.0f);
                  Vs[size_t(stage)].write(r, c, 0.0f);
                } else if (t >= new0) {
                  const int64_t src = (b * Hkv + kv) * s.Nk + t;
                  Kc.store(cache_row(b, kv, t), c, Kin.load(src, c));
                  Vc.store(cache_row(b, kv, t), c, Vin.load(src, c));
                  Ks[size_t(stage)].write(r, c, Kin.load(src, c));
                  Vs[size_t(stage)].write(r, c, Vin.load(src, c));
                } else {
                  Ks[size_t(stage)].write(r, c, Kc.load(cache_row(b, kv, t), c));
                  Vs[size_t(stage)].write(r, c, Vc.load(cache_row(b, kv, t), c));
                }
              }
            }
          };
          if (Tn > 0) {
            for (int64_t r = 0; r < kRowsPerBlock; ++r)
              for (int64_t c = 0; c < d; ++c) Qs.write(r, c, r < rows ? Qg.load(q_row(r0 + r), c) : 0.0f);
            load_tile(0, range.lo);
          }
          if (Tn > 1) load_tile(1, range.lo + kBc);

          std::vector<SliceState> ws(static_cast<size_t>(kWarps));
          std::vector<std::vector<float>> qreg(static_cast<size_t>(kWarps));  // the warp's 16 Q rows, in registers
          for (auto& w : ws) w = {std::vector<float>(16, -kInf), std::vector<float>(16, 0.0f), std::vector<float>(size_t(16 * d), 0.0f)};
          for (int64_t j = 0; j < Tn; ++j) {
            const int64_t j0 = range.lo + j * kBc;
            const int stage = int(j % kStages);
            // [pipeline] Tile j + 2 into the stage freed at the end of step j − 1, then wait for tile j.
            // [q-alias] At j = 0 the warps first take Q into registers (below), and tile 2 goes into
            // its stage only after a second barrier.
            if (j > 0 && j + 2 < Tn) load_tile(int((j + 2) % kStages), j0 + 2 * kBc);
            barrier(led);
            const bool masked = tile_needs_mask(j0, range.hi, keys_b, N, qi0, qi1, s.causal, s.window);
            led.tiles_computed += 1;
            led.tiles_masked += masked;
            if (j == 0) {
              for (int w = 0; w < kWarps; ++w) {
                qreg[size_t(w)].resize(size_t(16 * d));
                for (int64_t r = 0; r < 16; ++r)
                  for (int64_t c = 0; c < d; ++c) qreg[size_t(w)][size_t(r * d + c)] = Qs.read(16 * (w % RT) + r, c);
              }
              barrier(led);
              if (2 < Tn) load_tile(2 % kStages, j0 + 2 * kBc);
            }
            for (int w = 0; w < kWarps; ++w) {
              const int rt = w % RT, ks = w / RT;
              SliceState& x = ws[size_t(w)];
              // lab:begin slice-softmax {O L}: [slices]: the warp's 16 rows against its KW keys: S, softmax, Õ …
              std::vector<float> K(static_cast<size_t>(KW * d)), V(size_t(KW * d));  // the slice, read once (ldmatrix)
              for (int64_t k = 0; k < KW; ++k)
                for (int64_t c = 0; c < d; ++c) {
                  K[size_t(k * d + c)] = Ks[size_t(stage)].read(KW * ks + k, c);
                  V[size_t(k * d + c)] = Vs[size_t(stage)].read(KW * ks + k, c);
                }
              led.matmul_flops += ((KW / 8) * (d / 16) + (d / 8) * (KW / 16)) * 2 * 16 * 8 * 16;
              for (int64_t r = 0; r < 16; ++r) {
                const int64_t row = 16 * rt + r, i = (r0 + row) % N;
                std::vector<float> sc(static_cast<size_t>(KW));
                float mx = -kInf;
                for (int64_t k = 0; k < KW; ++k) {
                  float acc = 0.0f;
                  for (int64_t c = 0; c < d; ++c) acc += qreg[size_t(w)][size_t(r * d + c)] * K[size_t(k * d + c)];
                  const int64_t key = j0 + KW * ks + k;
                  if (masked && (key >= range.hi || !visible(i, key, keys_b, N, s.causal, s.window))) acc = -kInf;
                  sc[size_t(k)] = acc;
                  mx = std::max(mx, acc);
                }
                const float m_new = std::max(x.m[size_t(r)], mx * sl2);
                const float m_use = m_new == -kInf ? 0.0f : m_new;  // [rescale-guard]
                const float alpha = std::exp2(x.m[size_t(r)] - m_use);
                x.m[size_t(r)] = m_new;
                float rs = 0.0f;
                for (int64_t k = 0; k < KW; ++k) {
                  sc[size_t(k)] = std::exp2(std::fma(sc[size_t(k)], sl2, -m_use));
                  rs += sc[size_t(k)];
                }
                x.l[size_t(r)] = x.l[size_t(r)] * alpha + rs;
                for (int64_t c = 0; c < d; ++c) {
                  float acc = x.o[size_t(r * d + c)] * alpha;
                  for (int64_t k = 0; k < KW; ++k) acc += round_to(s.dtype, sc[size_t(k)]) * V[size_t(k * d + c)];
                  x.o[size_t(r * d + c)] = acc;
                }
              }
              // lab:end
              led.nonmatmul_ops += 16 * KW * (masked ? 6 : 5) + 3 * 16 + 16 * d;
              led.exps += 16 * (KW + 4);  // per row: p on its KW keys, masked ones too; alpha in each of its four lanes
            }
            barrier(led);  // every warp is done with tile j's stage
          }
          // [merge-warps] Slices 1.. of each row tile into slice 0 through shared memory.
          if (SL > 1) {
            if (Tn == 0) barrier(led);
            SmemTile scratch = smem.overlay(kWarps, 16 * d + 32, f32);
            for (int w = RT; w < kWarps; ++w)
              for (int64_t r = 0; r < 16; ++r) {
                for (int64_t c = 0; c < d; ++c) scratch.write(w, r * d + c, ws[size_t(w)].o[size_t(r * d + c)]);
                scratch.write(w, 16 * d + r, ws[size_t(w)].m[size_t(r)]);
                scratch.write(w, 16 * d + 16 + r, ws[size_t(w)].l[size_t(r)]);
              }
            barrier(led);
            for (int rt = 0; rt < RT; ++rt)
              for (int x = 1; x < SL; ++x) {
                SliceState& me = ws[size_t(rt)];
                const int other = rt + x * RT;
                for (int64_t r = 0; r < 16; ++r) {
                  const float mo = scratch.read(other, 16 * d + r), lo = scratch.read(other, 16 * d + 16 + r);
                  std::vector<float> oo(static_cast<size_t>(d));
                  for (int64_t c = 0; c < d; ++c) oo[size_t(c)] = scratch.read(other, r * d + c);
                  // lab:begin merge-warps {O L}: [merge-warps]: fold slice `other`'s (mo, lo, oo) into row r …
                  const float mn = std::max(me.m[size_t(r)], mo), mu = mn == -kInf ? 0.0f : mn;
                  const float as = std::exp2(me.m[size_t(r)] - mu), ao = std::exp2(mo - mu);
                  me.l[size_t(r)] = me.l[size_t(r)] * as + lo * ao;
                  me.m[size_t(r)] = mn;
                  for (int64_t c = 0; c < d; ++c) me.o[size_t(r * d + c)] = me.o[size_t(r * d + c)] * as + oo[size_t(c)] * ao;
                  // lab:end
                }
                led.nonmatmul_ops += 16 * (2 * d + 6);
                led.exps += 16 * 4 * 2;  // per row, in each of its four lanes: the two sides' exp2(m − m_new)
              }
          }
          // [final-divide] The split's O and L: the answer with one split, else its partial.
          for (int rt = 0; rt < RT; ++rt)
            for (int64_t r = 0; r < 16; ++r) {
              const int64_t row = 16 * rt + r;
              if (row >= rows) continue;
              const SliceState& x = ws[size_t(rt)];
              const float l = x.l[size_t(r)];
              const float L = l > 0.0f ? (x.m[size_t(r)] + std::log2(l)) * kLn2 : (splits == 1 ? kInf : -kInf);
              const int64_t qr = q_row(r0 + row);
              for (int64_t c = 0; c < d; ++c) {
                const float v = l > 0.0f ? x.o[size_t(r * d + c)] * (1.0f / l) : 0.0f;
                if (splits == 1) Og.store(qr, c, v);
                else Po.store(qr * splits + split, c, v);
              }
              if (splits == 1) Lg.store(qr, 0, L);
              else Pl.store(qr * splits + split, 0, L);
              led.nonmatmul_ops += d + 2;
            }
        }
      }
  }
  // [merge] The combine: per query row, the splits' partials merged by log-sum-exp — in a kernel of its
  // own, or ([fused-combine]) by the last block of each group, which a counter in global memory finds:
  // an atomic add per block, and the last one's reset of the counter.
  if (splits > 1) {
    const bool fused = combine_of(o) == Combine::fused;
    if (fused) {
      led.gmem_atomic += B * Hkv * chunks * splits * 4;
      led.gmem_write += B * Hkv * chunks * 4;
    }
    Ledger& comb = res.ledger[fused ? "split" : "combine"];  // after this, `led` may dangle: not used again
    Po.retarget(comb);
    Pl.retarget(comb);
    Og.retarget(comb);
    Lg.retarget(comb);
    for (int64_t qr = 0; qr < B * H * N; ++qr) {
      std::vector<decode::Partial> parts(static_cast<size_t>(splits));
      for (int64_t sp = 0; sp < splits; ++sp) {
        parts[size_t(sp)].lse = Pl.load(qr * splits + sp, 0);
        parts[size_t(sp)].o.resize(size_t(d));
        for (int64_t c = 0; c < d; ++c) parts[size_t(sp)].o[size_t(c)] = Po.load(qr * splits + sp, c);
      }
      std::vector<double> merged(static_cast<size_t>(d));
      const double L = decode::merge(parts, d, merged.data());
      for (int64_t c = 0; c < d; ++c) Og.store(qr, c, float(merged[size_t(c)]));
      Lg.store(qr, 0, float(L));
      comb.nonmatmul_ops += splits * (d + 3) + 2;
      bool seen = false;  // [merge]: a row whose splits all saw no key (every L_s = −inf) takes no exp
      for (const auto& part : parts) seen = seen || part.lse != -kInf;
      comb.exps += seen ? splits + merge_batches(splits) : 0;  // exp(L_s − m) per split, one rescale per batch
    }
  }
  // (res.ledger["combine"] may have moved the split's ledger: find it again.)
  res.ledger["split"].workspace = int64_t(workspace_of(B, H, Hkv, N, s.Nk, d, s.decode(), page, splits).total);
  return res;
}

// The ledger in closed form (docs/17_decode.md): the same grid, counted without the data. Per
// block with T tiles over keys [lo, hi), c of them cached and n new: Q's rows once, K and V's c
// cached rows once, the n new rows read twice and written once each ([append]); per tile and warp
// its slice of K and V from shared memory; the merge of the slices; O and L or the partials out.
LedgerSet closed_form(const Shape& s, const StepOptions& o) {
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), N = s.N, d = s.d, G = H / Hkv, M = G * N;
  const int64_t chunks = row_chunks(H, Hkv, N), splits = blueprint_splits(s, o);
  const int page = page_size_of(o);
  LedgerSet ls;
  Ledger& led = ls["split"];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t keys_b = s.keys(b), new0 = s.decode() ? keys_b - N : keys_b;
    for (int64_t kv = 0; kv < Hkv; ++kv)
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t r0 = chunk * kRowsPerBlock, rows = std::min<int64_t>(kRowsPerBlock, M - r0);
        const int64_t RT = row_tiles(rows), SL = key_slices(rows), KW = kBc / SL;
        int64_t qi0 = 0, qi1 = 0;
        chunk_queries(r0, r0 + rows, N, qi0, qi1);
        for (int64_t split = 0; split < splits; ++split) {
          const KeyRange r = split_range(chunk_keys(keys_b, N, qi0, qi1, s.causal, s.window), splits, split);
          const int64_t T = num_tiles(r.hi - r.lo, kBc);
          const int64_t fresh = std::max<int64_t>(0, r.hi - std::max(r.lo, new0)), cached = (r.hi - r.lo) - fresh;
          if (T > 0) led.gmem_read += rows * d * 2, led.smem_write += kRowsPerBlock * d * 2;
          led.gmem_read += 2 * (cached + 2 * fresh) * d * 2;
          led.gmem_write += 2 * fresh * d * 2;
          led.smem_write += T * 2 * kBc * d * 2;
          led.smem_read += (T > 0 ? kWarps * 16 * d * 2 : 0) + T * kWarps * 2 * KW * d * 2;
          led.barriers += 2 * T + (T > 0 ? 1 : 0) + (SL > 1 ? (T == 0 ? 2 : 1) : 0);
          led.matmul_flops += T * kWarps * ((KW / 8) * (d / 16) + (d / 8) * (KW / 16)) * 2 * 16 * 8 * 16;
          led.tiles_computed += T;
          for (int64_t j = 0; j < T; ++j) {
            const bool masked = tile_needs_mask(r.lo + j * kBc, r.hi, keys_b, N, qi0, qi1, s.causal, s.window);
            led.tiles_masked += masked;
            led.nonmatmul_ops += kWarps * (16 * KW * (masked ? 6 : 5) + 3 * 16 + 16 * d);
          }
          led.exps += T * kWarps * 16 * (KW + 4);
          if (SL > 1) {
            led.smem_write += (kWarps - RT) * 16 * (d + 2) * 4;
            led.smem_read += RT * (SL - 1) * 16 * (d + 2) * 4;
            led.nonmatmul_ops += RT * (SL - 1) * 16 * (2 * d + 6);
            led.exps += RT * (SL - 1) * 16 * 8;
          }
          led.gmem_write += splits == 1 ? rows * (d * 2 + 4) : rows * (d * 4 + 4);
          led.nonmatmul_ops += rows * (d + 2);
        }
      }
  }
  led.smem_peak = smem_bytes(int(d));
  led.workspace = int64_t(workspace_of(B, H, Hkv, N, s.Nk, d, s.decode(), page, splits).total);
  if (splits > 1) {
    const bool fused = combine_of(o) == Combine::fused;
    if (fused) led.gmem_atomic += B * Hkv * chunks * splits * 4, led.gmem_write += B * Hkv * chunks * 4;  // [fused-combine]
    Ledger& comb = ls[fused ? "split" : "combine"];
    const int64_t rows = B * H * N;
    comb.gmem_read += rows * splits * (d + 1) * 4;
    comb.gmem_write += rows * (d * 2 + 4);
    comb.nonmatmul_ops += rows * (splits * (d + 3) + 2);
    int64_t seen = 0;  // query rows that see a key: the others' splits all have L_s = −inf
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < N; ++i) seen += s.last_visible_key(i, b) >= 0;
    comb.exps += H * seen * (splits + merge_batches(splits));
  }
  return ls;
}

#ifndef FA_HAVE_CUDA
// Without CUDA the GPU tests are built but skip; this keeps them linking.
std::string appended_cache_mismatch(const Shape&, const Inputs&, const StepOptions&) {
  throw std::runtime_error("step17: built without CUDA");
}
#endif

namespace {
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(int(s.d)); }
std::string run_options_reason(const Shape& s, const StepOptions& o) {
  const int64_t sp = splits_of(o);
  if (sp > kMaxSplits) return "--splits " + std::to_string(sp) + " is above the kernel's " + std::to_string(kMaxSplits);
  (void)s;
  return "";
}
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "17";
    i.slug = "decode";
    i.title = "decoding: split-KV over a paged cache, the query heads of a group packed as one tile";
    i.teaches = "split-KV (Flash-Decoding), GQA packing, a paged KV cache";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit]
    StepFlag page{"page-size", {}, "the cache in pages of this many tokens through a block table, or none (contiguous)"};
    for (const char* p : kPageSizes) page.choices.push_back(p);
    StepFlag sp{"splits", {"auto", "1", "2", "3", "4", "8", "16", "32", "64", "128"},
                "how many blocks share a sequence's keys: auto (the heuristic, docs/17_decode.md) or a count"};
    sp.sweep = false;  // an experiment: the shape-matrix tests run the heuristic's choice
    StepFlag comb{"combine", {"fused", "kernel", "pdl"},
                  "who merges the splits: the last block of each group (fused), a kernel of its own after them,\n"
                  "                   or that kernel as a programmatic dependent launch overlapping them (pdl, sm_90)"};
    comb.sweep = false;
    i.flags = {page, sp, comb};
    i.blueprint = blueprint;
    i.closed_form = closed_form;
    i.smem_bytes = run_smem_bytes;
    i.options_reason = run_options_reason;
    i.supports_gqa = true;
    i.supports_window = true;
    i.supports_decode = true;
    i.experiments_everywhere = true;  // --splits, --combine: compiled for every dtype and d
    i.max_n = kMaxQlen;
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
    i.prepare = prepare;
#endif
    i.kernel_prefix = "step17_";
    return i;
  }();
  return step;
}

}  // namespace fa::step17
