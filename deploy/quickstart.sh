#!/usr/bin/env bash
# The quickstart, end to end on a fresh Debian 12 machine: installs only the Debian packages it
# needs (deploy/install-deps.sh --quickstart), builds precon, precon-train and the dashboard
# (Release, CPU only: no tests, benchmarks or CUDA) in build-quickstart/, prepares the State of
# the Union corpus and runs recipes/quickstart.toml (AdamW vs Muon vs Shampoo) with the embedded
# controller, which serves the dashboard while it runs, and prints the leaderboard.
# Its own build directory keeps these options out of build/, which tests/run.sh configures with
# everything on.
# Usage (as root, from the repository root): deploy/quickstart.sh [extra `precon run` options]
set -euo pipefail

cd "$(dirname "$0")/.."
build=build-quickstart
start=$(date +%s)
# One line per phase, with the seconds since the start.
phase() { echo "quickstart: [$(( $(date +%s) - start )) s] $*"; }

phase "1/4 Debian packages (deploy/install-deps.sh --quickstart)"
deploy/install-deps.sh --quickstart
phase "2/4 build: precon, precon-train and the dashboard in $build/"
# Unity batches (CMake compiles 8 sources as one): the heavy headers (Boost.Beast/Asio, toml++,
# nlohmann/json) are parsed once a batch instead of once a file, as tests/run.sh builds.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPRECON_CUDA=OFF -DPRECON_BUILD_TESTS=OFF \
  -DPRECON_BUILD_BENCHMARKS=OFF -DCMAKE_UNITY_BUILD=ON
cmake --build "$build" -j "$(nproc)" --target precon precon-train web
phase "3/4 data: the State of the Union corpus in data/sotu/"
deploy/prepare-quickstart-data.sh data/sotu "$build/worker/precon-train"
phase "4/4 training: recipes/quickstart.toml (5 trials, 2 at a time)"
echo "quickstart: precon is $build/orchestrator/precon (\`$build/orchestrator/precon ls\` and the others read precon.db here)"
"$build/orchestrator/precon" run recipes/quickstart.toml "$@"
phase "done"
