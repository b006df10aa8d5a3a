#include "core/interrupt.h"

#include <csignal>
#include <utility>

namespace dlperf {
namespace {

volatile std::sig_atomic_t g_stop = 0;
int g_depth = 0;  // StopOnSignal nesting; they live on the main thread
struct sigaction g_old_int {}, g_old_term {};

// Async-signal-safe: sets a flag; the second signal restores the default action and re-raises.
extern "C" void on_stop_signal(int sig) {
  if (g_stop != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop = sig;
}

}  // namespace

StopOnSignal::StopOnSignal() {
  if (g_depth++ > 0) return;
  g_stop = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and waits in progress carry on; the loops look at the flag
  // A signal the process was started ignoring (nohup, a background job's SIGINT) stays ignored.
  for (auto [sig, old] : {std::pair{SIGINT, &g_old_int}, std::pair{SIGTERM, &g_old_term}}) {
    sigaction(sig, nullptr, old);
    if (old->sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
  }
}

StopOnSignal::~StopOnSignal() {
  if (--g_depth > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_stop = 0;
}

int stop_signal() { return g_stop; }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT (Ctrl-C)";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace dlperf
