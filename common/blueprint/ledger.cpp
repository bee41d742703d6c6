#include "blueprint/ledger.hpp"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace fa {

Ledger& Ledger::operator+=(const Ledger& o) {
  gmem_read += o.gmem_read;
  gmem_write += o.gmem_write;
  gmem_atomic += o.gmem_atomic;
  smem_read += o.smem_read;
  smem_write += o.smem_write;
  barriers += o.barriers;
  matmul_flops += o.matmul_flops;
  cuda_core_flops += o.cuda_core_flops;
  nonmatmul_ops += o.nonmatmul_ops;
  exps += o.exps;
  fma_exps += o.fma_exps;
  tiles_computed += o.tiles_computed;
  tiles_masked += o.tiles_masked;
  tiles_skipped += o.tiles_skipped;
  smem_peak = std::max(smem_peak, o.smem_peak);
  workspace += o.workspace;
  return *this;
}

std::string Ledger::diff(const Ledger& o) const {
  std::ostringstream os;
  auto f = [&](const char* name, int64_t a, int64_t b) {
    if (a != b) os << name << ": " << a << " vs " << b << "; ";
  };
  f("gmem_read", gmem_read, o.gmem_read);
  f("gmem_write", gmem_write, o.gmem_write);
  f("gmem_atomic", gmem_atomic, o.gmem_atomic);
  f("smem_read", smem_read, o.smem_read);
  f("smem_write", smem_write, o.smem_write);
  f("barriers", barriers, o.barriers);
  f("matmul_flops", matmul_flops, o.matmul_flops);
  f("cuda_core_flops", cuda_core_flops, o.cuda_core_flops);
  f("nonmatmul_ops", nonmatmul_ops, o.nonmatmul_ops);
  f("exps", exps, o.exps);
  f("fma_exps", fma_exps, o.fma_exps);
  f("tiles_computed", tiles_computed, o.tiles_computed);
  f("tiles_masked", tiles_masked, o.tiles_masked);
  f("tiles_skipped", tiles_skipped, o.tiles_skipped);
  f("smem_peak", smem_peak, o.smem_peak);
  f("workspace", workspace, o.workspace);
  return os.str();
}

Ledger& LedgerSet::operator[](const std::string& kernel) {
  for (auto& [name, l] : kernels)
    if (name == kernel) return l;
  kernels.emplace_back(kernel, Ledger{});
  return kernels.back().second;
}

Ledger LedgerSet::total() const {
  Ledger t;
  for (const auto& kl : kernels) t += kl.second;
  return t;
}

std::string LedgerSet::diff(const LedgerSet& o) const {
  std::ostringstream os;
  if (kernels.size() != o.kernels.size()) os << "kernel count " << kernels.size() << " vs " << o.kernels.size() << "; ";
  for (size_t i = 0; i < std::min(kernels.size(), o.kernels.size()); ++i) {
    if (kernels[i].first != o.kernels[i].first) os << "kernel " << i << " name " << kernels[i].first << " vs " << o.kernels[i].first << "; ";
    const std::string d = kernels[i].second.diff(o.kernels[i].second);
    if (!d.empty()) os << "[" << kernels[i].first << "] " << d;
  }
  return os.str();
}

namespace {
std::string human_bytes(double b) {
  const char* unit[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000.0 && u < 4) { b /= 1000.0; ++u; }
  std::ostringstream os;
  os << std::fixed << std::setprecision(u == 0 ? 0 : 2) << b << " " << unit[u];
  return os.str();
}
std::string human_count(double x) {
  std::ostringstream os;
  if (x < 1e4) os << std::fixed << std::setprecision(0) << x;
  else os << std::scientific << std::setprecision(2) << x;
  return os.str();
}
}  // namespace

void print_ledger(std::ostream& os, const LedgerSet& ls) {
  os << "  " << std::left << std::setw(10) << "kernel" << std::right << std::setw(12) << "gmem read"
     << std::setw(12) << "gmem write" << std::setw(12) << "smem r+w" << std::setw(10) << "barriers"
     << std::setw(12) << "MMA FLOPs" << std::setw(12) << "FMA FLOPs" << std::setw(11) << "other ops" << std::setw(11) << "exps" << std::setw(16) << "S tiles c/m/s"
     << std::setw(11) << "smem/blk" << "\n";
  auto row = [&](const std::string& name, const Ledger& led) {
    std::ostringstream tiles;
    tiles << led.tiles_computed << "/" << led.tiles_masked << "/" << led.tiles_skipped;
    os << "  " << std::left << std::setw(10) << name << std::right << std::setw(12) << human_bytes(double(led.gmem_read))
       << std::setw(12) << human_bytes(double(led.gmem_write)) << std::setw(12)
       << human_bytes(double(led.smem_read + led.smem_write)) << std::setw(10) << human_count(double(led.barriers))
       << std::setw(12) << human_count(double(led.matmul_flops)) << std::setw(12) << human_count(double(led.cuda_core_flops))
       << std::setw(11) << human_count(double(led.nonmatmul_ops))
       << std::setw(11) << human_count(double(led.exps))
       << std::setw(16) << tiles.str() << std::setw(11) << human_bytes(double(led.smem_peak)) << "\n";
  };
  for (const auto& [name, led] : ls.kernels) row(name, led);
  if (ls.kernels.size() > 1) row("total", ls.total());
  const Ledger t = ls.total();
  os << "  gmem: bytes requested from global memory, before L2 (Nsight's DRAM bytes are what reaches HBM)\n";
  if (t.gmem_atomic > 0)
    os << "  fp32 atomic adds to global memory (apart from reads and writes): " << human_bytes(double(t.gmem_atomic)) << "\n";
  if (t.workspace > 0) os << "  workspace in HBM beyond Q, K, V, O, L: " << human_bytes(double(t.workspace)) << "\n";
}

