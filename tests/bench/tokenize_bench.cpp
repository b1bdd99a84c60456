// Tokenizer benchmark: encodes one text file with make_tokenizer(SPEC) on one thread, as
// `precon data prepare` does per document, and prints one JSON line (tests/bench/bench_tokenize.py
// runs it beside js-tiktoken). Each repeat uses a fresh tokenizer, so its piece cache starts cold.
// Usage: precon_tokenize_bench --tokenizer SPEC [--repeat N] FILE
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "worker/common/error.h"
#include "worker/common/file_io.h"
#include "worker/data/tokenizer.h"

int main(int argc, char** argv) {
  using namespace precon::worker;
  using Clock = std::chrono::steady_clock;
  std::string spec, file;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokenizer" && i + 1 < argc) {
      spec = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::stoi(argv[++i]));
    } else {
      file = arg;
    }
  }
  if (spec.empty() || file.empty()) {
    std::cerr << "usage: precon_tokenize_bench --tokenizer SPEC [--repeat N] FILE\n";
    return 2;
  }
  try {
    const std::vector<uint8_t> raw = read_file(file);
    const std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
    double load = 0, best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = Clock::now();
      std::unique_ptr<Tokenizer> tok = make_tokenizer(spec);
      const auto t1 = Clock::now();
      tokens = tok->encode(text).size();
      const auto t2 = Clock::now();
      load = std::chrono::duration<double>(t1 - t0).count();
      best = std::min(best, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("{\"tokenizer\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"load_seconds\": %.3f, \"encode_seconds\": %.4f}\n",
                spec.c_str(), text.size(), tokens, load, best);
  } catch (const WorkerError& e) {
    std::cerr << "precon_tokenize_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
