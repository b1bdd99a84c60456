// The CUDA backend's plugin as the dispatch point sees it: every slot of its table is filled, and
// an error thrown inside the plugin reaches the program with its type (the plugin is built with
// hidden symbols, so this is what a catch by type relies on). Runs wherever the plugin loads, with
// or without a GPU; skipped in a build without the CUDA backend.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda_plugin.h"
#include "kernels/error.h"

namespace precon::kernels {
namespace {

const BackendTable* loaded_table() {
  try {
    return &cuda_backend();
  } catch (const KernelError&) {
    return nullptr;
  }
}

TEST(CudaPlugin, EverySlotIsFilled) {
  if (!cuda_compiled()) GTEST_SKIP() << "no CUDA backend in this build";
  const BackendTable* table = loaded_table();
  ASSERT_NE(table, nullptr) << cuda_backend_summary();
  EXPECT_EQ(table->abi_version, kBackendAbiVersion);
#define PRECON_EXPECT_SLOT(op) EXPECT_NE(table->op, nullptr) << #op;
  PRECON_BACKEND_OPS(PRECON_EXPECT_SLOT)
#undef PRECON_EXPECT_SLOT
  EXPECT_NE(table->device_count, nullptr);
  EXPECT_NE(table->select_device, nullptr);
}

TEST(CudaPlugin, ErrorsKeepTheirTypeAcrossThePlugin) {
  if (!cuda_compiled()) GTEST_SKIP() << "no CUDA backend in this build";
  ASSERT_NE(loaded_table(), nullptr) << cuda_backend_summary();
  // No GPU: cudaMalloc reports no device; a GPU: out of memory (an OutOfMemoryError, a BackendError).
  try {
    device_malloc(Device::cuda, size_t(1) << 62);
    FAIL() << "allocating 4 EiB succeeded";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace precon::kernels
