#!/usr/bin/env bash
# The speed comparison against PyTorch 1.13 on CPU (Debian's python3-torch), side by side.
# Arguments go to scripts/bench_vs_pytorch.py (e.g. --models medium --batches 64 --repeats 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dlperf  # the program alone; the test suites are not needed here
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch python3-numpy
fi
exec /usr/bin/python3 scripts/bench_vs_pytorch.py "$@"
