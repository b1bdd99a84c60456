#include "worker/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/data/bpe.h"
#include "worker/data/shard.h"

namespace precon::worker {

std::vector<fs::path> collect_text_files(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const fs::path& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file() && it->path().extension() == ".txt") found.push_back(it->path());
      }
      if (ec) throw IoError(errno_text("list directory", in, ec.value()), ec.value());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      throw DataError("input " + in.string() + " does not exist (expected a text file or a directory of *.txt)");
    }
  }
  if (files.empty()) throw DataError("no text files found in the inputs (directories are searched for *.txt)");
  return files;
}

namespace {

// Turns documents into tokens with one of the two tokenizers.
class Tokenizer {
 public:
  explicit Tokenizer(const PrepareOptions& o) {
    if (o.encoder_json.empty() != o.vocab_bpe.empty()) {
      throw DataError("GPT-2 BPE needs both encoder.json and vocab.bpe (--encoder and --vocab)");
    }
    if (!o.encoder_json.empty()) {
      bpe_ = std::make_unique<Gpt2Bpe>(o.encoder_json, o.vocab_bpe);
      if (auto eot = bpe_->token_id("<|endoftext|>")) {
        separator_ = {*eot};
        separator_label_ = "<|endoftext|>";
        return;
      }
    }
    separator_ = encode(o.separator);
    separator_label_ = o.separator;
  }

  std::vector<int32_t> encode(std::string_view text) {
    if (bpe_) return bpe_->encode(text);
    return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }

  const std::vector<int32_t>& separator() const { return separator_; }
  const std::string& separator_label() const { return separator_label_; }
  const char* name() const { return bpe_ ? "gpt2-bpe" : "byte"; }
  int64_t vocab_size() const { return bpe_ ? bpe_->vocab_size() : 256; }

 private:
  std::unique_ptr<Gpt2Bpe> bpe_;
  std::vector<int32_t> separator_;
  std::string separator_label_;
};

}  // namespace

PrepareResult prepare_data(const PrepareOptions& o) {
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0)) {
    throw DataError("val_fraction must be in (0, 1), got " + std::to_string(o.val_fraction));
  }
  if (o.seq_len <= 0) throw DataError("seq_len must be positive, got " + std::to_string(o.seq_len));
  if (o.out_dir.empty()) throw DataError("no output directory given (--out DIR)");
  if (find_invalid_utf8(o.separator)) throw DataError("the document separator is not valid UTF-8");

  Tokenizer tok(o);
  PrepareResult r;
  r.sources = collect_text_files(o.inputs);
  std::vector<uint16_t> stream;
  int64_t documents = 0;
  for (const fs::path& p : r.sources) {
    std::vector<uint8_t> raw = read_file(p);
    std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    if (text.empty()) continue;
    if (auto bad = find_invalid_utf8(text)) {
      throw DataError(p.string() + " is not valid UTF-8 (first bad byte at offset " + std::to_string(*bad) +
                      "); convert it first, e.g. iconv -f LATIN1 -t UTF-8");
    }
    if (documents++ > 0) stream.insert(stream.end(), tok.separator().begin(), tok.separator().end());
    for (int32_t t : tok.encode(text)) stream.push_back(static_cast<uint16_t>(t));
  }

  const int64_t total = static_cast<int64_t>(stream.size());
  const int64_t min_split = o.seq_len + 1;
  if (total < 2 * min_split) {
    throw DataError("corpus too small: " + std::to_string(total) + " tokens from " + std::to_string(r.sources.size()) +
                    " files, but train and val each need at least seq_len + 1 = " + std::to_string(min_split) +
                    " tokens (" + std::to_string(2 * min_split) + " in all); add text or use a shorter seq_len");
  }
  r.val_tokens = std::max<int64_t>(static_cast<int64_t>(std::ceil(o.val_fraction * static_cast<double>(total))),
                                   min_split);
  r.val_tokens = std::min(r.val_tokens, total - min_split);
  r.train_tokens = total - r.val_tokens;
  r.tokenizer = tok.name();
  r.vocab_size = tok.vocab_size();

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw IoError(errno_text("create directory", o.out_dir, ec.value()), ec.value());
  r.train_path = o.out_dir / "train.bin";
  r.val_path = o.out_dir / "val.bin";
  r.meta_path = o.out_dir / "meta.json";
  const std::span<const uint16_t> all(stream);
  write_shard(r.train_path, all.first(static_cast<size_t>(r.train_tokens)));
  write_shard(r.val_path, all.subspan(static_cast<size_t>(r.train_tokens)));

  nlohmann::json meta = {{"tokenizer", r.tokenizer},
                         {"vocab_size", r.vocab_size},
                         {"train_tokens", r.train_tokens},
                         {"val_tokens", r.val_tokens},
                         {"total_tokens", total},
                         {"documents", documents},
                         {"val_fraction", o.val_fraction},
                         {"seq_len", o.seq_len},
                         {"separator", tok.separator_label()},
                         {"sources", nlohmann::json::array()}};
  for (const fs::path& p : r.sources) meta["sources"].push_back(p.string());
  if (!o.encoder_json.empty()) {
    meta["encoder"] = o.encoder_json.string();
    meta["vocab"] = o.vocab_bpe.string();
  }
  const std::string text = meta.dump(2) + "\n";
  write_file_atomic(r.meta_path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return r;
}

}  // namespace precon::worker
