#!/usr/bin/env bash
# Runs every fuzz target for a long time (default 600 s each), two at a time at low priority,
# each from its seed corpus plus a scratch corpus, and prints one line per target: seconds,
# executions, new corpus entries and the outcome. Crashes, leaks, timeouts and sanitizer reports
# are saved as crash-*/leak-*/timeout-* under the scratch directory and fail the run.
# Usage: tests/fuzz/run_long.sh BUILD_DIR [SECONDS] [SCRATCH_DIR] [TARGET...]
set -euo pipefail

build=${1:?usage: tests/fuzz/run_long.sh BUILD_DIR [SECONDS] [SCRATCH_DIR] [TARGET...]}
seconds=${2:-600}
scratch=${3:-$(mktemp -d /tmp/precon-fuzz-long-XXXXXX)}
shift $(( $# < 3 ? $# : 3 ))
root=$(cd "$(dirname "$0")/../.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_recipe fuzz_http_request fuzz_api_json fuzz_checkpoint fuzz_shard fuzz_bpe)
build=$(cd "$build" && pwd)

run_one() {
  local t=$1 dir="$scratch/$1"
  mkdir -p "$dir/corpus"
  local start=$SECONDS rc=0 dict=()
  case $t in fuzz_recipe | fuzz_api_json) dict=(-dict="$root/tests/fuzz/fuzz_recipe.dict") ;; esac
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     nice -n 10 "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -malloc_limit_mb=2048 -print_final_stats=1 "${dict[@]}" "$dir/corpus" "$root/tests/fuzz/corpus/$t" >"$dir/log.txt" 2>&1) || rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log.txt" | grep -o '[0-9]*$' || echo "?")
  local outcome="ok"
  [ "$rc" -eq 0 ] || outcome="FAILED (exit $rc, see $dir/log.txt)"
  printf '%-18s %6ds %12s execs %6s corpus  %s\n' "$t" $((SECONDS - start)) "$execs" \
    "$(ls "$dir/corpus" | wc -l)" "$outcome" >>"$scratch/summary.txt"
  [ "$rc" -eq 0 ]
}

: >"$scratch/summary.txt"
status=0
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  pids=()
  for t in "${targets[@]:i:2}"; do
    run_one "$t" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
done
echo "target              time     executions  corpus  outcome   (scratch: $scratch)"
cat "$scratch/summary.txt"
exit $status
