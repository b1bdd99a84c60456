#!/usr/bin/env bash
# The GPU checks of issue 14 in one command, for the GPU machine (one H200, CUDA 13, not Debian):
# a Release build for sm_90 of the three programs the checks run and of the CUDA backend's plugin
# they load (libprecon_cuda.so: the programs link no CUDA library), every Cuda* kernel test against
# the CPU path (a skip is a failure), the trainer on CUDA against the CPU
# (tests/gpu/trainer_checks.py), interop with transformers and tiktoken
# (tests/gpu/interop_checks.py) and the CUDA benchmarks; then ONE table (check, value,
# tolerance, PASS/FAIL, note). Reads GPU state only (nvidia-smi -L); changes no GPU setting.
#
# Third-party libraries come from .gpu/carry (tests/gpu/prepare_carry.sh, run on a Debian
# machine; the device tool carries the folder), unpacked by tests/gpu/deps_env.sh; without that
# folder the machine's own (deploy/install-deps.sh) are used.
#
# Usage: tests/gpu/run.sh [OUT_DIR] [--cpu-rehearsal] [--build DIR] [--jobs N]
#   OUT_DIR          (default BUILD/out) gets at most 8 files (the device tool returns 8): table.txt, results.tsv,
#                    build.log, cuda_kernel_tests.log, trainer.tar.gz, interop.log, bench_cuda.log,
#                    gpt2_bench.txt (GPT-2 124M tokens/s and MFU, precon beside PyTorch; its logs go
#                    into trainer.tar.gz)
#   --cpu-rehearsal  no GPU: both sides of every trainer check on the CPU, skipped kernel tests
#                    and erroring benchmarks expected (the rows say "rehearsal"); for a Debian
#                    machine, to exercise the whole script before GPU time is spent
#   --build DIR      build directory (default build-gpu; kept between runs)
#   --jobs N         build parallelism (default 16)
# Environment: PYTHON, the python3 with torch (default python3; on Debian /usr/bin/python3).
# Exits 0 when every row passed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="" rehearsal=0 build="$root/build-gpu" jobs=16
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu-rehearsal) rehearsal=1 ;;
    --build) build="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
    --jobs) jobs="$2"; shift ;;
    -*) echo "tests/gpu/run.sh: unknown option $1" >&2; exit 2 ;;
    *) out="$1" ;;
  esac
  shift
done
[[ -n "$out" ]] || out="$build/out"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
work="$build/gpu-checks"
results="$out/results.tsv"
: >"$results"
t_start=$SECONDS
python="${PYTHON:-python3}"
slow=1  # time limits of the stages: sized for the GPU machine, tripled for a rehearsal on 2 cores
[[ $rehearsal -eq 1 ]] && slow=3

die() {
  echo "tests/gpu/run.sh: $*" >&2
  exit 1
}
# row CHECK VALUE TOLERANCE PASS|FAIL NOTE
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }
stage() { echo "== [$((SECONDS - t_start)) s] $*"; }
note_rehearsal() { [[ $rehearsal -eq 1 ]] && echo "rehearsal (no GPU); $1" || echo "$1"; }

table() {
  "$python" - "$results" <<'EOF' | tee "$out/table.txt"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["check", "value", "tolerance", "result", "note"]
w = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
line = lambda r: "  ".join(r[i].ljust(w[i]) for i in range(4)) + "  " + r[4]
print(line(head))
print("  ".join("-" * x for x in w) + "  " + "-" * 4)
for r in rows:
    print(line(r))
passed = sum(r[3] == "PASS" for r in rows)
print("\ngpu checks: %d passed, %d failed" % (passed, len(rows) - passed))
EOF
}
finish() {
  table
  stage "done"
  if grep -q $'\tFAIL\t' "$results"; then exit 1; fi
  exit 0
}

