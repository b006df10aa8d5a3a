#!/usr/bin/env bash
# Run on a GPU machine without our Debian packages: unpacks the .deb files carried in .deb/
# (scripts/gpu/fetch_debs.sh) into .deb/root, then configures and builds dlperf with the CUDA
# backend for this machine's GPU into build-gpu/. Prints the line to source before running it.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD/.deb/root
if [ ! -d "$root/usr" ]; then
  for f in .deb/*.deb; do dpkg -x "$f" "$root"; done
fi
lib=$root/usr/lib/x86_64-linux-gnu
arch=${CUDA_ARCH:-native}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake" -DCMAKE_INCLUDE_PATH="$root/usr/include" -DCMAKE_LIBRARY_PATH="$lib"
cmake --build build-gpu --target dlperf dlperf_tests  # not dlperf-allreduce: no MPI there
echo "export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}"
