#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer (about 15 min to
# build and 16 min to run on 2 cores). Use before landing changes to memory handling; it has
# found a use-after-free that the normal suite passed over. Arguments go to ctest, for example
#   scripts/sanitize.sh -R 'Train|Plan'
# UBSan stops a test at its first finding, so a finding fails the test instead of scrolling by.
#
#   scripts/sanitize.sh --thread [GTEST_FILTER]
# builds build-tsan/ under ThreadSanitizer (about 5 min) and runs the data loader's tests (the
# threads dlperf starts itself: workers filling a queue the training thread drains), or the
# tests GTEST_FILTER names. OpenMP is held to one thread (OMP_THREAD_LIMIT=1): libgomp and oneDNN
# are not instrumented, so their threads' work reads as races to TSan, and reporting those made
# a test run for hours. Training tests are possible but slow: under TSan a 1-second profile test
# took 190 s, and Train.SameWeightsForAnyNumberOfWorkers did not finish in 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null  # the packages (it also builds build/)
if [ "${1:-}" = --thread ]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1"
  cmake --build build-tsan --target dlperf_tests
  export OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1
  export TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$PWD/scripts/tsan.supp"
  exec build-tsan/tests/dlperf_tests --gtest_filter="${2:-Loader.*}"
fi
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
cmake --build build-asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd build-asan
# Open MPI leaks from MPI_Init in every rank (one-frame traces in its plugins, which LSan cannot
# suppress by name), so the MPI test runs without leak checking and everything else with it.
ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -E 'Collective.Mpi' "$@"
if (($# == 0)); then ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -R 'Collective.Mpi'; fi
