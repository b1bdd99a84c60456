#!/usr/bin/env bash
# Installs the npm packages pinned in tests/interop/package-lock.json (js-tiktoken, GPT-2's
# encoder.json/vocab.bpe, the State of the Union corpus) with `npm ci` into WORK_DIR in the build
# tree, so the source tree stays clean. Idempotent: `npm ci` runs only when the lock file changed.
# Without npm it exits 77 (ctest: skipped), except under CI=true, where it fails.
# Usage: tests/interop/npm_install.sh WORK_DIR      (the interop_npm_packages test runs it)
set -euo pipefail

src=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: tests/interop/npm_install.sh WORK_DIR}

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "interop: $tool is missing (deploy/install-deps.sh installs nodejs and npm)" >&2
    [ "${CI:-}" = "true" ] && exit 1
    exit 77
  fi
done

mkdir -p "$work"
# installed.lock is written only after a successful `npm ci`, so an interrupted install is redone.
if ! cmp -s "$src/package-lock.json" "$work/installed.lock"; then
  rm -f "$work/installed.lock"
  cp "$src/package.json" "$src/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "interop: npm ci failed in $work (is the npm registry reachable?)" >&2
    exit 1
  fi
  cp "$src/package-lock.json" "$work/installed.lock"
fi
echo "interop: npm packages ready in $work/node_modules"
