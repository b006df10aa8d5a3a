#!/usr/bin/env bash
# Installs everything dlperf needs on Debian 12 (run as root or with sudo), then configures and
# builds it into build/. Safe to run again: apt-get skips what is installed, ninja rebuilds
# only what changed.
#   scripts/setup.sh            everything, the test suites included (scripts/test.sh)
#   scripts/setup.sh TARGET...  only these build targets and what they need (scripts/run.sh: dlperf)
set -euo pipefail
cd "$(dirname "$0")/.."

# ocl-icd-opencl-dev: Debian's oneDNN is built with an OpenCL GPU runtime, so its CMake config
# (find_package(dnnl)) requires OpenCL's headers and loader; apt only recommends them, and we
# install without recommends. python3: scripts/recipe_fmnist93.sh reads its run record with it, and
# a test runs scripts/gpu/fit_plan.py.
packages=(build-essential cmake ninja-build pkg-config
          libdnnl-dev ocl-icd-opencl-dev libfmt-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libgtest-dev
          dataset-fashion-mnist gnuplot-nox libopenmpi-dev openmpi-bin libboost-context-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build "${targets[@]}"
