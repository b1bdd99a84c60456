#!/usr/bin/env bash
# Builds precon and runs every test, each test once under a sanitizer where it fits:
#   1. AddressSanitizer + UndefinedBehaviorSanitizer build of the tests (CPU), all tests but the
#      system suites that start whole clusters and browsers (Slurm, load, browser, interop: under
#      ASan they doubled this step's time; the Slurm suites' programs are not built there), the 100 000-trial scale test (82 s under ASan), the
#      mixture of experts' nine-layouts-by-three-optimizers comparison (39 s; its layouts' code runs
#      under ASan in MoeParallel's reshard and killed-rank tests), QK-clip's, SOAP's and NorMuon's
#      layouts (under ASan the clip runs in LlamaReference.QkClipTrajectory, SOAP and NorMuon in
#      OptimReference), the Llama, TP+DP and pipeline every-optimizer layout comparisons (47, 28 and
#      25 s under ASan; their layouts run under ASan in the reshard and data-parallel tests), the
#      kill -9 restart and ASHA through the report answer (53 and 31 s under ASan, 23 and 2 s in
#      Release; the controller's restart runs under ASan in faults.ControllerKill, ASHA's decisions
#      in EarlyStop and CommandTrials);
#   2. Release build (CUDA backend compiled when nvcc is present), the tests step 1 did not run
#      (the ones it leaves out, and what only Release builds); all of them with PRECON_SKIP_ASAN=1;
#   3. ThreadSanitizer build of the controller's tests (precon_orch_tests and the programs they
#      start), those tests but the 100 000-trial scale test and three that train long under the
#      instrumented trainer: the kill -9 restart, ASHA through the report answer and the requeued
#      worker (178, 120 and 84 s under TSan; steps 1 and 2 run them);
#   4. clang libFuzzer build of the fuzz targets (tests/fuzz, ASan+UBSan, -O1), each run 10 s from
#      its seed corpus, two at a time.
# Usage: tests/run.sh            (after deploy/install-deps.sh)
# Environment: PRECON_JOBS (parallel build jobs and Release test jobs, default nproc),
#   PRECON_TEST_JOBS (the sanitizer steps' test jobs, default PRECON_JOBS + 1), PRECON_SKIP_ASAN=1,
#   PRECON_SKIP_TSAN=1, PRECON_SKIP_FUZZ=1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${PRECON_JOBS:-$(nproc)}
# The sanitizer steps' tests wait on processes, sockets and MPI ranks much of the time: at nproc
# jobs two cores stood about half idle through them, at nproc + 1 they are busy (the ASan step's
# tests 803 s -> 671 s on 2 cores). The Release step keeps nproc: its Slurm chain and serial load
# tests set its length.
test_jobs=${PRECON_TEST_JOBS:-$((jobs + 1))}
# Unity builds (CMake batches of 16 sources compiled as one): the templates of the JSON, HTTP and
# test libraries are compiled once a batch instead of once a file. With the precompiled headers
# (cmake/Pch.cmake) and Asio/Beast compiled once (worker/common/asio_beast.cpp).
unity="-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16"
# OpenMP threads wait passively so parallel test processes do not spin against each other.
export OMP_WAIT_POLICY=PASSIVE

# Ninja (install-deps.sh installs it) starts a target's compiles before the libraries it links are
# built, where Make waits for each library first; measured on 2 cores against Make: the ASan build
# 16 s and the ThreadSanitizer build 68 s shorter, the Release build 43 s longer (the unity batches
# keep both cores busy most of the time either way). A build directory configured before with
# another generator keeps it.
generator() {
  if [ -f "$1/CMakeCache.txt" ] || ! command -v ninja >/dev/null 2>&1; then
    return 0
  fi
  echo "-G Ninja"
}

# The names of a build's tests (ctest -N), filtered by the ctest options given after the directory.
test_names() {
  local dir=$1
  shift
  ctest --test-dir "$dir" -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p'
}
# Test names from stdin as one regex alternation, each name's metacharacters escaped.
regex_alternatives() {
  sed 's/[][\\.^$*+?(){}|]/\\&/g' | paste -sd'|'
}

# The tests the ASan step leaves out (it runs every other test): the system suites that start whole
# clusters and browsers, the scale test and the heaviest layout comparisons (see the header).
asan_skip='^(SlurmCluster\.|faults\.SlurmFaults\.|slurm_cluster_|load_|browser_|dashboard_installed|interop_|Scale\.|MoeParallel\.EveryLayout|LlamaParallel\.QkClip|NextOptimizersParallel\.(Soap|NorMuon)Follows|LlamaParallel\.EveryLayout|Parallel\.TensorParallelAndBoth|Pipeline\.TwoStagesFollow|Restart\.KillNine|Controller\.AshaStops)'
asan_ran=""

