#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU: a fresh Release build with the CUDA backend in
# build-gpu, the CUDA kernel tests (none may skip), the full test suite, then the CUDA
# benchmarks. Reads GPU state only (nvidia-smi -L); changes no GPU setting.
# Usage: tests/gpu/run.sh   (from anywhere; exits non-zero on any failure)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build-gpu"
jobs=16

die() {
  echo "tests/gpu/run.sh: $*" >&2
  exit 1
}

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: run this on a machine with an NVIDIA GPU and driver"
command -v cmake >/dev/null || die "cmake not found: install the build dependencies (deploy/install-deps.sh) first"
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  die "nvcc not found in PATH or /usr/local/cuda/bin: install the CUDA toolkit first"
fi
nvidia-smi -L || die "nvidia-smi cannot list GPUs: check the driver"

echo "== configure + build ($build, Release, PRECON_CUDA=ON)"
rm -rf "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPRECON_CUDA=ON
# Only what runs here: the device machine has no network (npm), Slurm, Prometheus or browser.
cmake --build "$build" -j "$jobs" --target precon_kernels_tests precon_worker_tests precon-train precon_bench_cuda

echo "== CUDA kernel tests"
log="$build/cuda_tests.log"
set +e
"$build/tests/precon_kernels_tests" --gtest_filter='Cuda*' 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
[[ $status -eq 0 ]] || die "CUDA kernel tests failed (exit $status), see $log"
grep -q '^\[  PASSED  \]' "$log" || die "no CUDA kernel test passed, see $log"
if grep -q '^\[  SKIPPED \]' "$log"; then
  die "CUDA kernel tests were skipped on a GPU machine: the backend does not see the GPU (see $log)"
fi

echo "== kernel and worker test suites (CPU paths too)"
"$build/tests/precon_kernels_tests" --gtest_brief=1
"$build/tests/precon_worker_tests" --gtest_brief=1

echo "== CUDA benchmarks"
"$build/tests/bench/precon_bench_cuda" --benchmark_counters_tabular=true

echo "== all GPU checks passed"
