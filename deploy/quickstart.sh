#!/usr/bin/env bash
# The quickstart, end to end on a fresh Debian 12 machine: installs the Debian packages, builds
# precon (Release), prepares the State of the Union corpus and runs recipes/quickstart.toml
# (AdamW vs Muon vs Shampoo) with the embedded controller, printing the leaderboard.
# Usage (as root, from the repository root): deploy/quickstart.sh [extra `precon run` options]
set -euo pipefail

cd "$(dirname "$0")/.."
deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target precon precon-train
deploy/prepare-quickstart-data.sh data/sotu build/worker/precon-train
exec build/orchestrator/precon run recipes/quickstart.toml "$@"