# -- tools -----------------------------------------------------------------------------------
command -v cmake >/dev/null || die "cmake not found"
command -v "$python" >/dev/null || die "$python not found (set PYTHON)"
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++ or g++) on PATH"
if ! command -v nvcc >/dev/null; then
  [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH" || die "nvcc not found in PATH or /usr/local/cuda/bin"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
{
  echo "== machine"
  if [[ $rehearsal -eq 0 ]]; then
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found: run this on the GPU machine (or pass --cpu-rehearsal)"
    nvidia-smi -L || die "nvidia-smi cannot list GPUs"
  fi
  uname -a; nproc; c++ --version | head -1; nvcc --version | tail -2; cmake --version | head -1
  "$python" -c 'import sys; print("python", sys.version.split()[0], sys.executable)'
  "$python" -m pip list 2>/dev/null | grep -iE '^(torch|transformers|tiktoken|safetensors|numpy|nvidia-nccl)' || true
} >"$out/build.log" 2>&1 || { cat "$out/build.log"; die "see $out/build.log"; }
head -3 "$out/build.log"

# -- configure + build -----------------------------------------------------------------------
stage "dependencies"
# shellcheck source=tests/gpu/deps_env.sh
source "$root/tests/gpu/deps_env.sh"
precon_deps_env "$root" >>"$out/build.log" 2>&1 || die "unpacking .gpu/carry/debs failed, see $out/build.log"
cxx_flags="$PRECON_DEPS_CXX_FLAGS"
extra=()
# NCCL: the CUDA toolkit's own, else the one of the nvidia-nccl pip package next to torch.
cuda_home="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
if ! ls "$cuda_home"/lib*/libnccl.so* >/dev/null 2>&1; then
  nccl_dir=$("$python" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [[ -n "$nccl_dir" && -f "$nccl_dir/include/nccl.h" ]]; then
    extra+=("-DPRECON_NCCL=$(ls "$nccl_dir"/lib/libnccl.so* | head -1)")
    cxx_flags+=" -isystem $nccl_dir/include"
    echo "NCCL from $nccl_dir" >>"$out/build.log"
  else
    echo "no NCCL in $cuda_home nor in python3's nvidia.nccl: the nccl row will fail" >>"$out/build.log"
  fi
fi
# The CUDA libraries: the toolkit's, else those of the nvidia-* pip packages next to torch, linked
# under the names find_package(CUDAToolkit) looks for.
if ! ls "$cuda_home"/lib*/libcublas.so >/dev/null 2>&1; then
  shim="$build/cuda-libs"
  mkdir -p "$shim"
  for d in $("$python" -c 'import glob, nvidia; print(" ".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null); do
    for f in "$d"/lib*.so*; do
      ln -sf "$f" "$shim/$(basename "$f")"
      base="$(basename "$f")"; ln -sf "$f" "$shim/${base%%.so*}.so"
    done
  done
  extra+=("-DCMAKE_LIBRARY_PATH=$shim")
  echo "no libcublas.so in $cuda_home: CUDA libraries from python3's nvidia packages via $shim" >>"$out/build.log"
fi
ls "$cuda_home"/lib*/ 2>/dev/null | grep -E '^lib(cudart|cublas|cusolver|nccl)' | head -20 >>"$out/build.log"

stage "configure + build ($build, sm_90, -j$jobs)"
t0=$SECONDS
targets=(precon_cuda precon_kernels_tests precon-train precon_bench_cuda)
if cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPRECON_CUDA=ON \
     -DPRECON_CUDA_ARCHITECTURES=90 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DPRECON_PYTHON="$(command -v "$python")" \
     -DCMAKE_CXX_FLAGS="$cxx_flags" "${PRECON_DEPS_CMAKE_ARGS[@]}" "${extra[@]}" >>"$out/build.log" 2>&1 &&
   cmake --build "$build" -j "$jobs" --target "${targets[@]}" >>"$out/build.log" 2>&1; then
  row "build: sm_90 Release, ${targets[*]}" "$((SECONDS - t0)) s" "-" PASS "-j$jobs; log build.log"
else
  row "build: sm_90 Release, ${targets[*]}" "-" "-" FAIL "see build.log: $(grep -m1 -E 'error|Error' "$out/build.log" | cut -c1-160)"
  tail -30 "$out/build.log"
  finish
fi
train="$build/worker/precon-train"

# -- the CUDA backend's plugin ---------------------------------------------------------------
# precon-train maps no CUDA library of its own; --version loads the plugin (no device is
# initialised) and names it. The kernel tests below then run through it.
stage "CUDA backend plugin"
plugin="$build/lib/libprecon_cuda.so"
linked=$(ldd "$train" | grep -oE 'lib(cudart|cublas|cublasLt|cusolver|nccl)[^ ]*' | sort -u | tr '\n' ' ')
backends=$("$train" --version 2>&1 | sed -n 's/^backends: //p')
ok=$([[ -z "$linked" && "$backends" == *"cuda (plugin $plugin)"* ]] && echo PASS || echo FAIL)
row "cuda backend plugin: precon-train --version" "${backends:-no backends line}" "cuda (plugin BUILD/lib/...)" "$ok" \
    "$(note_rehearsal "CUDA libraries linked by precon-train: ${linked:-none}")"

# -- CUDA kernel tests -----------------------------------------------------------------------
stage "CUDA kernel tests"
log="$out/cuda_kernel_tests.log"
timeout $((240 * slow)) "$build/tests/precon_kernels_tests" --gtest_filter='Cuda*' >"$log" 2>&1
status=$?
passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" || echo 0)
skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$log" || echo 0)
failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$log" || echo 0)
if [[ $rehearsal -eq 1 ]]; then
  ok=$([[ $status -eq 0 && $failed -eq 0 ]] && echo PASS || echo FAIL)
else
  ok=$([[ $status -eq 0 && $failed -eq 0 && $skipped -eq 0 && $passed -gt 0 ]] && echo PASS || echo FAIL)
fi
row "cuda kernel tests (Cuda*) vs the CPU path" "$passed passed, $failed failed, $skipped skipped" \
    "0 failed, 0 skipped" "$ok" "$(note_rehearsal "exit $status; log cuda_kernel_tests.log$(grep '^\[  FAILED  \] Cuda' "$log" | head -3 | sed 's/^\[  FAILED  \]/;/' | tr -d '\n')")"

# -- the trainer: CUDA against the CPU -------------------------------------------------------
stage "trainer checks"
rm -rf "$work" && mkdir -p "$work/trainer"
flag=()
[[ $rehearsal -eq 1 ]] && flag=(--cpu-rehearsal)
corpus="$root/.gpu/carry/corpus"
[[ -d "$corpus" ]] || corpus="$root/tests/gpu/missing-corpus"
timeout $((300 * slow)) "$python" "$root/tests/gpu/trainer_checks.py" --precon-train "$train" --corpus "$corpus" \
  --work "$work/trainer" --results "$results" "${flag[@]}" >"$work/trainer/trainer_checks.log" 2>&1
status=$?
[[ $status -le 1 ]] || row "trainer checks" "-" "-" FAIL "trainer_checks.py exit $status (124: timed out), see trainer.tar.gz"
(cd "$work/trainer" && tar czf "$out/trainer.tar.gz" trainer_checks.log logs $(ls -d runs/*/metrics.jsonl 2>/dev/null))

# -- interop ---------------------------------------------------------------------------------
stage "interop checks"
npm=""
for d in "$root"/build*/tests/interop/npm; do [[ -d "$d/node_modules/js-tiktoken" ]] && { npm="$d"; break; }; done
timeout $((200 * slow)) "$python" "$root/tests/gpu/interop_checks.py" --precon-train "$train" \
  --run-dir "$work/trainer/runs/adamw-cuda" --corpus "$corpus" --gpt2-dir "$root/.gpu/carry/gpt2" \
  --work "$work/interop" --results "$results" --device "$([[ $rehearsal -eq 1 ]] && echo cpu || echo cuda)" \
  --npm-dir "$npm" >"$out/interop.log" 2>&1
status=$?
[[ $status -le 1 ]] || row "interop checks" "-" "-" FAIL "interop_checks.py exit $status (124: timed out), see interop.log"

# -- CUDA benchmarks -------------------------------------------------------------------------
stage "CUDA benchmarks"
timeout $((180 * slow)) "$build/tests/bench/precon_bench_cuda" --benchmark_counters_tabular=true \
  --benchmark_out="$work/bench_cuda.json" --benchmark_out_format=json >"$out/bench_cuda.log" 2>&1
status=$?
read -r cases errors < <("$python" -c '
import json, sys
try:
    b = json.load(open(sys.argv[1]))["benchmarks"]
except Exception:
    b = []
print(len(b), sum(1 for x in b if x.get("error_occurred")))' "$work/bench_cuda.json")
if [[ $rehearsal -eq 1 ]]; then ok=$([[ $status -eq 0 ]] && echo PASS || echo FAIL)
else ok=$([[ $status -eq 0 && $cases -gt 0 && $errors -eq 0 ]] && echo PASS || echo FAIL); fi
row "cuda benchmarks ran" "$cases cases, $errors errors" "0 errors" "$ok" "$(note_rehearsal "exit $status; figures in bench_cuda.log")"

# -- GPT-2 124M throughput beside PyTorch (last: it gets what is left of the time budget) -----
stage "gpt-2 124m benchmark"
budget=$(( (rehearsal == 1 ? 900 : 500) - (SECONDS - t_start) ))
if [[ $budget -lt 90 ]]; then
  row "gpt-2 124m benchmark" "-" "-" FAIL "not run: $((SECONDS - t_start)) s spent, under 90 s left of the budget"
else
  flag=()
  [[ $rehearsal -eq 1 ]] && flag=(--cpu-rehearsal)
  timeout "$budget" "$python" "$root/tests/gpu/gpt2_bench.py" --precon-train "$train" --corpus "$corpus" \
    --gpt2-dir "$root/.gpu/carry/gpt2" --work "$work/gpt2" --table "$out/gpt2_bench.txt" "${flag[@]}" \
    >"$work/gpt2_bench.log" 2>&1
  status=$?
  # trainer.tar.gz again, now with the benchmark's logs beside the trainer checks' ones
  (cd "$work" && tar czf "$out/trainer.tar.gz" trainer/trainer_checks.log trainer/logs \
     $(ls -d trainer/runs/*/metrics.jsonl gpt2/logs 2>/dev/null) gpt2_bench.log)
  row "gpt-2 124m benchmark ran (table in gpt2_bench.txt)" "exit $status" "exit 0" \
      "$([[ $status -eq 0 ]] && echo PASS || echo FAIL)" "$(note_rehearsal "${budget} s budget (124: timed out); logs in trainer.tar.gz")"
  [[ -f "$out/gpt2_bench.txt" ]] && cat "$out/gpt2_bench.txt"
fi

finish
