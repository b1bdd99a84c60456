// Hugging Face tokenizer.json files of the byte-level BPE kind (Llama 3, Qwen2, GPT-NeoX/Pythia,
// GPT-2) as a BPE Tokenizer; every other kind is refused with what is unsupported.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"
#include "worker/data/bpe.h"

namespace precon::worker {

namespace {

using nlohmann::json;

struct HfReader {
  std::string where;  // "Hugging Face tokenizer <path>"

  [[noreturn]] void fail(const std::string& what) const { throw DataError(where + ": " + what); }

  bool flag(const json& j, const char* key, bool fallback, const std::string& at) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(at + "." + key + " is not true or false");
    return j[key].get<bool>();
  }

  std::string type_of(const json& j, const std::string& at) const {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail(at + " has no \"type\"");
    return j["type"].get<std::string>();
  }

  // normalizer: null, NFC, or a Sequence of NFC.
  bool nfc(const json& j, const std::string& at) const {
    if (j.is_null()) return false;
    const std::string type = type_of(j, at);
    if (type == "NFC") return true;
    if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
      bool any = false;
      for (size_t i = 0; i < j["normalizers"].size(); ++i) {
        any = nfc(j["normalizers"][i], at + ".normalizers[" + std::to_string(i) + "]") || any;
      }
      return any;
    }
    fail(at + " type \"" + type + "\" is not supported (precon applies none or NFC)");
  }

  // Adds the pre-tokenizer's steps; *byte_level: a ByteLevel was seen (the text is bytes from
  // there on, so a Split after it would see byte-level characters, which precon does not run).
  void pre_tokenizer(const json& j, const std::string& at, Pretokenizer& out, bool* byte_level) const {
    if (j.is_null()) return;
    const std::string type = type_of(j, at);
    if (type == "Sequence") {
      if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) fail(at + ".pretokenizers is not a list");
      for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
        pre_tokenizer(j["pretokenizers"][i], at + ".pretokenizers[" + std::to_string(i) + "]", out, byte_level);
      }
      return;
    }
    if (type == "ByteLevel") {
      if (*byte_level) fail(at + " is a second ByteLevel: not supported");
      *byte_level = true;
      if (flag(j, "add_prefix_space", true, at)) out.add_prefix_space();
      if (flag(j, "use_regex", true, at)) {
        out.add_split(kGpt2Pattern, false, SplitBehavior::isolated, false, where + ": " + at + " (GPT-2's pattern)");
      }
      return;
    }
    if (type == "Split") {
      if (*byte_level) fail(at + " is a Split after ByteLevel (on byte-level characters): not supported");
      const json& pattern = j.value("pattern", json());
      bool literal;
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        literal = false;
      } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        literal = true;
      } else {
        fail(at + ".pattern is not {\"Regex\": ...} or {\"String\": ...}");
      }
      static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
          {"Isolated", SplitBehavior::isolated},
          {"Removed", SplitBehavior::removed},
          {"MergedWithPrevious", SplitBehavior::merged_with_previous},
          {"MergedWithNext", SplitBehavior::merged_with_next},
          {"Contiguous", SplitBehavior::contiguous}};
      const std::string behavior = j.value("behavior", std::string());
      const auto* b = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                                   [&](const auto& kv) { return behavior == kv.first; });
      if (b == std::end(kBehaviors)) {
        fail(at + ".behavior \"" + behavior +
             "\" is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
      }
      out.add_split(pattern[literal ? "String" : "Regex"].get<std::string>(), literal, b->second,
                    flag(j, "invert", false, at), where + ": " + at + ".pattern");
      return;
    }
    if (type == "Metaspace") fail(at + " is Metaspace: a sentencepiece-style tokenizer, not byte-level");
    fail(at + " type \"" + type + "\" is not supported (ByteLevel, Split and Sequence are)");
  }

  std::vector<std::pair<std::string, std::string>> merges(const json& model) const {
    if (!model.contains("merges") || !model["merges"].is_array()) fail("model.merges is missing or not a list");
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(model["merges"].size());
    for (size_t i = 0; i < model["merges"].size(); ++i) {
      const json& m = model["merges"][i];
      const std::string at = "model.merges[" + std::to_string(i) + "]";
      if (m.is_string()) {  // "a b"
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail(at + ": expected two symbols separated by one space");
        }
        out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        fail(at + " is not \"a b\" or [\"a\", \"b\"]");
      }
    }
    return out;
  }

  void check_model(const json& model) const {
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") {
      fail("model.type is \"" + type + "\": only byte-level BPE models are supported (not Unigram, WordPiece or WordLevel)");
    }
    if (flag(model, "byte_fallback", false, "model")) {
      fail("model.byte_fallback is true: a sentencepiece-style BPE, not byte-level");
    }
    if (model.contains("dropout") && !model["dropout"].is_null() &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
      fail("model.dropout is set: BPE dropout is not supported");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && model[key] != "") {
        fail(std::string("model.") + key + " is set: not a byte-level BPE");
      }
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab is missing or not an object");
  }
};

}  // namespace

