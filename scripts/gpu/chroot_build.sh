#!/usr/bin/env bash
# Run on the development machine (as root), before a GPU session: builds dlperf the way
# scripts/gpu/build.sh builds it on the GPU machine, in a bare Debian chroot that has only a
# compiler, CMake and Ninja, the CUDA toolkit (bound in from /usr/local/cuda) and the carried
# .deb files; then runs the test binary there (the GPU tests skip). A dependency the GPU machine
# lacks, or a newer compiler's error, shows here instead of in scarce device time.
#
#   scripts/gpu/chroot_build.sh [SUITE]    # bookworm (Debian 12, GCC 12, CMake 3.25; the default)
#                                          # or trixie (Debian 13, GCC 14, CMake 3.31)
# The chroot stays in /tmp/dlperf-chroot-SUITE for the next call (about 1 minute to make); the
# toolkit is bound in only while the script runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=${1:-bookworm}
root=/tmp/dlperf-chroot-$suite
[ -d .deb ] || scripts/gpu/fetch_debs.sh
if [ ! -x "$root/usr/bin/cmake" ]; then
  command -v debootstrap > /dev/null || apt-get install -y -qq debootstrap
  echo "chroot: making $root (Debian $suite with g++, cmake, ninja)"
  debootstrap --variant=minbase --include=g++,cmake,ninja-build,make,python3 "$suite" "$root" \
    http://deb.debian.org/debian > "$root.log" 2>&1 || { tail "$root.log"; exit 1; }
fi
mkdir -p "$root/usr/local/cuda" "$root/src"
# Unmounted again on exit: a later `rm -rf` of the chroot must not reach into the real toolkit.
# /sys (the CPU's cache sizes, which bench and plan read) and /dev/pts (the progress bar's test
# runs dlperf on a pseudo-terminal) as the GPU machine has them.
mkdir -p "$root/sys" "$root/dev/pts"
trap 'umount "$root/usr/local/cuda" "$root/proc" "$root/sys" "$root/dev/pts" 2>/dev/null || true' EXIT
mountpoint -q "$root/usr/local/cuda" || mount --bind "$(readlink -f /usr/local/cuda)" "$root/usr/local/cuda"
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/sys" || mount -t sysfs sysfs "$root/sys"
mountpoint -q "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts"
# The working tree as the device tool sends it: tracked and untracked-but-not-ignored files, and .deb.
rm -rf "$root/src/dlperf"
mkdir -p "$root/src/dlperf"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$root/src/dlperf"
cp -r .deb "$root/src/dlperf/"
rm -rf "$root/src/dlperf/.deb/root"
echo "chroot: building with $(chroot "$root" g++ --version | head -1), $(chroot "$root" cmake --version | head -1)"
chroot "$root" /bin/bash -c 'cd /src/dlperf && export PATH=/usr/local/cuda/bin:$PATH && CUDA_ARCH=90 scripts/gpu/build.sh' \
  > "$root/build.log" 2>&1 || { grep -E "error|Error|FAILED" "$root/build.log" | head -30; echo "chroot: build failed, log in $root/build.log"; exit 1; }
echo "chroot: built; running the tests (the GPU ones skip)"
chroot "$root" /bin/bash -c 'cd /src/dlperf && export LD_LIBRARY_PATH=$PWD/.deb/root/usr/lib/x86_64-linux-gnu &&
  build-gpu/tests/dlperf_tests' > "$root/tests.log" 2>&1 || true
grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] .*\(" "$root/tests.log"
! grep -q "^\[  FAILED  \]" "$root/tests.log"
