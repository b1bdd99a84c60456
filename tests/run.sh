#!/usr/bin/env bash
# Builds precon and runs every test:
#   1. Release build (CUDA backend compiled when nvcc is present), all tests;
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build of the tests (CPU), all tests.
# Usage: tests/run.sh            (after deploy/install-deps.sh)
# Environment: PRECON_JOBS (parallel build/test jobs, default nproc), PRECON_SKIP_ASAN=1.
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
