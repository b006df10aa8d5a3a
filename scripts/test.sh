#!/usr/bin/env bash
# Set up, build, and run the whole test suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
