#include "harness/cli.hpp"

#include "core/rng.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace fa {

namespace {

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, x);
  if (ec != std::errc() || p != end || v.empty())
    throw CliError(flag + " expects an integer (got '" + v + "')");
  if (x < lo || x > hi) {
    std::ostringstream os;
    os << flag << " must be in [" << lo << ", " << hi << "] (got " << v << ")";
    throw CliError(os.str());
  }
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument("trailing");
    return x;
  } catch (const std::exception&) {
    throw CliError(flag + " expects a number (got '" + v + "')");
  }
}

// A step flag whose choices are off and on (in either order) is a switch: given bare, it means on.
bool is_switch(const StepFlag& f) {
  const auto& c = f.choices;
  return c.size() == 2 && ((c[0] == "off" && c[1] == "on") || (c[0] == "on" && c[1] == "off"));
}

// The steps whose StepInfo sets supports_dropout, for the refusal's message (fa_common cannot
// consult the registry, which links every step and so fa_common itself).
constexpr const char* kDropoutSteps = "steps 12, 13 and 19 (19 with --dropout-kernel run)";
constexpr const char* kFp8Steps = "step 21";  // [fp8] the steps whose StepInfo sets fp8

}  // namespace

std::string usage(const StepInfo& step) {
  std::ostringstream os;
  os << "usage: " << step.program() << " [flags]\n"
     << "  step " << step.id << ": " << step.title << "\n\n"
     << "Runs the step on the GPU when there is one (else its CPU blueprint), checks O and L against\n"
     << "the Eigen double-precision reference, and reports the ledger, the roofline prediction and\n"
     << "the measured time. Exit status: 0 check passed, 1 check failed, 2 bad flags.\n\n"
     << "shape (defaults: GPU B=4 H=16 N=4096 d=128; CPU blueprint B=1 H=2 N=256 d=64):\n"
     << "  --b B            batch size\n"
     << "  --h H            heads\n"
     << "  --n N            query length\n"
     << "  --nk NK          key/value length (default N)\n"
     << "  --d D            head dimension: 16, 32, 64 or 128\n"
     << "  --causal         causal mask, bottom-right aligned when NK != N (query i sees keys j <= i + NK - N)\n"
     << "  --hkv HKV        key/value heads (default H): H/HKV query heads share each (GQA; 1 is MQA)\n"
     << "  --window W       sliding window, with --causal: query i sees keys i + NK - N - W < j <= i + NK - N\n"
     << (step.fp8 ? "  --dtype T        e4m3 (the only one): Q, K, V quantized to FP8 by the step, O in bf16\n"
                  : "  --dtype T        storage type of Q, K, V, P, O: fp16 (default) or bf16\n");
  if (step.fp8)
    os << "  --fp8-scales S   tensor (default: one scale per batch and head) or block (one per 128 rows)\n"
       << "  --incoherent     Q and K through one random Hadamard transform before they are quantized\n";
  if (step.supports_decode)
    os << "decoding (defaults: GPU B=4 H=32 HKV=8 QLEN=1 NK=16384 d=128; CPU B=2 H=4 HKV=2 QLEN=1 NK=300 d=64):\n"
       << "  --qlen Q         new tokens per sequence (--n; 1 to " << step.max_n << ", > 1: speculative decoding, causal\n"
       << "                   among them); they are appended to the cache and attend to it\n"
       << "  --nk NK          the cache's capacity per sequence (tokens)\n"
       << "  --cache-lens L   tokens already cached: one length for every sequence, or L0,L1,... one per\n"
       << "                   sequence (default: full, NK - QLEN); each plus QLEN must fit NK\n"
       << "  --ragged         lengths drawn from --seed between 0 and NK - QLEN instead\n";
  os
     << "  --scale X        softmax scale (default 1/sqrt(d))\n"
     << "  --dropout P      drop each attention weight with probability P, scale the kept ones by\n"
     << "                   1/(1-P) (default 0: none; " << kDropoutSteps << " only)\n"
     << "run:\n"
     << "  --backend B      auto (default: GPU if present), gpu, or cpu (the blueprint)\n"
     << "  --seed S         input seed (default 42); inputs are 0.5 + randn, rounded to the storage type\n"
     << "  --inputs I       default (0.5 + randn), normal (randn) or outliers (randn, 0.1 % of entries times 10)\n"
     << "  --dropout-seed S seed of the dropout mask (Philox; default: the --seed value)\n"
     << "  --reps R         timed repetitions on the GPU, median reported (default 20; 0 = check only)\n"
     << "  --warmup W       untimed launches before timing (default 3)\n"
     << "  --runs K         K timed runs (warm-up and R launches each): the median of their medians is\n"
     << "                   reported, with their min and max (default 1)\n"
     << "  --graph K        also time K calls captured back to back in one CUDA graph, per call (GPU only;\n"
     << "                   default " << kGraphCalls << "): the launch's host cost gone (docs/profiling.md, 'One clock')\n"
     << "  --check-heads K  check the backward on K heads, the first and the last ones (default: every head\n"
     << "                   of a small problem, else the first and the last); 1 halves a long run's CPU time\n"
     << "output:\n"
     << "  --csv            print a CSV header and one row instead of the report\n"
     << "  --save DIR       write q.npy k.npy v.npy o.npy lse.npy ([B,H,N,d]; lse float32 [B,H,N];\n"
     << "                   fp16 tensors as float16, bf16 tensors as float32 since NumPy has no bf16)\n"
     << "  --ledger-csv F   write the ledger kernel by kernel to F (CSV), e.g. to set beside Nsight Compute\n"
     << "  --help           this text\n"
     << "grade (a lab's checks, docs/labs/):\n"
     << "  --grade          run every check, one line each (PASS/FAIL, the numbers, what to look at):\n"
     << "                   cpu: the blueprint over the shape matrix against Eigen, and its counted\n"
     << "                   ledger against closed_form(); gpu: the kernels over the same matrix inside\n"
     << "                   NaN-padded buffers. Each case runs in a child process with a time limit.\n"
     << "                   Exit status: 0 every check passed, 1 one failed, 2 bad flags.\n"
     << "  --track T        cpu, gpu or both (default: both with a GPU, else cpu)\n"
     << "  --json           the report as one JSON object (for an autograder)\n"
     << "  --fails-only     print only the checks that did not pass (the verdict and the advice as always)\n"
     << "  --min-speedup X  also time the step against the previous step at one shape (the shape flags,\n"
     << "                   default the GPU one) and require X times its speed (GPU; default off)\n"
     << "  --timeout S      seconds per case before it counts as hung (default 60 on the CPU, 30 on the GPU)\n";
  if (!step.flags.empty()) {
    os << "step " << step.id << " flags:\n";
    for (const auto& f : step.flags) {
      std::string choices;
      for (const auto& c : f.choices) choices += (choices.empty() ? "" : "|") + c;
      if (is_switch(f)) choices = "[" + choices + "]";  // bare means on
      os << "  --" << f.name << " " << choices << "  " << f.help << " (default " << f.choices.front() << ")\n";
    }
  }
  return os.str();
}

