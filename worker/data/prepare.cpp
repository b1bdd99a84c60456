#include "worker/data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"
#include "worker/data/bpe.h"
#include "worker/data/indexed.h"
#include "worker/data/shard.h"
#include "worker/data/tokenizer.h"

namespace precon::worker {

std::vector<fs::path> collect_text_files(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const fs::path& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const fs::path ext = it->path().extension();
        if (it->is_regular_file() && (ext == ".txt" || ext == ".jsonl")) found.push_back(it->path());
      }
      if (ec) throw IoError(errno_text("list directory", in, ec.value()), ec.value());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      throw DataError("input " + in.string() + " does not exist (expected a text or .jsonl file or a directory)");
    }
  }
  if (files.empty()) throw DataError("no text files found in the inputs (directories are searched for *.txt and *.jsonl)");
  return files;
}

namespace {

std::unique_ptr<Tokenizer> open_tokenizer(const PrepareOptions& o) {
  if (o.encoder_json.empty() != o.vocab_bpe.empty()) {
    throw DataError("GPT-2 BPE needs both encoder.json and vocab.bpe (--encoder and --vocab)");
  }
  if (!o.encoder_json.empty()) {
    if (o.tokenizer != "bytes")
      throw DataError("--encoder/--vocab name the tokenizer already; leave out --tokenizer " + o.tokenizer);
    return make_gpt2_files_tokenizer(o.encoder_json, o.vocab_bpe);
  }
  return make_tokenizer(o.tokenizer, TokenizerOptions{o.tiktoken_dir});
}

void check_utf8(std::string_view text, const fs::path& p, int64_t line) {
  if (auto bad = find_invalid_utf8(text)) {
    throw DataError(p.string() + (line > 0 ? " line " + std::to_string(line) : std::string()) +
                    " is not valid UTF-8 (first bad byte at offset " + std::to_string(*bad) +
                    "); convert it first, e.g. iconv -f LATIN1 -t UTF-8");
  }
}

// Calls fn(text) for each document of file p, in order.
template <class Fn>
void for_each_document(const fs::path& p, const std::string& json_key, Fn&& fn) {
  std::vector<uint8_t> raw = read_file(p);
  std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  if (p.extension() != ".jsonl") {
    check_utf8(text, p, 0);
    fn(text);
    return;
  }
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    check_utf8(line, p, line_no);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(p.string() + " line " + std::to_string(line_no) + " is not JSON (" + json_error_text(e) + ")");
    }
    if (!doc.is_object() || !doc.contains(json_key) || !doc.at(json_key).is_string())
      throw DataError(p.string() + " line " + std::to_string(line_no) + " has no string \"" + json_key +
                      "\" (the document's key: --json-key)");
    const std::string body = doc.at(json_key).get<std::string>();
    fn(std::string_view(body));
  }
}

struct Corpus {
  std::vector<int32_t> tokens;
  std::vector<int64_t> doc_end;  // end of each document's tokens (its EOD or separator included)
};

}  // namespace

