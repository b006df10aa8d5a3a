#!/usr/bin/env bash
# The main job: set up, build, then train the default model on Fashion-MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/dlperf train "$@"