namespace {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const HfReader& r, const fs::path& tokenizer_json, const json& j) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) r.fail("no \"model\" object");
  const json& model = j["model"];
  r.check_model(model);

  BpeTokenizerParts parts;
  parts.name = "hf:" + tokenizer_json.filename().string();
  parts.nfc = r.nfc(j.value("normalizer", json()), "normalizer");
  bool byte_level = false;
  r.pre_tokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer", parts.pretokenizer, &byte_level);
  if (!byte_level) r.fail("pre_tokenizer has no ByteLevel: not a byte-level BPE");

  BytesToId vocab;
  for (const auto& [entry, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= INT32_MAX) {
      r.fail("model.vocab: an id is not an integer in [0, 2^31 - 1)");
    }
    vocab.insert_or_assign(entry, id.get<int32_t>());
  }
  parts.model = make_byte_level_model(
      vocab, r.merges(model), r.flag(model, "ignore_merges", false, "model"), r.where + ": model.vocab",
      [&](size_t i) { return r.where + ": model.merges[" + std::to_string(i) + "]"; },
      " in " + r.where + " (model.vocab should hold all 256 byte characters)", &parts.id_text);

  const json& added = j.value("added_tokens", json::array());
  if (!added.is_array()) r.fail("added_tokens is not a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string at = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() || t["id"].get<uint64_t>() >= INT32_MAX ||
        !t.contains("content") || !t["content"].is_string() || t["content"].get_ref<const std::string&>().empty()) {
      r.fail(at + " needs an \"id\" in [0, 2^31 - 1) and a non-empty \"content\"");
    }
    AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = t["content"].get<std::string>();
    const bool special = r.flag(t, "special", false, at);
    a.single_word = r.flag(t, "single_word", false, at);
    a.lstrip = r.flag(t, "lstrip", false, at);
    a.rstrip = r.flag(t, "rstrip", false, at);
    a.normalized = r.flag(t, "normalized", !special, at);
    if (parts.id_text.size() <= static_cast<size_t>(a.id)) parts.id_text.resize(static_cast<size_t>(a.id) + 1);
    parts.id_text[static_cast<size_t>(a.id)] = a.content;
    parts.special.insert_or_assign(a.content, a.id);
    parts.added.push_back(std::move(a));
  }
  parts.vocab_size = static_cast<int64_t>(parts.id_text.size());
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>"}) {
    if (auto it = parts.special.find(std::string_view(name)); it != parts.special.end()) {
      parts.eod = it->second;
    } else if (auto v = vocab.find(std::string_view(name)); v != vocab.end()) {
      parts.eod = v->second;
    }
    if (parts.eod) break;
  }
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const fs::path& tokenizer_json) {
  const HfReader r{"Hugging Face tokenizer " + tokenizer_json.string()};
  const std::vector<uint8_t> raw = read_file(tokenizer_json);
  json j;
  try {
    j = json::parse(raw.begin(), raw.end());
  } catch (const json::exception& e) {
    throw DataError(r.where + " is not valid JSON (" + json_error_text(e) + ")");
  }
  try {
    return load_hf_tokenizer(r, tokenizer_json, j);
  } catch (const json::exception& e) {  // a value of the wrong type where the reader did not check
    throw DataError(r.where + ": " + json_error_text(e));
  }
}

}  // namespace precon::worker
