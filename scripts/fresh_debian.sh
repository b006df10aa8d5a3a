#!/usr/bin/env bash
# Run as root on the development machine: README's two commands on a fresh Debian 12, as a new
# user's machine (or CI's) would run them. A bare bookworm chroot (debootstrap's minbase: no
# compiler, no CMake, no CUDA toolkit) gets a clone of HEAD, then
#   scripts/test.sh     (apt-get installs, builds, runs ctest; arguments go to ctest)
#   scripts/run.sh      (the quick lab)
# A package setup.sh forgets to install, or a test that assumes a CUDA toolkit, fails here; the
# first run (2026-11-28) found such a test. On 2 cores: 1 minute to make the chroot, then 20 for
# the build, ctest and the lab once the chroot has the packages (the first run, which installed
# them while another build shared the cores, took 32 minutes for test.sh alone).
#
#   scripts/fresh_debian.sh [CTEST_ARGS...]
# The chroot stays in /tmp/dlperf-fresh-bookworm (rm -rf it for a truly fresh start: packages
# installed by an earlier run are then no longer there to hide a missing one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=/tmp/dlperf-fresh-bookworm
if [ ! -x "$root/bin/bash" ]; then
  command -v debootstrap > /dev/null || apt-get install -y -qq debootstrap
  echo "fresh: making $root (debootstrap --variant=minbase bookworm)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$root.log" 2>&1 || { tail "$root.log"; exit 1; }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"  # apt-get inside reaches Debian's mirrors
mkdir -p "$root/proc" "$root/sys" "$root/dev/pts" "$root/src"
# /sys (the CPU's cache sizes, which bench and plan read) and /dev/pts (a test runs dlperf on a
# pseudo-terminal) as a real machine has them; unmounted on exit, so an rm -rf stays inside.
trap 'umount "$root/proc" "$root/sys" "$root/dev/pts" 2>/dev/null || true' EXIT
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/sys" || mount -t sysfs sysfs "$root/sys"
mountpoint -q "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts"
rm -rf "$root/src/dlperf"
git clone -q . "$root/src/dlperf"  # what CI clones: the committed tree, nothing built
echo "fresh: at $(git -C "$root/src/dlperf" log --oneline -1)"
args=$(printf ' %q' "$@")
chroot "$root" /bin/bash -c "cd /src/dlperf && export HOME=/root && bash scripts/test.sh$args" > "$root/test.log" 2>&1 \
  || { grep -E "\*\*\*Failed|tests passed|rror" "$root/test.log" | tail -20; echo "fresh: scripts/test.sh failed, log in $root/test.log"; exit 1; }
grep -E "tests passed" "$root/test.log"
chroot "$root" /bin/bash -c "cd /src/dlperf && export HOME=/root && bash scripts/run.sh --no-progress" > "$root/run.log" 2>&1 \
  || { tail -20 "$root/run.log"; echo "fresh: scripts/run.sh failed, log in $root/run.log"; exit 1; }
tail -3 "$root/run.log"
echo "fresh: both of README's commands passed on a bare Debian 12"
