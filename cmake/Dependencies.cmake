# Third-party libraries, all from Debian packages (deploy/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)

# One thread pool: prefer the OpenMP build of OpenBLAS so BLAS calls and our OpenMP loops
# share threads instead of spinning against each other.
find_library(PRECON_OPENBLAS_OPENMP openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(PRECON_OPENBLAS_OPENMP)
  set(BLAS_LIBRARIES ${PRECON_OPENBLAS_OPENMP})
  set(PRECON_BLAS_TEXT "OpenBLAS, OpenMP build (${PRECON_OPENBLAS_OPENMP})")
else()
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  set(PRECON_BLAS_TEXT "${BLAS_LIBRARIES} (not OpenBLAS's OpenMP build: BLAS threads and OpenMP loops may contend)")
endif()
pkg_check_modules(LAPACKE REQUIRED IMPORTED_TARGET lapacke)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
find_package(CLI11 REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(tomlplusplus REQUIRED)
# The controller's /metrics registry and text exposition (core only: we serve it on our own route).
find_package(prometheus-cpp CONFIG REQUIRED COMPONENTS core)
# Asio and Beast are header-only: the worker's reporter and the controller's HTTP server.
find_package(Boost 1.74 REQUIRED)

# OpenMPI (optional): the CPU collectives of multi-rank layouts and the bootstrap for NCCL.
# QUIET: cmake/Summary.cmake says whether it was found and what its absence means.
find_package(MPI QUIET COMPONENTS C)

if(PRECON_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(PRECON_BUILD_TESTS OR PRECON_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
