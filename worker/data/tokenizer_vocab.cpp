// Byte-level vocabularies with merges (Hugging Face's and GPT-2's files) as a BpeModel, and
// GPT-2's encoder.json + vocab.bpe as a Tokenizer.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"
#include "worker/data/bpe.h"

namespace precon::worker {

std::unique_ptr<BpeModel> make_byte_level_model(const BytesToId& vocab,
                                                const std::vector<std::pair<std::string, std::string>>& merges,
                                                bool ignore_merges, const std::string& vocab_where,
                                                const std::function<std::string(size_t)>& merge_where,
                                                std::string missing_byte_hint, std::vector<std::string>* id_text) {
  int32_t size = 0;
  for (const auto& [entry, id] : vocab) size = std::max(size, id + 1);
  std::vector<std::string> token_bytes(static_cast<size_t>(size));
  std::vector<bool> seen(token_bytes.size());
  id_text->resize(std::max(id_text->size(), token_bytes.size()));
  for (const auto& [entry, id] : vocab) {
    if (seen[static_cast<size_t>(id)]) throw DataError(vocab_where + ": two entries have the id " + std::to_string(id));
    seen[static_cast<size_t>(id)] = true;
    std::optional<std::string> bytes = byte_level_bytes(entry);
    (*id_text)[static_cast<size_t>(id)] = bytes ? *bytes : entry;
    if (bytes) token_bytes[static_cast<size_t>(id)] = std::move(*bytes);
  }
  std::vector<BpeMerge> ranked;
  ranked.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    auto left = vocab.find(a), right = vocab.find(b);
    if (left == vocab.end() || right == vocab.end()) {
      throw DataError(merge_where(i) + ": the merge's " + (left == vocab.end() ? "first" : "second") +
                      " symbol is not in the vocabulary");
    }
    joined.assign(a).append(b);
    auto merged = vocab.find(joined);
    if (merged == vocab.end()) throw DataError(merge_where(i) + ": the merged symbol is not in the vocabulary");
    ranked.push_back({left->second, right->second, merged->second, static_cast<int32_t>(i)});
  }
  return std::make_unique<BpeModel>(std::move(token_bytes), ranked, ignore_merges, std::move(missing_byte_hint));
}

std::unique_ptr<Tokenizer> make_gpt2_files_tokenizer(const fs::path& encoder_json, const fs::path& vocab_bpe) {
  std::vector<uint8_t> raw = read_file(encoder_json);
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(raw.begin(), raw.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw DataError("GPT-2 encoder " + encoder_json.string() + " is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!enc.is_object() || enc.empty()) throw DataError("GPT-2 encoder " + encoder_json.string() + " is not a {token: id} object");
  BytesToId vocab;
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= INT32_MAX) {
      throw DataError("GPT-2 encoder " + encoder_json.string() + ": the id of an entry is not an integer in [0, 2^31 - 1)");
    }
    vocab.insert_or_assign(it.key(), it.value().get<int32_t>());
  }

  raw = read_file(vocab_bpe);
  const std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_line;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      throw DataError("GPT-2 merges " + vocab_bpe.string() + " line " + std::to_string(line_no) +
                      ": expected two symbols separated by one space");
    }
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    merge_line.push_back(line_no);
  }

  BpeTokenizerParts parts;
  parts.name = "gpt2-bpe";
  parts.model = make_byte_level_model(
      vocab, merges, false, "GPT-2 encoder " + encoder_json.string(),
      [&](size_t i) {
        return "GPT-2 merges " + vocab_bpe.string() + " line " + std::to_string(merge_line[i]) + " (with " +
               encoder_json.string() + ")";
      },
      " in GPT-2 encoder " + encoder_json.string() + ": encoder.json and vocab.bpe do not belong together", &parts.id_text);
  parts.pretokenizer.add_split(kGpt2Pattern, false, SplitBehavior::isolated, false, "GPT-2's pattern");
  parts.vocab_size = static_cast<int64_t>(parts.id_text.size());
  if (auto it = vocab.find("<|endoftext|>"); it != vocab.end()) parts.eod = it->second;
  return make_bpe_tokenizer(std::move(parts));
}

Gpt2Bpe::Gpt2Bpe(const fs::path& encoder_json, const fs::path& vocab_bpe)
    : impl_(make_gpt2_files_tokenizer(encoder_json, vocab_bpe)) {}

}  // namespace precon::worker
