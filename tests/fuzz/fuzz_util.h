// Helpers shared by the fuzz targets: a private scratch directory for inputs that the code under
// test reads from files, splitting one input into parts, and the one way a target reports a
// broken invariant (abort, so libFuzzer saves the input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace precon::fuzz {

// This process's scratch directory (created on first use, removed at exit).
const std::filesystem::path& scratch_dir();

// Writes bytes to scratch_dir()/name (replacing it) and returns the path.
std::filesystem::path write_scratch(const std::string& name, std::string_view bytes);

// The input as text, and split at NUL bytes into at most `parts` pieces (the last keeps the rest).
std::string_view as_text(const uint8_t* data, size_t size);
std::vector<std::string> split_nul(std::string_view text, size_t parts);

// Prints what broke and aborts: libFuzzer records the input as a crash.
[[noreturn]] void fail(const std::string& what);

}  // namespace precon::fuzz
