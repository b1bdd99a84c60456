// precon's token ids of files, for tests/interop/tokenizers_vs_tiktoken.py.
//
// Usage: precon_tokenize_tool --tokenizer SPEC [--tiktoken-dir DIR] FILE...
// Prints one line per file: its ids separated by spaces (an empty line for an empty file). Each
// file is encoded whole, as bytes (invalid UTF-8 included), and its ids must decode back to the
// file with each invalid subpart as U+FFFD; otherwise the tool says where they part and exits 1.
// Other failures (a tokenizer that does not load, a file that cannot be read) exit 2.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "worker/common/error.h"
#include "worker/common/file_io.h"
#include "worker/data/tokenizer.h"

int main(int argc, char** argv) {
  using namespace precon::worker;
  std::string spec;
  TokenizerOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokenizer" && i + 1 < argc) {
      spec = argv[++i];
    } else if (arg == "--tiktoken-dir" && i + 1 < argc) {
      options.tiktoken_dir = argv[++i];
    } else {
      files.push_back(arg);
    }
  }
  if (spec.empty() || files.empty()) {
    std::cerr << "usage: precon_tokenize_tool --tokenizer SPEC [--tiktoken-dir DIR] FILE...\n";
    return 2;
  }
  try {
    std::unique_ptr<Tokenizer> tok = make_tokenizer(spec, options);
    std::string line;
    for (const std::string& file : files) {
      const std::vector<uint8_t> raw = read_file(file);
      const std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
      const std::vector<int32_t> ids = tok->encode(text);
      std::string storage;
      const std::string_view expected = replace_invalid_utf8(text, storage);
      const std::string decoded = tok->decode(ids);
      if (decoded != expected) {
        size_t k = 0;
        while (k < decoded.size() && k < expected.size() && decoded[k] == expected[k]) ++k;
        std::cerr << file << ": decode(encode(text)) differs from the text at byte " << k << " of "
                  << expected.size() << " (decoded " << decoded.size() << " bytes)\n";
        return 1;
      }
      line.clear();
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) line += ' ';
        line += std::to_string(ids[i]);
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
  } catch (const WorkerError& e) {
    std::cerr << "precon_tokenize_tool: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
