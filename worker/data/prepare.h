// Text corpus -> token data: what `precon data prepare` (and `precon-train prepare-data`) runs.
//
// Inputs are text files, JSON Lines files and/or directories (searched recursively for *.txt and
// *.jsonl); each directory's files are sorted by path so the output is the same on every machine.
// A text file is one document; each line of a .jsonl file is one, its `json_key` string. Text must
// be UTF-8 (a leading BOM is dropped); empty documents are skipped. Tokenizers (tokenizer.h):
// bytes (default), gpt2, cl100k_base, o200k_base, a Hugging Face tokenizer.json, or GPT-2's
// encoder.json + vocab.bpe files.
//
// Between documents: with append_eod, the tokenizer's end-of-document token after every document;
// otherwise (llm.c's convention) that token between documents when the tokenizer has one, else the
// tokens of `separator`.
// Formats:
//   llmc: one stream; its last val_fraction (at least seq_len + 1 tokens) becomes val.bin, the
//     rest train.bin (uint16 tokens, or uint32 past a vocabulary of 65,536).
//   megatron: Megatron's indexed datasets train_text_document.{bin,idx} and
//     val_text_document.{bin,idx}, one sequence per document (with its EOD when append_eod); the
//     last documents, at least val_fraction of the tokens and seq_len + 1, become val.
// meta.json records tokenizer, vocab size, format, counts and sources.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

struct PrepareProgress {
  int64_t files_done = 0, files = 0;
  int64_t bytes = 0;   // text bytes tokenized so far
  int64_t tokens = 0;  // tokens so far
  double seconds = 0;  // since the start
};

struct PrepareOptions {
  std::vector<fs::path> inputs;    // text / .jsonl files and/or directories, in this order
  fs::path out_dir;                // receives the data and meta.json (created)
  double val_fraction = 0.1;       // share of tokens at the end for validation, in (0, 1)
  int64_t seq_len = 1024;          // train and val each get at least seq_len + 1 tokens
  std::string separator = "\n\n";  // text between documents (see above)
  std::string tokenizer = "bytes"; // tokenizer.h's spec: bytes | gpt2 | cl100k_base | o200k_base | FILE.json
  fs::path tiktoken_dir;           // where tiktoken's rank files are ("" = the default search)
  fs::path encoder_json;           // GPT-2 encoder.json; with vocab_bpe selects those files' BPE
  fs::path vocab_bpe;              // GPT-2 vocab.bpe (merges)
  std::string format = "llmc";     // "llmc" | "megatron"
  bool append_eod = false;         // the tokenizer's EOD after every document
  std::string json_key = "text";   // the document's key in .jsonl lines
  // Called about twice a second while tokenizing, and once at the end.
  std::function<void(const PrepareProgress&)> progress;
};

struct PrepareResult {
  fs::path train_path;  // llmc: train.bin; megatron: the prefix out/train_text_document
  fs::path val_path;
  fs::path meta_path;
  std::string tokenizer;  // the tokenizer's name
  std::string format;
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t documents = 0;
  int64_t bytes = 0;      // text bytes tokenized
  double seconds = 0;     // tokenizing time
  std::vector<fs::path> sources;  // the files read, in stream order
};

// The files `inputs` name, in stream order. Throws DataError for a missing input or when
// no text or .jsonl file is found.
std::vector<fs::path> collect_text_files(const std::vector<fs::path>& inputs);

// Throws DataError for bad options, invalid UTF-8 (naming file, line and byte offset), a .jsonl
// line that is not an object with a string json_key (naming file and line), a tokenizer without an
// EOD token under append_eod, or a corpus too small for seq_len; IoError when a file cannot be read
// or written.
PrepareResult prepare_data(const PrepareOptions& options);

// What a recipe check finds wrong with a token file before anything runs ("" when nothing): not a
// token shard (magic, version, a body as long as its count), fewer than seq_len + 1 tokens, or a
// token at or past vocab_size among kTokenSample spread over the file (vocab_size 0: not checked).
// The message names the file and what is wrong, never bytes of a file that is not a shard.
inline constexpr int64_t kTokenSample = 65536;
std::string check_token_file(const fs::path& path, int64_t seq_len, int64_t vocab_size);

// True when `path` names data: a file (a shard), or a Megatron prefix (path.idx or path.bin exists).
bool data_path_exists(const std::string& path);
// check_token_file for one path of [data] train or val in data.format `format` ("auto": a prefix whose
// .idx has Megatron's magic is a Megatron dataset, anything else a shard): a Megatron dataset's
// headers, sizes and a token sample are checked, never its whole .bin.
std::string check_data_path(const std::string& path, const std::string& format, int64_t seq_len, int64_t vocab_size);

}  // namespace precon::worker
