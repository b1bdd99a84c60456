# Sourced by tests/gpu/run.sh: unpacks the Debian packages that tests/gpu/prepare_carry.sh put in
# .gpu/carry/debs into .gpu/root (once per set of packages) and sets PRECON_DEPS_CMAKE_ARGS, the
# CMake arguments that make the configure and the build take every third-party library from
# there. Nothing is installed into / and nothing global is exported: the GPU machine's python3
# (torch, transformers) must keep its own libraries, so precon's programs find theirs through an
# RPATH (DT_RPATH, which their libraries' own dependencies follow too, e.g. liblapacke ->
# liblapack.so.3) instead of LD_LIBRARY_PATH.
# What dpkg's maintainer scripts would do is done by hand: the update-alternatives links (libblas,
# liblapack, cblas.h and their .pc files point at the OpenMP OpenBLAS, as on a Debian machine with
# libopenblas0-openmp) and the /usr prefix in the .pc files.

PRECON_DEPS_ENV_SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")

precon_deps_unpack() {
  local debs="$1" R="$2" stamp
  stamp=$( (cd "$debs" && ls -1 *.deb; cat "$PRECON_DEPS_ENV_SCRIPT") | sha256sum | cut -c1-16)
  if [[ -f "$R/.unpacked-$stamp" ]]; then return 0; fi
  rm -rf "$R"
  mkdir -p "$R"
  local deb
  for deb in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$R"
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      python3 - "$deb" "$R" <<'EOF'
import io, sys, tarfile
blob = open(sys.argv[1], "rb").read()
assert blob[:8] == b"!<arch>\n", sys.argv[1]
pos = 8
while pos < len(blob):
    name, size = blob[pos:pos + 16].decode().strip().rstrip("/"), int(blob[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(blob[pos + 60:pos + 60 + size])).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
EOF
    fi
  done
  rm -rf "$R/usr/share/doc" "$R/usr/share/man" "$R/usr/share/lintian"
  local lib="$R/usr/lib/x86_64-linux-gnu" ob="openblas-openmp"
  ln -sf "$ob/libblas.so.3" "$lib/libblas.so.3"
  ln -sf "$ob/liblapack.so.3" "$lib/liblapack.so.3"
  ln -sf "$ob/libblas.so" "$lib/libblas.so"
  ln -sf "$ob/liblapack.so" "$lib/liblapack.so"
  ln -sf "$ob/libopenblas.so.0" "$lib/libopenblas.so.0"
  ln -sf "$ob/libopenblas.so" "$lib/libopenblas.so"
  mkdir -p "$lib/pkgconfig"
  ln -sf "../$ob/pkgconfig/blas-openblas.pc" "$lib/pkgconfig/blas.pc"
  ln -sf "../$ob/pkgconfig/lapack-openblas.pc" "$lib/pkgconfig/lapack.pc"
  ln -sf "../$ob/pkgconfig/openblas.pc" "$lib/pkgconfig/openblas.pc"
  local h
  for h in cblas.h f77blas.h openblas_config.h; do ln -sf "$ob/$h" "$R/usr/include/x86_64-linux-gnu/$h"; done
  # Absolute links (/usr/lib/...) would leave the folder.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    ln -sfn "$R$target" "$link"
  done < <(find "$R" -type l -lname '/*')
  local pc
  for pc in $(find "$R" -name '*.pc' -type f); do
    sed -i -e "s#\(^[A-Za-z_]*=\)/usr#\1$R/usr#" -e "s#\([ =]-[IL]\)/usr#\1$R/usr#g" "$pc"
  done
  touch "$R/.unpacked-$stamp"
}

# precon_deps_env ROOT: fills PRECON_DEPS_CMAKE_ARGS (an array) and PRECON_DEPS_CXX_FLAGS when
# ROOT/.gpu/carry/debs exists; leaves them empty otherwise (a Debian machine with deploy/install-deps.sh's packages).
precon_deps_env() {
  local repo="$1"
  PRECON_DEPS_CMAKE_ARGS=()
  PRECON_DEPS_CXX_FLAGS=""
  PRECON_DEPS_ROOT=""
  [[ -d "$repo/.gpu/carry/debs" ]] || return 0
  local R="$repo/.gpu/root"
  precon_deps_unpack "$repo/.gpu/carry/debs" "$R"
  PRECON_DEPS_ROOT="$R"
  local lib="$R/usr/lib/x86_64-linux-gnu"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$R/usr/share/pkgconfig"
  PRECON_DEPS_CMAKE_ARGS=(
    "-DCMAKE_PREFIX_PATH=$R/usr"
    "-DPKG_CONFIG_EXECUTABLE=$R/pkg-config"
    "-DPRECON_OPENBLAS_OPENMP=$lib/openblas-openmp/libopenblas.so"
    "-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON"
    "-DCMAKE_BUILD_RPATH=$lib/openblas-openmp;$lib;$R/lib/x86_64-linux-gnu"
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -L$lib"
    "-DCMAKE_C_FLAGS=-isystem $R/usr/include"
  )
  # /usr/include is the compiler's own directory on Debian, so targets that only link LAPACKE
  # (whose .pc points at usr/include/x86_64-linux-gnu) still find lapacke.h there; here it is not.
  # For -DCMAKE_CXX_FLAGS, which the caller may extend.
  # -include cstdint: GCC 13 and later no longer pull <cstdint> in through other standard
  # headers, which some of Debian 12's headers (built for GCC 12) rely on.
  PRECON_DEPS_CXX_FLAGS="-isystem $R/usr/include -include cstdint"
  # pkgconf itself needs libpkgconf3 from the folder: a wrapper gives it that alone.
  if ! LD_LIBRARY_PATH="$lib" "$R/usr/bin/pkgconf" --version >/dev/null 2>&1; then
    echo "deps_env: $R/usr/bin/pkgconf does not run" >&2
    return 1
  fi
  cat > "$R/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$lib" exec "$R/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$R/pkg-config"
}