CliOptions parse_cli(const StepInfo& step, const std::vector<std::string>& args) {
  CliOptions o;
  o.step = step.default_options();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    bool has_inline = false;
    if (a.rfind("--", 0) != 0) throw CliError("unexpected argument '" + a + "' (flags start with --; see --help)");
    if (auto eq = a.find('='); eq != std::string::npos) { value = a.substr(eq + 1); a = a.substr(0, eq); has_inline = true; }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= args.size()) throw CliError(a + " needs a value");
      return args[++i];
    };
    constexpr int64_t kBig = int64_t(1) << 30;
    if (a == "--help" || a == "-h") o.help = true;
    else if (a == "--b") { o.shape.B = parse_int(a, next(), 1, kBig); o.b_given = true; }
    else if (a == "--h") { o.shape.H = parse_int(a, next(), 1, kBig); o.h_given = true; }
    else if (a == "--n") { o.shape.N = parse_int(a, next(), 1, kBig); o.n_given = true; }
    else if (a == "--nk") { o.shape.Nk = parse_int(a, next(), 1, kBig); o.nk_given = true; }
    else if (a == "--d") { o.shape.d = parse_int(a, next(), 1, 1024); o.d_given = true; }
    else if (a == "--qlen") {
      if (!step.supports_decode) throw CliError("--qlen: " + step.program() + " is not a decoding step (use --n)");
      o.shape.N = parse_int(a, next(), 1, kBig);
      o.n_given = true;
    }
    else if (a == "--cache-lens") {
      if (!step.supports_decode) throw CliError("--cache-lens: " + step.program() + " has no key/value cache (step 17 has)");
      const std::string v = next();
      o.cache_lens_arg.clear();
      size_t at = 0;
      while (true) {
        const size_t comma = v.find(',', at);
        o.cache_lens_arg.push_back(parse_int(a, v.substr(at, comma == std::string::npos ? std::string::npos : comma - at), 0, kBig));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
    else if (a == "--ragged") {
      if (!step.supports_decode) throw CliError("--ragged: " + step.program() + " has no key/value cache (step 17 has)");
      o.ragged = true;
    }
    else if (a == "--hkv") { o.shape.Hkv = parse_int(a, next(), 1, kBig); o.hkv_given = true; }
    else if (a == "--window") o.shape.window = parse_int(a, next(), 1, kBig);
    else if (a == "--causal") {
      if (has_inline) o.shape.causal = parse_int(a, value, 0, 1) == 1;
      else o.shape.causal = true;
    }
    else if (a == "--dtype") {
      const std::string v = next();
      if (v == "fp8") throw CliError("--dtype fp8: name the format, e4m3 (step 21's; e5m2 is not offered)");
      if (!set_type(o.shape, v)) throw CliError("--dtype must be fp16, bf16 or e4m3 (got '" + v + "')");
      o.dtype_given = true;
    }
    else if (a == "--scale") {
      o.shape.scale = parse_double(a, next());
      if (!(o.shape.scale > 0.0)) throw CliError("--scale must be a positive number");
    }
    else if (a == "--fp8-scales") {
      const std::string v = next();
      if (v != "tensor" && v != "block") throw CliError("--fp8-scales must be tensor or block (got '" + v + "')");
      o.shape.fp8_block = v == "block";
      o.fp8_flags_given = true;
    }
    else if (a == "--incoherent") {
      o.shape.incoherent = has_inline ? parse_int(a, value, 0, 1) == 1 : true;
      o.fp8_flags_given = true;
    }
    else if (a == "--dropout") {
      const std::string v = next();
      o.shape.dropout = parse_double(a, v);
      if (!(o.shape.dropout >= 0.0 && float(o.shape.dropout) < 1.0f))  // float: what the kernels get
        throw CliError("--dropout must be a probability in [0, 1) (got " + v + ")");
      o.dropout_given = true;
    }
    else if (a == "--dropout-seed") {
      o.shape.dropout_seed = static_cast<uint64_t>(parse_int(a, next(), 0, INT64_MAX));
      o.dropout_seed_given = true;
    }
    else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(a, next(), 0, INT64_MAX));
    else if (a == "--inputs") {
      o.inputs = next();
      InputSpec probe;
      if (!set_inputs(probe, o.inputs)) throw CliError("--inputs must be default, normal or outliers (got '" + o.inputs + "')");
    }
    else if (a == "--reps") o.reps = static_cast<int>(parse_int(a, next(), 0, 100000));
    else if (a == "--warmup") o.warmup = static_cast<int>(parse_int(a, next(), 0, 1000));
    else if (a == "--runs") o.runs = static_cast<int>(parse_int(a, next(), 1, 100));
    else if (a == "--graph") {
      o.graph_calls = static_cast<int>(parse_int(a, next(), 1, 10000));
      o.graph_given = true;
    }
    else if (a == "--check-heads") o.check_heads = parse_int(a, next(), 1, int64_t(1) << 30);
    else if (a == "--csv") o.csv = true;
    else if (a == "--save") { o.save_dir = next(); if (o.save_dir.empty()) throw CliError("--save needs a directory"); }
    else if (a == "--ledger-csv") { o.ledger_csv = next(); if (o.ledger_csv.empty()) throw CliError("--ledger-csv needs a file name"); }
    else if (a == "--grade") o.grade = true;
    else if (a == "--json") o.grade_json = true;
    else if (a == "--fails-only") o.grade_fails_only = true;
    else if (a == "--track") {
      const std::string v = next();
      if (v != "cpu" && v != "gpu" && v != "both") throw CliError("--track must be cpu, gpu or both (got '" + v + "')");
      o.grade_track = v;
    }
    else if (a == "--min-speedup") {
      o.min_speedup = parse_double(a, next());
      if (!(o.min_speedup > 0.0) || o.min_speedup > 1e6) throw CliError("--min-speedup must be a positive number");
    }
    else if (a == "--timeout") o.grade_timeout = double(parse_int(a, next(), 1, 86400));
    else if (a == "--grade-case") o.grade_case = parse_int(a, next(), 0, kBig);
    else if (a == "--backend") {
      o.backend_given = true;
      const std::string v = next();
      if (v == "auto") o.backend = Backend::Auto;
      else if (v == "gpu") o.backend = Backend::Gpu;
      else if (v == "cpu") o.backend = Backend::Cpu;
      else throw CliError("--backend must be auto, gpu or cpu (got '" + v + "')");
    }
    else {
      bool found = false;
      for (const auto& f : step.flags) {
        if (a != "--" + f.name) continue;
        // A switch given bare (nothing follows, or the next flag does) means on.
        const bool bare = is_switch(f) && !has_inline && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0);
        const std::string v = bare ? "on" : next();
        bool ok = false;
        for (const auto& c : f.choices) ok = ok || c == v;
        if (!ok) {
          std::string choices;
          for (const auto& c : f.choices) choices += (choices.empty() ? "" : ", ") + c;
          throw CliError(a + " must be one of " + choices + " (got '" + v + "')");
        }
        o.step[f.name] = v;
        o.step_flags_given.push_back(f.name);
        if (!f.sweep && v == f.choices.front()) o.step.erase(f.name);  // the default of an experiment: no variant
        found = true;
      }
      if (!found) throw CliError("unknown flag " + a + " (see --help)");
    }
  }
  o.decode = step.supports_decode;
  if (o.ragged && !o.cache_lens_arg.empty()) throw CliError("--ragged draws the cache lengths: it cannot go with --cache-lens");
  if (step.max_n > 0 && o.n_given && o.shape.N > step.max_n)
    throw CliError((step.supports_decode ? "--qlen" : "--n") + std::string(" must be at most ") + std::to_string(step.max_n) +
                   " for " + step.program() + " (got " + std::to_string(o.shape.N) + ")");
  o.shape_given = o.b_given || o.h_given || o.n_given || o.nk_given || o.d_given;
  if (!o.nk_given) o.shape.Nk = o.shape.N;
  if (!o.dropout_seed_given) o.shape.dropout_seed = o.seed;
  o.shape.dropout_offset = 0;
  if (!o.help) {
    if (o.dropout_seed_given && !o.dropout_given) throw CliError("--dropout-seed goes with --dropout");
    if (o.shape.dropout > 0.0 && !step.supports_dropout)
      throw CliError("--dropout: " + step.program() + " does not apply dropout (" + kDropoutSteps + " do)");
    if (o.shape.Hkv > 0 && o.shape.Hkv != o.shape.H && !step.supports_gqa)
      throw CliError("--hkv: " + step.program() + " gives every query head its own keys and values (--hkv must equal --h)");
    if (o.shape.window > 0 && !step.supports_window)
      throw CliError("--window: " + step.program() + " has no sliding window");
  }
  // [fp8] An FP8 step runs e4m3 alone (its default); every other step refuses it.
  if (step.fp8 && !o.shape.fp8) {
    if (o.dtype_given && !o.help)
      throw CliError("--dtype " + std::string(o.shape.type_name()) + ": " + step.program() +
                     " runs FP8 only (--dtype e4m3, its default; step 16 runs fp16 and bf16)");
    set_type(o.shape, "e4m3");
  }
  if (!step.fp8 && o.shape.fp8 && !o.help)
    throw CliError("--dtype e4m3: " + step.program() + " has no FP8 path (" + kFp8Steps + " runs it)");
  if (o.fp8_flags_given && !o.shape.fp8 && !o.help)
    throw CliError("--fp8-scales and --incoherent: " + step.program() + " has no FP8 path (" + kFp8Steps + " runs it)");
  // --grade's own flags need it, and it picks backends and prints its own report.
  if (!o.grade && o.grade_case < 0) {
    for (const auto& [given, flag] : {std::pair{o.grade_json, "--json"}, {!o.grade_track.empty(), "--track"},
                                      {o.min_speedup > 0, "--min-speedup"}, {o.grade_timeout > 0, "--timeout"},
                                      {o.grade_fails_only, "--fails-only"}})
      if (given) throw CliError(std::string(flag) + " goes with --grade");
  } else if (!o.help) {
    for (const auto& [given, flag] : {std::pair{o.backend_given, "--backend (use --track cpu|gpu)"},
                                      {o.csv, "--csv (use --json)"}, {!o.save_dir.empty(), "--save"},
                                      {!o.ledger_csv.empty(), "--ledger-csv"},
                                      {o.dropout_given, "--dropout (the shape matrix has none)"}})
      if (given) throw CliError(std::string("--grade cannot go with ") + flag);
  }
  return o;
}

