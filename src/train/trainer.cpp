#include "train/trainer.h"

#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "backend/cpu/network.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "report/table.h"
#include "train/checkpoint.h"

namespace dlperf::train {

namespace fs = std::filesystem;
using nlohmann::json;

json to_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"data", c.data},
          {"device", c.device},
          {"epochs", c.epochs},
          {"batch_size", c.batch},
          {"lr", c.lr},
          {"optimizer", c.optimizer.name},
          {"momentum", c.optimizer.momentum},
          {"nesterov", c.optimizer.nesterov},
          {"weight_decay", c.optimizer.weight_decay},
          {"schedule", c.schedule.name},
          {"label_smoothing", c.label_smoothing},
          {"augment", c.augment},
          {"workers", c.workers},
          {"threads", c.threads},
          {"seed", c.seed},
          {"train_limit", c.train_limit},
          {"test_limit", c.test_limit}};
}

json to_json(const EpochStats& e) {
  json by_cat = json::object();
  for (int i = 0; i < kMemCategories && i < int(e.peak_by_category.size()); ++i)
    by_cat[std::string(to_string(MemCategory(i)))] = e.peak_by_category[size_t(i)];
  return {{"epoch", e.epoch},         {"train_s", e.train_s},       {"eval_s", e.eval_s},
          {"images_per_s", e.images_per_s}, {"data_wait_s", e.data_wait_s}, {"compute_s", e.compute_s},
          {"train_loss", e.train_loss}, {"train_acc", e.train_acc},   {"test_loss", e.test_loss},
          {"test_acc", e.test_acc},   {"lr", e.lr},                 {"peak_bytes", e.peak_bytes},
          {"peak_bytes_by_category", by_cat}};
}

EpochStats epoch_from_json(const json& j) {
  EpochStats e;
  e.epoch = j.at("epoch");
  e.train_s = j.at("train_s");
  e.eval_s = j.at("eval_s");
  e.images_per_s = j.at("images_per_s");
  e.data_wait_s = j.at("data_wait_s");
  e.compute_s = j.at("compute_s");
  e.train_loss = j.at("train_loss");
  e.train_acc = j.at("train_acc");
  e.test_loss = j.at("test_loss");
  e.test_acc = j.at("test_acc");
  e.lr = j.at("lr");
  e.peak_bytes = j.at("peak_bytes");
  for (int i = 0; i < kMemCategories; ++i)
    e.peak_by_category.push_back(j.at("peak_bytes_by_category").value(std::string(to_string(MemCategory(i))), 0.0));
  return e;
}

namespace {

// A one-line progress bar on stderr, redrawn at most 5 times a second.
class Progress {
 public:
  Progress(bool on, int64_t epoch, int64_t epochs, int64_t total)
      : on_(on), epoch_(epoch), epochs_(epochs), total_(total), start_(now_s()) {}
  void update(int64_t done, int64_t images, double loss) {
    if (!on_) return;
    const double t = now_s();
    if (t - last_ < 0.2 && done < total_) return;
    last_ = t;
    const int width = 30, filled = int(width * done / std::max<int64_t>(total_, 1));
    const double rate = double(images) / std::max(t - start_, 1e-9);
    const double eta = done > 0 ? (t - start_) * double(total_ - done) / double(done) : 0;
    std::fprintf(stderr, "\r  epoch %lld/%lld [%s%s] %3d%%  %6.0f img/s  loss %.4f  eta %3.0fs ",
                 (long long)epoch_, (long long)epochs_, std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), int(100 * done / std::max<int64_t>(total_, 1)),
                 rate, loss, eta);
    std::fflush(stderr);
  }
  void clear() {
    if (on_) std::fprintf(stderr, "\r%80s\r", "");
  }

 private:
  bool on_;
  int64_t epoch_, epochs_, total_;
  double start_, last_ = 0;
};

struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(cpu::Network& net, data::Loader& loader, int64_t size) {
  loader.start_epoch(0);
  double loss = 0;
  int64_t correct = 0;
  while (const data::Batch* b = loader.next()) {
    std::memcpy(net.input(), b->data(), b->images->bytes());
    net.forward(false);
    auto r = net.loss(b->labels.data(), b->valid, 0.0, false);
    loss += r.loss * double(b->valid);
    correct += r.correct;
  }
  return {loss / double(size), double(correct) / double(size)};
}

