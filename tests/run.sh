#!/usr/bin/env bash
# Builds precon and runs every test:
#   1. Release build (CUDA backend compiled when nvcc is present), all tests;
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build of the tests (CPU), all tests;
#   3. clang libFuzzer build of the fuzz targets (tests/fuzz, ASan+UBSan), each run 30 s from its
#      seed corpus, two at a time.
# Usage: tests/run.sh            (after deploy/install-deps.sh)
# Environment: PRECON_JOBS (parallel build/test jobs, default nproc), PRECON_SKIP_ASAN=1,
#   PRECON_SKIP_FUZZ=1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${PRECON_JOBS:-$(nproc)}
# OpenMP threads wait passively so parallel test processes do not spin against each other.
export OMP_WAIT_POLICY=PASSIVE

echo "== Release build =="
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" -j "$jobs"
echo "== Release tests =="
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

if [ "${PRECON_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan+UBSan build =="
  cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECON_SANITIZE=ON \
    -DPRECON_CUDA=OFF -DPRECON_BUILD_BENCHMARKS=OFF
  cmake --build "$root/build-asan" -j "$jobs"
  echo "== ASan+UBSan tests =="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"
fi

if [ "${PRECON_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== Fuzz build (clang, libFuzzer + ASan + UBSan) =="
  cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECON_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  cmake --build "$root/build-fuzz" -j "$jobs"
  echo "== Fuzz targets, 30 s each, two at a time =="
  ctest --test-dir "$root/build-fuzz" --output-on-failure -j 2
fi
