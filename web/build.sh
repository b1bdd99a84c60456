#!/usr/bin/env bash
# Builds the dashboard's served directory: the static files in web/ plus the dist files of the
# npm packages pinned in web/package-lock.json, fetched from npm's configured registry and checked
# against the lock's sha512 integrity by cmake/npm_fetch.cmake (no node_modules install) into a work
# directory in the build tree, so the source tree stays clean and two build trees never share
# node_modules. Idempotent: the packages are fetched only when the lock file changed since.
# Usage: web/build.sh OUT_DIR WORK_DIR      (CMake's `web` target calls it; $CMAKE: which cmake)
set -euo pipefail

src=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: web/build.sh OUT_DIR WORK_DIR}
work=${2:?usage: web/build.sh OUT_DIR WORK_DIR}

# Start from an empty served directory so files removed from web/ do not linger.
rm -rf "$out"
mkdir -p "$work" "$out/vendor"
if ! cmp -s "$src/package-lock.json" "$work/package-lock.json" || [ ! -d "$work/node_modules/uplot/dist" ]; then
  rm -rf "$work/package-lock.json" "$work/node_modules"
  "${CMAKE:-cmake}" -DLOCK="$src/package-lock.json" -DDEST="$work" -P "$src/../cmake/npm_fetch.cmake"
  cp "$src/package.json" "$src/package-lock.json" "$work/"
fi

# Served files: everything in web/ except the build inputs; then the libraries' dist files.
for f in "$src"/*; do
  case "$(basename "$f")" in
    package.json|package-lock.json|build.sh|CMakeLists.txt|node_modules) ;;
    *) cp -R "$f" "$out/" ;;
  esac
done
cp "$work/node_modules/uplot/dist/uPlot.esm.js" "$work/node_modules/uplot/dist/uPlot.min.css" "$out/vendor/"
cp "$work/node_modules/uplot/LICENSE" "$out/vendor/uPlot.LICENSE" 2>/dev/null || true
