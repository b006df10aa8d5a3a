// Ctrl-C without lost work. While a StopOnSignal lives, the first SIGINT (Ctrl-C) or SIGTERM
// only asks the work to stop: the training loops look at stop_signal() before every step, drop
// the unfinished epoch, and still write the run record of the epochs that finished (a lab keeps
// its finished runs for --resume). A second signal ends the process at once, as it would have.
#pragma once

#include <string>

#include "core/error.h"

namespace dlperf {

/// Installs the handlers for its lifetime. Nests: the outermost one (a lab around its runs)
/// installs them, clears the request and restores the old handlers.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
};

/// The signal that asked to stop (SIGINT or SIGTERM), or 0.
int stop_signal();

/// Thrown once a stopped command has written what it finished: the CLI prints it (not as an
/// error) and exits with 128 + the signal, as a shell reports a process the signal ended.
class Interrupted : public Error {
 public:
  Interrupted(int signal, std::string what, std::string hint) : Error(std::move(what), std::move(hint)), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// "SIGINT (Ctrl-C)", "SIGTERM".
std::string signal_name(int signal);

}  // namespace dlperf