std::vector<std::pair<std::string, std::vector<float>>> snapshot(cpu::Network& net, nn::Optimizer* opt) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  auto params = net.params();
  for (cpu::Param* p : params) out.emplace_back(p->name, cpu::to_plain(p->layout, p->dims, p->value));
  for (auto& [name, m] : net.buffers()) out.emplace_back(name, std::vector<float>(m->f32(), m->f32() + cpu::floats_in(m->desc())));
  if (opt)
    for (auto& s : opt->state()) {
      cpu::Param* p = params[s.param];
      cpu::Mem view(p->layout, MemCategory::workspace);
      std::memcpy(view.f32(), s.data, p->layout.get_size());
      out.emplace_back(p->name + s.suffix, cpu::to_plain(p->layout, p->dims, view));
    }
  return out;
}

void restore(cpu::Network& net, nn::Optimizer& opt, const Checkpoint& ck) {
  auto get = [&](const std::string& name, size_t count) -> const std::vector<float>& {
    auto it = ck.tensors.find(name);
    check(it != ck.tensors.end(), fmt::format("the checkpoint has no tensor '{}'", name),
          "it was written for another model; use the same --model, or another --checkpoint");
    check(it->second.size() == count, fmt::format("checkpoint tensor '{}' has {} values, the model needs {}", name, it->second.size(), count),
          "it was written for another model or input shape");
    return it->second;
  };
  auto params = net.params();
  for (cpu::Param* p : params)
    cpu::from_plain(p->layout, p->dims, get(p->name, size_t(numel(p->dims))).data(), p->value);
  for (auto& [name, m] : net.buffers()) {
    const auto& v = get(name, cpu::floats_in(m->desc()));
    std::memcpy(m->f32(), v.data(), v.size() * 4);
  }
  for (auto& s : opt.state()) {
    cpu::Param* p = params[s.param];
    cpu::Mem tmp(p->layout, MemCategory::workspace);
    cpu::from_plain(p->layout, p->dims, get(p->name + s.suffix, size_t(numel(p->dims))).data(), tmp);
    std::memcpy(s.data, tmp.f32(), p->layout.get_size());
  }
}

std::string timestamp() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

void print_layer_times(const cpu::Network& net, int64_t steps, const hw::CpuInfo& cpu, json& record) {
  report::Table t({"layer", "op", "fwd ms", "bwd ms", "fwd GFLOP/s", "bwd GFLOP/s", "% of peak"});
  const double peak = cpu.peak_gflops();
  json rows = json::array();
  const auto& g = net.graph();
  double best = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string name = net.step_name(int(i));
    if (name.empty()) continue;
    const auto& n = g.nodes[i];
    const auto& tm = net.node_times()[i];
    if (tm.forward_calls == 0) continue;
    const double fwd = tm.forward_s / double(tm.forward_calls), bwd = tm.backward_calls ? tm.backward_s / double(tm.backward_calls) : 0;
    const double ff = n.cost.forward.flops, bf = n.cost.total_backward().flops;
    const double fg = fwd > 0 ? ff / fwd / 1e9 : 0, bg = bwd > 0 ? bf / bwd / 1e9 : 0;
    const double all = (fwd + bwd) > 0 ? (ff + bf) / (fwd + bwd) / 1e9 : 0;
    t.add({name, std::string(ops::to_string(n.kind)), fmt::format("{:.3f}", fwd * 1e3), fmt::format("{:.3f}", bwd * 1e3),
           fmt::format("{:.1f}", fg), fmt::format("{:.1f}", bg), fmt::format("{:.1f}%", 100 * all / peak)});
    best = std::max(best, 100 * all / peak);
    rows.push_back({{"layer", name}, {"op", ops::to_string(n.kind)}, {"forward_s", fwd}, {"backward_s", bwd},
                    {"forward_flops", ff}, {"backward_flops", bf}, {"forward_gflops", fg}, {"backward_gflops", bg},
                    {"percent_of_peak", 100 * all / peak}});
  }
  std::printf("\nPer-layer time per training step (%lld steps timed), against the FMA peak of %.1f GFLOP/s\n"
              "(%d cores x %d FMA units x %d f32 lanes x 2 flops x %.2f GHz, the clock the OS reports):\n",
              (long long)steps, peak, cpu.cores, cpu.fma_units, cpu.lanes_f32, cpu.ghz);
  t.print();
  if (best > 100)
    std::printf("Above 100%%: the cores run faster than the %.2f GHz the OS reports (boost clocks), so that\n"
                "peak understates the real one; measured ceilings come with 'dlperf bench'.\n", cpu.ghz);
  record["layer_times"] = rows;
}

}  // namespace