if [ "${PRECON_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan+UBSan build =="
  # -O1 -g1: half the compile time of -O2 -g under ASan+UBSan, with line numbers in the reports.
  cmake -S "$root" -B "$root/build-asan" $(generator "$root/build-asan") -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECON_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DPRECON_CUDA=OFF -DPRECON_BUILD_BENCHMARKS=OFF \
    -DPRECON_SLURM_TESTS=OFF $unity
  cmake --build "$root/build-asan" -j "$jobs"
  echo "== ASan+UBSan tests =="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$test_jobs" -E "$asan_skip"
  asan_ran="$root/build-asan/tests-run.txt"
  test_names "$root/build-asan" -E "$asan_skip" > "$asan_ran"
fi

echo "== Release build =="
cmake -S "$root" -B "$root/build" $(generator "$root/build") -DCMAKE_BUILD_TYPE=Release $unity
cmake --build "$root/build" -j "$jobs"
if [ -n "$asan_ran" ]; then
  # Every test the ASan step ran passed there; Release runs the rest (the suites above and what
  # only Release builds: the CUDA backend's tests, the benchmarks' smoke tests).
  test_names "$root/build" | LC_ALL=C sort > "$root/build/tests-all.txt"
  LC_ALL=C sort "$asan_ran" | LC_ALL=C comm -23 "$root/build/tests-all.txt" - > "$root/build/tests-rest.txt"
  echo "== Release tests: the $(wc -l < "$root/build/tests-rest.txt") the ASan step did not run =="
  if [ -s "$root/build/tests-rest.txt" ]; then
    ctest --test-dir "$root/build" --output-on-failure -j "$jobs" -R "^($(regex_alternatives < "$root/build/tests-rest.txt"))\$"
  fi
else
  echo "== Release tests =="
  ctest --test-dir "$root/build" --output-on-failure -j "$jobs"
fi

if [ "${PRECON_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer build of the controller's tests =="
  # -O1 -g1: a quicker build with line numbers in the reports.
  cmake -S "$root" -B "$root/build-tsan" $(generator "$root/build-tsan") -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECON_TSAN=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DPRECON_CUDA=OFF -DPRECON_BUILD_BENCHMARKS=OFF $unity
  cmake --build "$root/build-tsan" -j "$jobs" --target precon_orch_tests
  echo "== ThreadSanitizer: controller tests =="
  # libgomp (OpenMP, and OpenBLAS's OpenMP build) is not built with ThreadSanitizer: its thread
  # pool hands work to threads through synchronisation TSan cannot see, so every parallel loop in
  # a trainer these tests start would be reported. OMP_THREAD_LIMIT=1 keeps every OpenMP region
  # on the thread that enters it (train.threads cannot raise it), so no uninstrumented thread
  # exists; the controller's own threads (HTTP, scheduler, executors, reporters) are all ours and
  # instrumented. Left out: ParallelTrial (ranks under mpirun: OpenMPI's own threads are not
  # instrumented either) and PrometheusServer (a real Prometheus scraping; the Release and ASan
  # builds run it).
  # Also left out: single-threaded computations in which ThreadSanitizer can find nothing (the
  # ASan step runs them): a 100,000-trial Pareto front, the study's fit, random-search determinism,
  # the importance evaluators against Optuna, the series cache's downsampling.
  tsan_skip='^(ParallelTrial|PrometheusServer|Scale|Restart|ImportanceOptuna)\.|^Controller\.(AshaStops|RequeuedWorker)|^Best\.ParetoFrontOfAHundredThousandTrials$|^StudyReportTest\.PicksEachCellsBestLrAndFitsItsSeeds$|^Sweep\.RandomSearchIsDeterministic$|^SeriesBlocks\.DownsampleMatchesReference'
  OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 TSAN_OPTIONS=halt_on_error=0:exitcode=66:second_deadlock_stack=1 \
    ctest --test-dir "$root/build-tsan" --output-on-failure -j "$test_jobs" -L controller \
    -E "$tsan_skip"
fi

if [ "${PRECON_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== Fuzz build (clang, libFuzzer + ASan + UBSan) =="
  cmake -S "$root" -B "$root/build-fuzz" $(generator "$root/build-fuzz") -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECON_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPRECON_FUZZ_SECONDS=10 \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" $unity
  cmake --build "$root/build-fuzz" -j "$jobs"
  echo "== Fuzz targets, 10 s each, two at a time =="
  ctest --test-dir "$root/build-fuzz" --output-on-failure -j 2
fi
