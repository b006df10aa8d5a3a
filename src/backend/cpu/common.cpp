#include "backend/cpu/common.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "backend/cpu/layouts.h"
#include "bench/machine_profile.h"
#include "core/error.h"
#include "hw/cpu_info.h"

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl_debug.h>

namespace dlperf::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

bool has_bf16_kernels() {
  // oneDNN's ISA values are nested bit sets: each contains the bits of those it extends.
  const auto isa = unsigned(dnnl::get_effective_cpu_isa()), bf16 = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

bool has_amx_kernels() {
  const auto isa = unsigned(dnnl::get_effective_cpu_isa()), amx = unsigned(dnnl::cpu_isa::avx512_core_amx);
  return (isa & amx) == amx;
}

bool on_amx(const dnnl::primitive_desc_base& pd) { return std::strstr(pd.impl_info_str(), "amx") != nullptr; }

memory::dims to_dnnl(const Dims& d) { return memory::dims(d.begin(), d.end()); }

md plain_md(const Dims& d) {
  static const tag tags[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd};
  check(d.size() >= 1 && d.size() <= 4, "plain_md: rank must be 1..4, got " + dims_str(d));
  return md(to_dnnl(d), dt::f32, tags[d.size()]);
}

md any_md(const Dims& d) { return md(to_dnnl(d), dt::f32, tag::any); }

Compute compute_for(const std::string& precision) {
  if (precision == "fp32") return Compute::fp32;
  if (precision == "bf16") return Compute::bf16;
  check(precision == "f32-copies", fmt::format("the CPU engine computes in fp32 or bf16, not {}", precision));
  return Compute::f32_copies;
}

md with_type(const md& m, dt type) {
  dnnl_memory_desc_t d = m.data;
  d.data_type = memory::convert_to_c(type);
  return md(d);
}

Mem::Mem(const md& desc, MemCategory category)
    : buffer(make_buffer(std::max<size_t>(desc.get_size(), 1), category)), mem_desc_(desc) {
  mem = memory(desc, engine(), buffer->data());
}

memory Mem::view(const md& other) const {
  check(other.get_size() == mem_desc_.get_size(), "Mem::view: sizes differ");
  return memory(other, engine(), buffer->data());
}

Mem Mem::alias(const md& other) const {
  Mem m;
  m.mem = view(other);
  m.buffer = buffer;
  m.mem_desc_ = other;
  return m;
}

void Mem::zero() { std::memset(buffer->data(), 0, mem_desc_.get_size()); }

void check_indexable(const nn::Node& n) { nn::check_indexable(n, "the CPU engine (oneDNN)"); }

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

namespace {
// One scratchpad shared by all primitives: execution is sequential on one stream.
struct Scratchpad {
  BufferPtr buffer;
  std::byte* reserve(size_t bytes) {
    if (!buffer || buffer->bytes() < bytes) {
      buffer.reset();  // the smaller one goes first: held while the larger one is taken, both would count in the peak
      buffer = make_buffer(bytes, MemCategory::workspace);
    }
    return static_cast<std::byte*>(buffer->data());
  }
  memory get(const md& want, size_t offset) {
    if (want.get_size() == 0) return memory(want, engine(), nullptr);
    return memory(want, engine(), reserve(offset + want.get_size()) + offset);
  }
};
Scratchpad& scratchpad() {
  // The allocator is constructed first, once: statics are destroyed in reverse order, so the
  // scratchpad gives its block back before the allocator it came from is gone.
  static Scratchpad s = [] {
    HostAllocator::instance();
    return Scratchpad{};
  }();
  return s;
}
}  // namespace

void release_scratchpad() { scratchpad().buffer.reset(); }

std::byte* shared_scratch(size_t bytes) { return scratchpad().reserve(bytes); }

void run(const Prim& p, std::unordered_map<int, memory> args, size_t scratch_offset) {
  const auto scope = profile::Scope::launch(p.phase);
  args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad().get(p.scratch, scratch_offset));
  try {
    p.prim.execute(stream(), args);
  } catch (const dnnl::error& e) {
    const auto kind = dnnl::convert_to_c(p.prim.get_kind());
    throw Error(fmt::format("oneDNN could not run a {} primitive: {} (status {})",
                            dnnl_prim_kind2str(kind), e.what(), int(e.status)),
                "run with ONEDNN_VERBOSE=1 to see its shapes and layouts");
  }
  stream().wait();
}

void reorder(const memory& src, const memory& dst) {
  const auto scope = profile::Scope::launch(profile::Phase::copy);
  dnnl::reorder(src, dst).execute(stream(), const_cast<memory&>(src), const_cast<memory&>(dst));
  stream().wait();
}

std::vector<float> to_plain(const md& layout, const Dims& dims, const Mem& m) {
  std::vector<float> out(size_t(numel(dims)));
  memory dst(plain_md(dims), engine(), out.data());
  reorder(m.view(layout), dst);
  return out;
}

void from_plain(const md& layout, const Dims& dims, const float* plain, Mem& m) {
  m.zero();  // padding of blocked layouts must stay zero
  memory src(plain_md(dims), engine(), const_cast<float*>(plain));
  reorder(src, m.view(layout));
}

Param& Op::add_param(std::string name, Dims dims, const md& layout, Init init, int64_t fan_in) {
  auto p = std::make_unique<Param>();
  p->name = std::move(name);
  p->dims = std::move(dims);
  p->layout = layout;
  p->value = Mem(layout, MemCategory::parameters);
  p->grad = Mem(layout, MemCategory::gradients);
  p->value.zero();
  p->grad.zero();
  p->init = init;
  p->fan_in = fan_in;
  params_.push_back(std::move(p));
  return *params_.back();
}

namespace {
// How many times the scheduler has taken the CPU from each OpenMP thread while it could run
// (involuntary context switches: another process's time slice), read by each thread itself.
// Not its CPU time: a thread waiting for work may sleep (OMP_WAIT_POLICY=passive), which is no
// disturbance, and a process's CPU clock adds the other threads' time only at their ticks.
std::vector<long> threads_preempted(int threads) {
  std::vector<long> n(size_t(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    n[size_t(omp_get_thread_num())] = u.ru_nivcsw;
  }
  return n;
}
}  // namespace

const bench::Ceilings& kept_kernel_timings() {
  static const bench::Ceilings kept = bench::load_ceilings(hw::cpu_info().model, omp_get_max_threads());
  return kept;
}

std::optional<std::vector<double>> best_undisturbed_times(const std::vector<std::function<void()>>& passes, int need, int most,
                                                          int* disturbed) {
  const int threads = omp_get_max_threads();
  std::vector<double> best(passes.size(), std::numeric_limits<double>::infinity());
  std::vector<int> clean(passes.size(), 0);
  int left_out = 0;
  for (const auto& pass : passes) pass();  // warm-up: first-touch pages, oneDNN's kernels built
  for (int round = 0; round < most; ++round) {
    for (size_t i = 0; i < passes.size(); ++i) {
      const std::vector<long> before = threads_preempted(threads);
      const auto t0 = std::chrono::steady_clock::now();
      passes[i]();
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (threads_preempted(threads) == before) {
        best[i] = std::min(best[i], wall);
        ++clean[i];
      } else {
        ++left_out;
      }
    }
    if (*std::min_element(clean.begin(), clean.end()) >= need) break;
  }
  if (disturbed) *disturbed = left_out;
  if (*std::min_element(clean.begin(), clean.end()) < need) return std::nullopt;
  return best;
}

}  // namespace dlperf::cpu