TrainResult train(const TrainConfig& cfg) {
  check(cfg.device == "cpu" || cfg.device == "auto",
        fmt::format("--device {} is not available in this build", cfg.device),
        "this build trains on the CPU: use --device cpu (CUDA support comes with the CUDA backend)");
  check(cfg.epochs >= 1, "--epochs must be at least 1");
  check(cfg.batch >= 1 && cfg.batch <= 65536, "--batch-size must be between 1 and 65536");
  check(cfg.lr > 0 && std::isfinite(cfg.lr), "--lr must be a positive number");
  check(cfg.label_smoothing >= 0 && cfg.label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  check(cfg.threads >= 0 && cfg.threads <= 1024, "--threads must be between 0 and 1024");
  check(!cfg.resume || !cfg.checkpoint_dir.empty(), "--resume needs --checkpoint DIR", "name the directory the checkpoint is in");
  const bool say = !cfg.quiet;
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  const int threads = cfg.threads > 0 ? cfg.threads : omp_get_max_threads();

  // Data
  data::DataPair d = data::load_data(cfg.data);
  if (!d.notice.empty() && say) std::printf("note: %s\n", d.notice.c_str());
  d.train.truncate(cfg.train_limit);
  d.test.truncate(cfg.test_limit);
  std::vector<float> mean, stddev;
  data::channel_stats(d.train, mean, stddev);
  data::LoaderConfig lc;
  lc.batch = cfg.batch;
  lc.augment = cfg.augment;
  lc.workers = cfg.workers;
  lc.seed = cfg.seed;
  data::Loader train_loader(d.train, lc, mean, stddev);
  data::LoaderConfig ec = lc;
  ec.shuffle = ec.augment = ec.drop_last = false;
  data::Loader test_loader(d.test, ec, mean, stddev);

  // Model
  const nn::ModelSpec spec = nn::load_model(cfg.model);
  const nn::Graph graph = nn::build_graph(spec, {d.train.channels, d.train.height, d.train.width}, d.train.classes, cfg.batch);
  HostAllocator::instance().reset_peaks();
  cpu::Network net(graph, cfg.seed);
  std::vector<nn::ParamRef> refs;
  for (cpu::Param* p : net.params()) refs.push_back({p->value.f32(), p->grad.f32(), p->floats()});
  nn::Optimizer opt(cfg.optimizer, refs);

  const int64_t per_epoch = train_loader.batches_per_epoch();
  const int64_t total_steps = per_epoch * cfg.epochs;
  TrainResult result;
  int64_t start_epoch = 0;
  if (cfg.resume) {
    Checkpoint ck = load_checkpoint(cfg.checkpoint_dir);
    check(ck.meta.value("model", "") == graph.model && ck.meta.value("batch_size", int64_t(0)) == cfg.batch,
          fmt::format("the checkpoint in {} is for model {} at batch size {}, not {} at {}", cfg.checkpoint_dir,
                      ck.meta.value("model", "?"), ck.meta.value("batch_size", int64_t(0)), graph.model, cfg.batch),
          "resume with the same --model and --batch-size");
    restore(net, opt, ck);
    start_epoch = ck.meta.at("epoch_done");
    opt.set_steps_done(ck.meta.at("optimizer_steps"));
    for (const auto& e : ck.meta.at("history")) result.epochs.push_back(epoch_from_json(e));
    if (say) std::printf("resumed from %s after epoch %lld\n", checkpoint_path(cfg.checkpoint_dir).c_str(), (long long)start_epoch);
  }

  const hw::CpuInfo cpu = hw::cpu_info();
  if (say) {
    std::printf("dlperf train: model %s (%s parameters, %.2f MFLOP/image forward) on %s %s, %lld train / %lld test images\n",
                graph.model.c_str(), fmt::format("{:.3f}M", double(graph.param_count()) / 1e6).c_str(),
                graph.forward_flops() / double(cfg.batch) / 1e6, d.train.name.c_str(),
                dims_str({d.train.channels, d.train.height, d.train.width}).c_str(), (long long)d.train.size(),
                (long long)d.test.size());
    std::printf("device cpu (%s, %d threads, %s), batch %lld, %s lr %g %s, %d loader workers, seed %llu\n\n",
                cpu.model.c_str(), threads, cpu.isa.c_str(), (long long)cfg.batch, cfg.optimizer.name.c_str(), cfg.lr,
                cfg.schedule.name.c_str(), cfg.workers, (unsigned long long)cfg.seed);
  }
  report::Table epochs_table({"epoch", "time s", "img/s", "train loss", "train acc", "test acc", "peak mem", "data wait", "compute"});
  for (const auto& e : result.epochs)
    epochs_table.add({std::to_string(e.epoch), fmt::format("{:.2f}", e.train_s), fmt::format("{:.0f}", e.images_per_s),
                      fmt::format("{:.4f}", e.train_loss), fmt::format("{:.2f}%", 100 * e.train_acc),
                      fmt::format("{:.2f}%", 100 * e.test_acc), format_bytes(e.peak_bytes),
                      fmt::format("{:.1f}%", 100 * e.data_wait_s / e.train_s), fmt::format("{:.1f}%", 100 * e.compute_s / e.train_s)});
  if (say) {
    std::string head = epochs_table.str();
    std::fputs(head.c_str(), stdout);
    std::fflush(stdout);
  }
  size_t printed_rows = result.epochs.size();
  net.set_timing(cfg.layer_times);
  const bool bar = cfg.progress && say && isatty(STDERR_FILENO);

  for (int64_t epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    if (cfg.stop_after_epochs > 0 && epoch >= cfg.stop_after_epochs) break;
    HostAllocator::instance().reset_peaks();
    EpochStats st;
    st.epoch = epoch + 1;
    Progress progress(bar, epoch + 1, cfg.epochs, per_epoch);
    train_loader.start_epoch(epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    const double t_start = now_s();
    for (int64_t i = 0;; ++i) {
      const double t0 = now_s();
      const data::Batch* b = train_loader.next();
      const double t1 = now_s();
      if (!b) break;
      st.data_wait_s += t1 - t0;
      const int64_t step = opt.steps_done();
      std::memcpy(net.input(), b->data(), b->images->bytes());
      cpu::set_dropout_step(uint64_t(step));
      net.forward(true);
      const cpu::LossResult r = net.loss(b->labels.data(), b->valid, cfg.label_smoothing, true);
      if (!std::isfinite(r.loss))
        throw Error(fmt::format("training diverged: the loss is {} at epoch {}, step {}", r.loss, epoch + 1, i + 1),
                    fmt::format("lower --lr (now {}){}", cfg.lr,
                                cfg.checkpoint_dir.empty() ? "" : "; the last good checkpoint is in " + cfg.checkpoint_dir));
      net.backward();
      st.lr = nn::learning_rate(cfg.schedule, cfg.lr, step, total_steps, per_epoch);
      opt.step(st.lr);
      st.compute_s += now_s() - t1;
      loss_sum += r.loss * double(b->valid);
      correct += r.correct;
      seen += b->valid;
      progress.update(i + 1, seen, loss_sum / double(seen));
    }
    st.train_s = now_s() - t_start;
    progress.clear();
    st.images_per_s = double(seen) / st.train_s;
    st.train_loss = loss_sum / double(seen);
    st.train_acc = double(correct) / double(seen);
    const double e0 = now_s();
    net.set_timing(false);  // layer times are of training steps only
    const EvalResult ev = evaluate(net, test_loader, d.test.size());
    net.set_timing(cfg.layer_times);
    st.eval_s = now_s() - e0;
    st.test_loss = ev.loss;
    st.test_acc = ev.acc;
    const MemoryStats ms = HostAllocator::instance().stats();
    st.peak_bytes = double(ms.peak_total);
    for (size_t c = 0; c < ms.peak.size(); ++c) st.peak_by_category.push_back(double(ms.peak[c]));
    result.epochs.push_back(st);
    epochs_table.add({std::to_string(st.epoch), fmt::format("{:.2f}", st.train_s), fmt::format("{:.0f}", st.images_per_s),
                      fmt::format("{:.4f}", st.train_loss), fmt::format("{:.2f}%", 100 * st.train_acc),
                      fmt::format("{:.2f}%", 100 * st.test_acc), format_bytes(st.peak_bytes),
                      fmt::format("{:.1f}%", 100 * st.data_wait_s / st.train_s), fmt::format("{:.1f}%", 100 * st.compute_s / st.train_s)});
    if (say) {  // print the new row only (the table's column widths are fixed by its header)
      std::string all = epochs_table.str();
      size_t pos = 0;
      for (size_t k = 0; k < 2 + printed_rows; ++k) pos = all.find('\n', pos) + 1;
      std::fputs(all.c_str() + pos, stdout);
      std::fflush(stdout);
      printed_rows++;
    }
    if (!cfg.checkpoint_dir.empty()) {
      Checkpoint ck;
      ck.meta = {{"model", graph.model}, {"batch_size", cfg.batch}, {"input", graph.input}, {"epoch_done", epoch + 1},
                 {"optimizer_steps", opt.steps_done()}, {"config", to_json(cfg)}, {"history", json::array()}};
      for (const auto& e : result.epochs) ck.meta["history"].push_back(to_json(e));
      for (auto& [name, v] : snapshot(net, &opt)) ck.tensors[name] = std::move(v);
      save_checkpoint(cfg.checkpoint_dir, ck);
    }
  }

  // Summary and run record
  json record;
  record["dlperf_version"] = DLPERF_VERSION;
  record["command"] = "train";
  record["config"] = to_json(cfg);
  record["config"]["threads_used"] = threads;
  record["machine"] = hw::machine_json();
  record["model"] = {{"name", graph.model}, {"parameters", graph.param_count()},
                     {"forward_flops_per_image", graph.forward_flops() / double(cfg.batch)},
                     {"backward_flops_per_image", graph.backward_flops() / double(cfg.batch)},
                     {"activation_bytes_per_image", graph.activation_bytes() / double(cfg.batch)}};
  record["data"] = {{"name", d.train.name}, {"source", d.source}, {"train_images", d.train.size()},
                    {"test_images", d.test.size()}, {"shape", {d.train.channels, d.train.height, d.train.width}},
                    {"classes", d.train.classes}};
  record["epochs"] = json::array();
  double total_train = 0, peak = 0, wait = 0;
  for (const auto& e : result.epochs) {
    record["epochs"].push_back(to_json(e));
    total_train += e.train_s;
    wait += e.data_wait_s;
    peak = std::max(peak, e.peak_bytes);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  if (!result.epochs.empty()) {
    const EpochStats& last = result.epochs.back();
    record["summary"] = {{"epochs_run", result.epochs.size()}, {"train_s", total_train},
                         {"images_per_s", double(d.train.size() / cfg.batch * cfg.batch) * double(result.epochs.size()) / total_train},
                         {"final_test_acc", last.test_acc}, {"final_train_loss", last.train_loss},
                         {"peak_bytes", peak}, {"max_rss_bytes", double(ru.ru_maxrss) * 1024.0},
                         {"data_wait_share", wait / total_train}};
    if (say)
      std::printf("\ndone: %zu epochs in %.1f s of training (%.0f img/s), final test accuracy %.2f%%, peak tracked memory %s (process RSS %s)\n",
                  result.epochs.size(), total_train, record["summary"]["images_per_s"].get<double>(), 100 * last.test_acc,
                  format_bytes(peak).c_str(), format_bytes(double(ru.ru_maxrss) * 1024.0).c_str());
  }
  if (cfg.layer_times) {
    const auto& t = net.node_times();
    int64_t steps = 0;
    for (const auto& x : t) steps = std::max(steps, x.backward_calls);
    if (say) print_layer_times(net, steps, cpu, record);
  }
  if (!cfg.runs_dir.empty()) {
    std::error_code ec;
    fs::create_directories(cfg.runs_dir, ec);
    result.record_path = (fs::path(cfg.runs_dir) / fmt::format("{}-train-{}-{}-b{}.json", timestamp(), graph.model, d.train.name, cfg.batch)).string();
    std::ofstream out(result.record_path);
    if (out) out << record.dump(2) << "\n";
    if (!out && say) std::printf("warning: could not write the run record %s\n", result.record_path.c_str());
    else if (say) std::printf("run record: %s\n", result.record_path.c_str());
  }
  result.record = std::move(record);
  for (auto& [name, v] : snapshot(net, nullptr)) result.weights.insert(result.weights.end(), v.begin(), v.end());
  return result;
}

}  // namespace dlperf::train
