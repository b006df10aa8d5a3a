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
# zlib1g-dev's libz.so is an absolute link to Debian 12's runtime (/lib/x86_64-linux-gnu/libz.so.1.2.13),
# which another distribution names otherwise: point it at this machine's libz.so.1 (zlib's ABI is
# stable), or the link is dangling and CMake falls back to the static libz.a.
if [ -L "$lib/libz.so" ] && [ ! -e "$lib/libz.so" ]; then
  for z in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib64/libz.so.1; do
    if [ -e "$z" ]; then ln -sf "$z" "$lib/libz.so"; break; fi
  done
fi
# The build runs the test binary (gtest's test discovery), and libdnnl.so.2 finds its own
# dependency libOpenCL.so.1 only through the library path: the executables' run path serves only
# the libraries they name themselves.
export LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-}
# This machine's GPU; where none is visible (a login node, a rehearsal in a chroot) CMake refuses
# "native", so the build is for the A100 and H100/H200 (CMakeLists.txt's default).
arch=${CUDA_ARCH:-native}
if [ -z "${CUDA_ARCH:-}" ] && [ ! -e /dev/nvidia0 ]; then
  arch="80;90"
  echo "build.sh: no GPU visible (no /dev/nvidia0): building for sm_80 and sm_90 (CUDA_ARCH=... picks others)"
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake" -DCMAKE_INCLUDE_PATH="$root/usr/include" -DCMAKE_LIBRARY_PATH="$lib"
cmake --build build-gpu --target dlperf dlperf_tests  # and dlperf-allreduce with dlperf, where CMake finds MPI
echo "export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}"
