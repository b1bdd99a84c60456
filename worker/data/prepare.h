// Text corpus -> token shards: what `precon-train prepare-data` runs.
//
// Inputs are text files and/or directories (searched recursively for *.txt); each
// directory's files are sorted by path so the output is the same on every machine. Every
// file is one document, must be UTF-8 (a leading BOM is dropped) and empty ones are
// skipped. Documents are joined into one token stream with a separator between them:
//   byte tokenizer (default): token = byte value, vocab 256; the separator is the text
//     `separator` (default "\n\n"), tokenized like the documents;
//   GPT-2 BPE (encoder.json + vocab.bpe given): the <|endoftext|> token when the encoder
//     has it (GPT-2's convention), otherwise the BPE tokens of `separator`.
// The last val_fraction of the stream (at least seq_len + 1 tokens) becomes val.bin, the
// rest train.bin; meta.json records tokenizer, vocab size, counts and sources.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

struct PrepareOptions {
  std::vector<fs::path> inputs;    // text files and/or directories, in this order
  fs::path out_dir;                // receives train.bin, val.bin and meta.json (created)
  double val_fraction = 0.1;       // share of tokens at the end of the stream for val.bin, in (0, 1)
  int64_t seq_len = 1024;          // train and val each get at least seq_len + 1 tokens
  std::string separator = "\n\n";  // text between documents (see above)
  fs::path encoder_json;           // GPT-2 encoder.json; with vocab_bpe selects BPE
  fs::path vocab_bpe;              // GPT-2 vocab.bpe (merges)
};

struct PrepareResult {
  fs::path train_path;
  fs::path val_path;
  fs::path meta_path;
  std::string tokenizer;  // "byte" or "gpt2-bpe"
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<fs::path> sources;  // the files read, in stream order
};

// The files `inputs` name, in stream order. Throws DataError for a missing input or when
// no text file is found.
std::vector<fs::path> collect_text_files(const std::vector<fs::path>& inputs);

// Throws DataError for bad options, invalid UTF-8 (naming file and byte offset) or a corpus
// too small for seq_len; IoError when a file cannot be read or written.
PrepareResult prepare_data(const PrepareOptions& options);

// What a recipe check finds wrong with a token file before anything runs ("" when nothing): not a
// token shard (magic, version, a body as long as its count), fewer than seq_len + 1 tokens, or a
// token at or past vocab_size among kTokenSample spread over the file (vocab_size 0: not checked).
// The message names the file and what is wrong, never bytes of a file that is not a shard.
inline constexpr int64_t kTokenSample = 65536;
std::string check_token_file(const fs::path& path, int64_t seq_len, int64_t vocab_size);

}  // namespace precon::worker
