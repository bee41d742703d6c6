#include "reference.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "parallel.hpp"
#include "rng.hpp"

namespace fa {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<int64_t> pick_rows(const Shape& s, uint64_t seed, double budget) {
  const double per_row = double(s.B) * double(s.H) * double(s.Nk) * double(s.d);
  std::vector<int64_t> rows;
  if (per_row * double(s.N) <= budget) {
    for (int64_t i = 0; i < s.N; ++i) rows.push_back(i);
    return rows;
  }
  const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(budget / per_row), 8, s.N);
  std::vector<char> taken(static_cast<size_t>(s.N), 0);
  auto take = [&](int64_t i) {
    if (i >= 0 && i < s.N && !taken[static_cast<size_t>(i)]) { taken[static_cast<size_t>(i)] = 1; rows.push_back(i); }
  };
  take(0);
  take(s.N - 1);
  if (s.causal) {  // the first row that sees a key: i + Nk - N >= 0
    const int64_t first = std::max<int64_t>(0, s.N - s.Nk);
    take(first - 1);
    take(first);
  }
  Rng rng(seed ^ 0x5eedf00dull);
  while (static_cast<int64_t>(rows.size()) < want) take(static_cast<int64_t>(rng.below(static_cast<uint64_t>(s.N))));
  std::sort(rows.begin(), rows.end());
  return rows;
}

Reference reference_forward(const Shape& s, const Inputs& in, const std::vector<int64_t>& rows) {
  const int64_t R = static_cast<int64_t>(rows.size());
  Reference ref;
  ref.rows = rows;
  ref.d = s.d;
  ref.o.assign(static_cast<size_t>(s.B * s.H * R * s.d), 0.0);
  ref.lse.assign(static_cast<size_t>(s.B * s.H * R), 0.0);
  const double scale = s.softmax_scale();
  const double inf = std::numeric_limits<double>::infinity();

  // Heads are independent: one task each (each writes only its own slice of the result).
  parallel_for(s.B * s.H, [&](int64_t bh) {
    {
      const int64_t b = bh / s.H, h = bh % s.H;
      // Upcast this head to double once (the values are already rounded to the storage type).
      MatD Q(R, s.d), K(s.Nk, s.d), V(s.Nk, s.d);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < s.d; ++c) Q(r, c) = in.q.at(b, h, rows[static_cast<size_t>(r)], c);
      for (int64_t j = 0; j < s.Nk; ++j)
        for (int64_t c = 0; c < s.d; ++c) { K(j, c) = in.k.at(b, h, j, c); V(j, c) = in.v.at(b, h, j, c); }

      MatD S = scale * (Q * K.transpose());  // [R, Nk]
      MatD P = MatD::Zero(R, s.Nk);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t last = s.last_visible_key(rows[static_cast<size_t>(r)]);  // keys 0..last are visible
        const int64_t n_vis = std::min<int64_t>(last + 1, s.Nk);
        if (n_vis <= 0) { ref.lse[static_cast<size_t>(bh * R + r)] = inf; continue; }  // O row stays 0
        const double m = S.row(r).head(n_vis).maxCoeff();
        double l = 0.0;
        for (int64_t j = 0; j < n_vis; ++j) { P(r, j) = std::exp(S(r, j) - m); l += P(r, j); }
        P.row(r).head(n_vis) /= l;
        ref.lse[static_cast<size_t>(bh * R + r)] = m + std::log(l);
      }
      MatD O = P * V;  // [R, d]
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < s.d; ++c) ref.o[static_cast<size_t>((bh * R + r) * s.d + c)] = O(r, c);
    }
  });
  return ref;
}

Gradients reference_backward(const Shape& s, const Inputs& in, const Tensor4& dO) {
  Gradients g;
  g.dq.assign(static_cast<size_t>(s.B * s.H * s.N * s.d), 0.0);
  g.dk.assign(static_cast<size_t>(s.B * s.H * s.Nk * s.d), 0.0);
  g.dv.assign(static_cast<size_t>(s.B * s.H * s.Nk * s.d), 0.0);
  g.D.assign(static_cast<size_t>(s.B * s.H * s.N), 0.0);
  const double scale = s.softmax_scale();
  parallel_for(s.B * s.H, [&](int64_t bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    MatD Q(s.N, s.d), K(s.Nk, s.d), V(s.Nk, s.d), G(s.N, s.d);
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.d; ++c) { Q(i, c) = in.q.at(b, h, i, c); G(i, c) = dO.at(b, h, i, c); }
    for (int64_t j = 0; j < s.Nk; ++j)
      for (int64_t c = 0; c < s.d; ++c) { K(j, c) = in.k.at(b, h, j, c); V(j, c) = in.v.at(b, h, j, c); }
    const MatD S = scale * (Q * K.transpose());
    MatD P = MatD::Zero(s.N, s.Nk);  // masked entries and rows that see no key stay 0
    for (int64_t i = 0; i < s.N; ++i) {
      const int64_t n_vis = std::min<int64_t>(s.last_visible_key(i) + 1, s.Nk);
      if (n_vis <= 0) continue;
      const double m = S.row(i).head(n_vis).maxCoeff();
      double l = 0.0;
      for (int64_t j = 0; j < n_vis; ++j) { P(i, j) = std::exp(S(i, j) - m); l += P(i, j); }
      P.row(i).head(n_vis) /= l;
    }
    const MatD O = P * V;
    const MatD dV = P.transpose() * G;
    const MatD dP = G * V.transpose();
    MatD dS(s.N, s.Nk);
    for (int64_t i = 0; i < s.N; ++i) {
      const double D = G.row(i).dot(O.row(i));  // = Σ_j P_ij dP_ij
      g.D[static_cast<size_t>(bh * s.N + i)] = D;
      for (int64_t j = 0; j < s.Nk; ++j) dS(i, j) = P(i, j) * (dP(i, j) - D);
    }
    const MatD dQ = scale * (dS * K), dK = scale * (dS.transpose() * Q);
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.d; ++c) g.dq[static_cast<size_t>((bh * s.N + i) * s.d + c)] = dQ(i, c);
    for (int64_t j = 0; j < s.Nk; ++j)
      for (int64_t c = 0; c < s.d; ++c) {
        g.dk[static_cast<size_t>((bh * s.Nk + j) * s.d + c)] = dK(j, c);
        g.dv[static_cast<size_t>((bh * s.Nk + j) * s.d + c)] = dV(j, c);
      }
  });
  return g;
}

}  // namespace fa
