#!/usr/bin/env bash
# Rehearsal on a Debian machine of what the GPU machine lacks: after a build configured through
# tests/gpu/deps_env.sh (.gpu/root), lists every header the compiler read (ninja's deps), every
# library the programs load (ldd) and every path the configure step cached, and fails on any that
# came from this machine's /usr or /lib instead of .gpu/root, unless its Debian package is one the
# GPU machine has in its own form (C library, compiler, libstdc++, libgomp).
# Usage: tests/gpu/check_isolation.sh BUILD_DIR DEPS_ROOT PROGRAM...
set -euo pipefail
build=${1:?usage: check_isolation.sh BUILD_DIR DEPS_ROOT PROGRAM...}
R=${2:?}
shift 2
allowed='^(libc6|libc6-dev|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1|libgcc-12-dev|libstdc\+\+6|libstdc\+\+-12-dev|libgomp1|gcc-12|g\+\+-12|cpp-12|cmake|cmake-data)(:amd64)?$'

paths=$(mktemp)
trap 'rm -f "$paths"' EXIT
ninja -C "$build" -t deps | awk '/^    \//{print $1}' >>"$paths"
for p in "$@"; do ldd "$p" | awk '$3 ~ /^\//{print $3}' >>"$paths"; done
grep -E ':(FILEPATH|PATH)=/' "$build/CMakeCache.txt" | sed 's/^[^=]*=//' | tr ';' '\n' | grep '^/' >>"$paths" || true

bad=0 checked=0
while IFS= read -r f; do
  case "$f" in "$R"/* | /usr/local/cuda* | "$build"/* | "$(cd "$build/.." && pwd)"/*) continue ;; esac
  [[ -f "$f" ]] || continue  # directories (include dirs, prefixes) are judged by the files read
  checked=$((checked + 1))
  real=$(readlink -f "$f")
  pkg=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1 || true)
  [[ -n "$pkg" ]] || pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1 || true)
  if [[ -z "$pkg" ]]; then
    case "$f" in /usr/bin/* | /bin/*) continue ;; esac  # tools: the compiler, cmake, ninja
    echo "check_isolation: $f belongs to no package" >&2
    bad=$((bad + 1))
  elif ! [[ "$pkg" =~ $allowed ]]; then
    case "$f" in /usr/bin/* | /bin/*) continue ;; esac
    echo "check_isolation: $f comes from this machine's $pkg, not from $R" >&2
    bad=$((bad + 1))
  fi
done < <(sort -u "$paths")
echo "check_isolation: $(sort -u "$paths" | wc -l) paths ($checked outside $R, the build and CUDA); $bad from this machine's packages"
[[ $bad -eq 0 ]]
