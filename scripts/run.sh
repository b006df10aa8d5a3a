#!/usr/bin/env bash
# The main job: set up, build, then run the training lab (dlperf lab; arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dlperf  # the program alone: the test suites are half the build (scripts/test.sh builds them)
exec build/dlperf lab "$@"
