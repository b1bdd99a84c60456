// Megatron-LM's indexed dataset (what tools/preprocess_data.py writes): `prefix.bin` holds the
// sequences' tokens back to back, `prefix.idx` describes them. All integers little-endian:
//   .idx  magic "MMIDIDX\0\0" (9 bytes), version uint64 = 1, dtype code uint8 (TokenDType),
//         sequence count S uint64, document index length D uint64 (documents + 1),
//         sizes int32[S] (tokens per sequence), pointers int64[S] (byte offset of each sequence
//         in .bin), document index int64[D] (the first sequence of each document: 0 first, S
//         last, non-decreasing).
//   .bin  the tokens of sequence 0, 1, ... in the dtype, nothing between them.
// Megatron's multimodal builder appends int8 modes[S] to the .idx; its reader reads them only
// when told the dataset is multimodal. The GPT text path never writes them; we refuse them.
// Thread-safety: an IndexedDataset is immutable after open and may be read from any thread.
// An IndexedWriter belongs to one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

// Megatron's DType codes. Only the integer ones hold tokens; 6 and 7 exist so that a float
// dataset can be named when it is refused.
enum class TokenDType : uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};

// "uint16", ...; "unknown" for a value outside the table.
const char* token_dtype_name(TokenDType dtype);
// Bytes per token (0 for a value outside the table).
int64_t token_dtype_size(TokenDType dtype);

inline constexpr char kIndexedMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexedVersion = 1;
inline constexpr int64_t kIndexedHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34: sizes start unaligned

class IndexedDataset {
 public:
  // Opens prefix + ".idx" and prefix + ".bin" and validates the whole index against the .bin's
  // size: magic, version, an integer dtype, counts that fit the .idx exactly, sizes >= 0,
  // pointers from 0 with each sequence right after the previous one and the last ending at the
  // end of .bin, a document index from 0 to S that never decreases. vocab_size > 0 also scans
  // every token and refuses one < 0 or >= vocab_size, naming sequence and position.
  // Every error (a missing or unreadable file included) is a DataError naming the file and what
  // is wrong; the file's own bytes are never quoted.
  explicit IndexedDataset(const std::string& prefix, int64_t vocab_size = 0);

  int64_t sequences() const { return sequences_; }
  int64_t documents() const { return static_cast<int64_t>(document_index_.size()) - 1; }
  int64_t sequence_length(int64_t i) const;
  int64_t total_tokens() const { return total_tokens_; }
  // The first sequence of each document, and sequences() last.
  std::span<const int64_t> document_index() const { return document_index_; }
  TokenDType dtype() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }

  // Copies tokens [offset, offset + n) of sequence seq into out as int32. The range is checked
  // (std::out_of_range: a caller's bug); an int64 token outside int32 is a DataError.
  void read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const;

 private:
  friend std::string check_indexed_dataset(const std::string&, int64_t, int64_t);

  int64_t pointer(int64_t i) const;
  int64_t token(int64_t k) const;  // token k of the whole .bin (sequences are contiguous)
  // The first token at k = 0, stride, 2*stride, ... that is < 0 or >= vocab_size, as a
  // message naming sequence and position; "" when none.
  std::string find_token_outside(int64_t vocab_size, int64_t stride) const;

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDType dtype_ = TokenDType::int32;
  int64_t item_ = 4;
  int64_t sequences_ = 0;
  int64_t total_tokens_ = 0;
  const std::byte* sizes_ = nullptr;     // into idx_, unaligned: read with memcpy
  const std::byte* pointers_ = nullptr;  // into idx_, unaligned
  std::vector<int64_t> document_index_;  // copied: a span needs alignment
};

// What a recipe check finds wrong with a Megatron prefix ("" when nothing): everything the
// constructor checks in the .idx, fewer than seq_len + 1 tokens in all, or a token < 0 or
// >= vocab_size among kTokenSample spread over the .bin (vocab_size 0: not checked). The .bin
// is sampled, never read whole.
std::string check_indexed_dataset(const std::string& prefix, int64_t seq_len, int64_t vocab_size);

// True when prefix.idx exists and starts with Megatron's magic; false otherwise, never throws.
bool is_indexed_prefix(const std::string& prefix);

// The dtype Megatron's preprocess_data.py picks (DType.optimal_dtype): uint16 when
// 0 < vocab_size < 65500, else int32. The 65500 is Megatron's, not 65536: matching it keeps
// our files byte-identical with theirs.
TokenDType optimal_token_dtype(int64_t vocab_size);

// Writes a dataset the way preprocess_data.py does without sentence splitting: one document =
// one sequence. Tokens stream to prefix.bin.tmp; finish() writes prefix.idx.tmp, fsyncs both,
// removes an old prefix.idx, renames the .bin and then the .idx into place: the .idx appears
// last, so a crash leaves either the complete new dataset or no prefix.idx at all.
// An unfinished writer removes its temp files.
class IndexedWriter {
 public:
  // Throws DataError for a float dtype, IoError when prefix.bin.tmp cannot be created.
  IndexedWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedWriter();
  IndexedWriter(const IndexedWriter&) = delete;
  IndexedWriter& operator=(const IndexedWriter&) = delete;

  // Refuses (DataError, nothing written) a negative id or one that the dtype cannot hold.
  // An empty document is kept as preprocess_data.py keeps one: a document with no sequence
  // (its document index entry repeats the previous one).
  void add_document(std::span<const int32_t> tokens);
  void finish();

  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return static_cast<int64_t>(document_index_.size()) - 1; }

 private:
  void flush();

  std::string prefix_;
  TokenDType dtype_;
  int64_t item_;
  FileWriter bin_;
  bool finished_ = false;
  int64_t tokens_ = 0;
  std::vector<uint8_t> buffer_;  // FileWriter is unbuffered: documents are batched
  std::vector<int32_t> sizes_;
  std::vector<int64_t> document_index_{0};
};

}  // namespace precon::worker