void apply_default_shape(CliOptions& o, bool on_gpu) {
  Shape& s = o.shape;
  if (o.decode) {
    // [cache-lens] Decoding's defaults: one new token per sequence, a GQA model's heads (32 query
    // heads over 8 key/value heads), a long cache on the GPU; every cache full (NK − N tokens)
    // unless --cache-lens or --ragged says otherwise.
    if (!o.b_given) s.B = on_gpu ? 4 : 2;
    if (!o.h_given) s.H = on_gpu ? 32 : 4;
    if (!o.hkv_given && !o.h_given) s.Hkv = on_gpu ? 8 : 2;
    if (!o.n_given) s.N = 1;
    if (!o.nk_given) s.Nk = on_gpu ? 16384 : 300;
    if (!o.d_given) s.d = on_gpu ? 128 : 64;
    if (o.ragged) {
      Rng rng(o.seed ^ 0x7a66edull);
      s.cache_lens.assign(size_t(s.B), 0);
      for (auto& len : s.cache_lens) len = s.Nk > s.N ? int64_t(rng.below(uint64_t(s.Nk - s.N + 1))) : 0;
    } else if (o.cache_lens_arg.size() == 1) {
      s.cache_lens.assign(size_t(s.B), o.cache_lens_arg[0]);
    } else if (!o.cache_lens_arg.empty()) {
      s.cache_lens = o.cache_lens_arg;
    } else {
      s.cache_lens.assign(size_t(s.B), std::max<int64_t>(0, s.Nk - s.N));
    }
    const std::string err = validate(s);
    if (!err.empty()) throw CliError(err);
    return;
  }
  if (!o.b_given) s.B = on_gpu ? 4 : 1;
  if (!o.h_given) s.H = on_gpu ? 16 : 2;
  if (!o.n_given) s.N = on_gpu ? 4096 : 256;
  if (!o.nk_given) s.Nk = s.N;
  if (!o.d_given) s.d = on_gpu ? 128 : 64;
  const std::string err = validate(s);
  if (!err.empty()) throw CliError(err);
}

}  // namespace fa