PrepareResult prepare_data(const PrepareOptions& o) {
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0)) {
    throw DataError("val_fraction must be in (0, 1), got " + std::to_string(o.val_fraction));
  }
  if (o.seq_len <= 0) throw DataError("seq_len must be positive, got " + std::to_string(o.seq_len));
  if (o.out_dir.empty()) throw DataError("no output directory given (--out DIR)");
  if (o.format != "llmc" && o.format != "megatron")
    throw DataError("format must be \"llmc\" or \"megatron\", got \"" + o.format + "\"");
  if (find_invalid_utf8(o.separator)) throw DataError("the document separator is not valid UTF-8");

  std::unique_ptr<Tokenizer> tok = open_tokenizer(o);
  const std::optional<int32_t> eod = tok->eod();
  if (o.append_eod && !eod)
    throw DataError("--append-eod: the tokenizer " + tok->name() + " has no end-of-document token");
  // Between documents, unless every document ends in its EOD.
  std::vector<int32_t> separator;
  std::string separator_label;
  if (!o.append_eod) {
    if (eod) {
      separator = {*eod};
      separator_label = tok->decode(separator);
    } else {
      separator = tok->encode(o.separator);
      separator_label = o.separator;
    }
  }

  PrepareResult r;
  r.sources = collect_text_files(o.inputs);
  Corpus c;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double last_report = 0;
  PrepareProgress progress{0, static_cast<int64_t>(r.sources.size()), 0, 0, 0};
  for (const fs::path& p : r.sources) {
    for_each_document(p, o.json_key, [&](std::string_view text) {
      if (text.empty()) return;
      if (r.documents++ > 0 && !o.append_eod) {
        // llm.c's stream: the separator belongs to the document before it.
        c.tokens.insert(c.tokens.end(), separator.begin(), separator.end());
        c.doc_end.back() = static_cast<int64_t>(c.tokens.size());
      }
      const std::vector<int32_t> ids = tok->encode(text);
      c.tokens.insert(c.tokens.end(), ids.begin(), ids.end());
      if (o.append_eod) c.tokens.push_back(*eod);
      c.doc_end.push_back(static_cast<int64_t>(c.tokens.size()));
      progress.bytes += static_cast<int64_t>(text.size());
      progress.tokens = static_cast<int64_t>(c.tokens.size());
      if (o.progress && elapsed() - last_report >= 0.5) {
        last_report = progress.seconds = elapsed();
        o.progress(progress);
      }
    });
    ++progress.files_done;
  }
  r.seconds = progress.seconds = elapsed();
  r.bytes = progress.bytes;
  if (o.progress) o.progress(progress);

  const int64_t total = static_cast<int64_t>(c.tokens.size());
  const int64_t min_split = o.seq_len + 1;
  if (total < 2 * min_split) {
    throw DataError("corpus too small: " + std::to_string(total) + " tokens from " + std::to_string(r.sources.size()) +
                    " files, but train and val each need at least seq_len + 1 = " + std::to_string(min_split) +
                    " tokens (" + std::to_string(2 * min_split) + " in all); add text or use a shorter seq_len");
  }
  int64_t want_val = std::max<int64_t>(static_cast<int64_t>(std::ceil(o.val_fraction * static_cast<double>(total))),
                                       min_split);
  int64_t split = total - std::min(want_val, total - min_split);  // first val token
  size_t val_doc = c.doc_end.size();                                // first val document (megatron)
  if (o.format == "megatron") {
    // Whole documents: the last ones, as few as make up want_val tokens.
    auto start_of = [&](size_t d) { return d == 0 ? int64_t{0} : c.doc_end[d - 1]; };
    while (val_doc > 0 && total - start_of(val_doc) < want_val) --val_doc;
    split = start_of(val_doc);
    if (split < min_split || total - split < min_split) {
      throw DataError("cannot split " + std::to_string(c.doc_end.size()) + " documents (" + std::to_string(total) +
                      " tokens) into train and val by whole documents with at least seq_len + 1 = " +
                      std::to_string(min_split) + " tokens each; add documents or use a shorter seq_len");
    }
  }
  r.train_tokens = split;
  r.val_tokens = total - split;
  r.tokenizer = tok->name();
  r.vocab_size = tok->vocab_size();
  r.format = o.format;

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw IoError(errno_text("create directory", o.out_dir, ec.value()), ec.value());
  r.meta_path = o.out_dir / "meta.json";
  const std::span<const int32_t> all(c.tokens);
  if (o.format == "llmc") {
    r.train_path = o.out_dir / "train.bin";
    r.val_path = o.out_dir / "val.bin";
    auto write = [&](const fs::path& path, std::span<const int32_t> part) {
      if (r.vocab_size <= 65536) {
        std::vector<uint16_t> t(part.begin(), part.end());
        write_shard(path, t);
      } else {
        std::vector<uint32_t> t(part.begin(), part.end());
        write_shard(path, t);
      }
    };
    write(r.train_path, all.first(static_cast<size_t>(split)));
    write(r.val_path, all.subspan(static_cast<size_t>(split)));
  } else {
    r.train_path = o.out_dir / "train_text_document";
    r.val_path = o.out_dir / "val_text_document";
    const TokenDType dtype = optimal_token_dtype(r.vocab_size);
    IndexedWriter train(r.train_path.string(), dtype), val(r.val_path.string(), dtype);
    int64_t begin = 0;
    for (size_t d = 0; d < c.doc_end.size(); ++d) {
      (d < val_doc ? train : val).add_document(all.subspan(static_cast<size_t>(begin), static_cast<size_t>(c.doc_end[d] - begin)));
      begin = c.doc_end[d];
    }
    train.finish();
    val.finish();
  }

  nlohmann::json meta = {{"tokenizer", r.tokenizer},
                         {"vocab_size", r.vocab_size},
                         {"format", r.format},
                         {"train", r.train_path.filename().string()},
                         {"val", r.val_path.filename().string()},
                         {"train_tokens", r.train_tokens},
                         {"val_tokens", r.val_tokens},
                         {"total_tokens", total},
                         {"documents", r.documents},
                         {"val_fraction", o.val_fraction},
                         {"seq_len", o.seq_len},
                         {"append_eod", o.append_eod},
                         {"sources", nlohmann::json::array()}};
  if (o.append_eod) meta["eod"] = *eod;
  else meta["separator"] = separator_label;
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