void write_ledger_csv(std::ostream& os, const LedgerSet& ls) {
  os << "kernel,gmem_read,gmem_write,smem_read,smem_write,barriers,matmul_flops,cuda_core_flops,nonmatmul_ops,tiles_computed,"
        "tiles_masked,tiles_skipped,smem_peak,workspace,gmem_atomic,exps,fma_exps\n";
  for (const auto& [name, led] : ls.kernels)
    os << name << "," << led.gmem_read << "," << led.gmem_write << "," << led.smem_read << "," << led.smem_write << ","
       << led.barriers << "," << led.matmul_flops << "," << led.cuda_core_flops << "," << led.nonmatmul_ops << "," << led.tiles_computed << ","
       << led.tiles_masked << "," << led.tiles_skipped << "," << led.smem_peak << "," << led.workspace << "," << led.gmem_atomic << "," << led.exps << "," << led.fma_exps << "\n";
}

void GlobalMat::bounds(int64_t r, int64_t c) const {
  if (r < 0 || r >= rows_ || c < 0 || c >= cols_) {
    std::ostringstream os;
    os << "blueprint bug: global access (" << r << ", " << c << ") outside a " << rows_ << "x" << cols_ << " matrix";
    throw std::logic_error(os.str());
  }
}

float GlobalMat::load(int64_t r, int64_t c) const {
  bounds(r, c);
  L_->gmem_read += st_.bytes;
  return p_[r * ld_ + c];
}

void GlobalMat::atomic_add(int64_t r, int64_t c, float x) {
  bounds(r, c);
  if (read_only_ || st_.rounds) throw std::logic_error("blueprint bug: atomic add into a read-only or 16-bit matrix");
  L_->gmem_atomic += st_.bytes;
  p_[r * ld_ + c] += x;
}

void GlobalMat::store(int64_t r, int64_t c, float x) {
  bounds(r, c);
  if (read_only_) throw std::logic_error("blueprint bug: store into a read-only global matrix");
  L_->gmem_write += st_.bytes;
  p_[r * ld_ + c] = st_.apply(x);
}

float SmemTile::read(int64_t r, int64_t c) const {
  if (r < 0 || r >= rows_ || c < 0 || c >= cols_) throw std::logic_error("blueprint bug: shared-memory read outside its tile");
  L_->smem_read += st_.bytes;
  return v_[static_cast<size_t>(r * cols_ + c)];
}

void SmemTile::write(int64_t r, int64_t c, float x) {
  if (r < 0 || r >= rows_ || c < 0 || c >= cols_) throw std::logic_error("blueprint bug: shared-memory write outside its tile");
  L_->smem_write += st_.bytes;
  v_[static_cast<size_t>(r * cols_ + c)] = st_.apply(x);
}

void SmemTile::load_from(const GlobalMat& g, int64_t r0, int64_t c0) {
  for (int64_t r = 0; r < rows_; ++r)
    for (int64_t c = 0; c < cols_; ++c) {
      const bool inside = r0 + r < g.rows() && c0 + c < g.cols();
      write(r, c, inside ? g.load(r0 + r, c0 + c) : 0.0f);
    }
}

SmemTile Smem::tile(int64_t rows, int64_t cols, int64_t ld, Store st) {
  const int64_t bytes = rows * ld * st.bytes;
  if (used_ + bytes > cap_) {
    std::ostringstream os;
    os << "schedule error: a block asks for " << used_ + bytes << " bytes of shared memory, more than its "
       << cap_ << "-byte budget (see the step's schedule.hpp)";
    throw std::length_error(os.str());
  }
  used_ += bytes;
  L_->smem_peak = std::max(L_->smem_peak, used_);
  return SmemTile(rows, cols, st, *L_);
}

Frag16 load_frag(const SmemTile& t, int64_t r0, int64_t c0) {
  Frag16 f;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = t.read(r0 + r, c0 + c);
  return f;
}

Frag16 load_frag_transposed(const SmemTile& t, int64_t r0, int64_t c0) {
  // Fragment element (r, c) = tile(r0 + c, c0 + r): a K tile stored [key][dim] read as Kᵀ.
  Frag16 f;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = t.read(r0 + c, c0 + r);
  return f;
}

void mma(Frag16& acc, const Frag16& a, const Frag16& b, Ledger& led) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      float s = acc.x[r][c];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][c];
      acc.x[r][c] = s;
    }
  led.matmul_flops += 2 * 16 * 16 * 16;
}

}  // namespace fa
