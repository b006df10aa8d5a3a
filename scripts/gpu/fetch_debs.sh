#!/usr/bin/env bash
# Run on the development machine: downloads the Debian packages dlperf builds against into .deb/
# (git-ignored), so they can be carried to a GPU machine that reaches no package registry.
# Also copies Fashion-MNIST. Then: scripts/gpu/build.sh there (the device tool's `carry` takes .deb).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deb
cd .deb
rm -rf root  # unpacked on the GPU machine; carried, it would push the call past the 64 MiB it may send
# The OpenCL packages: Debian's oneDNN is built with an OpenCL GPU runtime, so libdnnl.so.2 needs
# libOpenCL.so.1 to load and its CMake config needs OpenCL's headers; the CUDA image has neither.
apt-get download libdnnl-dev libdnnl2 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev \
    ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers 2>&1 |
  grep -v "unsandboxed" || true
ls -la
# Fashion-MNIST (Debian's copy, 30 MB) for the GPU benchmarks: --data .deb/fashion-mnist there.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p fashion-mnist
  cp /usr/share/datasets/fashion-mnist/*.gz fashion-mnist/
fi
# The device tool sends at most 64 MiB: the working tree and what is carried together.
echo "to carry: $(du -sm . | cut -f1) MiB in .deb (limit 64 MiB with the working tree)"
