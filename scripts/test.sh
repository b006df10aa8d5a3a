#!/usr/bin/env bash
# Set up, build, and run the whole test suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
# One test at a time: each already uses every core (OpenMP), and two at once oversubscribe the
# cores, which made the suite take 2x to 10x longer on the 2-core machines.
ctest --output-on-failure "$@"
