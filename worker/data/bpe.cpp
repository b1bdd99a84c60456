#include "worker/data/bpe.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "worker/common/error.h"

namespace precon::worker {

namespace {

// bytes_to_unicode: printable bytes stand for themselves, the others for 256, 257, ... in order.
struct ByteLevelAlphabet {
  std::array<std::string, 256> char_of;
  std::array<int16_t, 324> byte_of;  // code point -> byte, -1 for none; every character is < 324
  ByteLevelAlphabet() {
    byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      byte_of[cp] = static_cast<int16_t>(b);
      std::string& s = char_of[static_cast<size_t>(b)];
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

uint64_t hash_piece(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

size_t pair_hash(uint64_t key) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 17); }

constexpr size_t kCacheSlots = size_t{1} << 16;

}  // namespace

const std::string& byte_level_char(uint8_t b) { return alphabet().char_of[b]; }

std::optional<std::string> byte_level_bytes(std::string_view entry) {
  const ByteLevelAlphabet& a = alphabet();
  std::string out;
  out.reserve(entry.size());
  for (size_t i = 0; i < entry.size();) {
    const auto c0 = static_cast<unsigned char>(entry[i]);
    char32_t cp;
    if (c0 < 0x80) {
      cp = c0, i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < entry.size()) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(entry[i + 1]) & 0x3Fu), i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are past the alphabet
    }
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return std::nullopt;
    out += static_cast<char>(a.byte_of[cp]);
  }
  return out;
}

BpeModel::BpeModel(std::vector<std::string> token_bytes, const std::vector<BpeMerge>& merges, bool ignore_merges,
                   std::string missing_byte_hint)
    : token_bytes_(std::move(token_bytes)),
      ignore_merges_(ignore_merges),
      missing_byte_hint_(std::move(missing_byte_hint)),
      cache_(kCacheSlots) {
  by_bytes_.reserve(token_bytes_.size());
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (!token_bytes_[id].empty()) by_bytes_.insert_or_assign(token_bytes_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_bytes_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_token_[b] = it == by_bytes_.end() ? -1 : it->second;
  }
  pairs_.resize(std::bit_ceil(std::max<size_t>(16, merges.size() * 2)));
  const size_t mask = pairs_.size() - 1;
  for (const BpeMerge& m : merges) {
    const uint64_t key = pair_key(m.left, m.right);
    size_t i = pair_hash(key) & mask;
    while (pairs_[i].key != key && pairs_[i].key != ~uint64_t{0}) i = (i + 1) & mask;
    pairs_[i] = {key, m.rank, m.merged};  // a repeated pair keeps its last rank, as Hugging Face's map does
  }
}

std::vector<BpeMerge> BpeModel::merges_from_ranks(const std::vector<std::string>& token_bytes) {
  BytesToId by_bytes;
  by_bytes.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!token_bytes[id].empty()) by_bytes.insert_or_assign(token_bytes[id], static_cast<int32_t>(id));
  }
  std::vector<BpeMerge> merges;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string_view t = token_bytes[id];
    if (t.size() < 2 || by_bytes.find(t)->second != static_cast<int32_t>(id)) continue;
    for (size_t k = 1; k < t.size(); ++k) {
      auto left = by_bytes.find(t.substr(0, k));
      if (left == by_bytes.end()) continue;
      auto right = by_bytes.find(t.substr(k));
      if (right == by_bytes.end()) continue;
      const auto rank = static_cast<int32_t>(id);
      merges.push_back({left->second, right->second, rank, rank});
    }
  }
  return merges;
}

const BpeModel::PairSlot* BpeModel::find_pair(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = pairs_.size() - 1;
  for (size_t i = pair_hash(key) & mask;; i = (i + 1) & mask) {
    if (pairs_[i].key == key) return &pairs_[i];
    if (pairs_[i].key == ~uint64_t{0}) return nullptr;
  }
}

std::optional<int32_t> BpeModel::find(std::string_view bytes) const {
  auto it = by_bytes_.find(bytes);
  if (it == by_bytes_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  CacheSlot* slot = nullptr;
  if (piece.size() <= kCacheKeyBytes) {
    slot = &cache_[hash_piece(piece) & (kCacheSlots - 1)];
    if (slot->key_len == piece.size() && std::memcmp(slot->key, piece.data(), piece.size()) == 0) {
      out.insert(out.end(), slot->ids, slot->ids + slot->n_ids);
      return;
    }
  }
  const size_t before = out.size();
  if (auto it = ignore_merges_ ? by_bytes_.find(piece) : by_bytes_.end(); it != by_bytes_.end()) {
    out.push_back(it->second);
  } else {
    merge(piece, out);
  }
  const size_t n = out.size() - before;
  if (slot != nullptr && n <= kCacheIds) {
    slot->key_len = static_cast<uint8_t>(piece.size());
    std::memcpy(slot->key, piece.data(), piece.size());
    slot->n_ids = static_cast<uint8_t>(n);
    std::copy(out.begin() + static_cast<ptrdiff_t>(before), out.end(), slot->ids);
  }
}

void BpeModel::merge(std::string_view piece, std::vector<int32_t>& out) {
  const auto n = static_cast<uint32_t>(piece.size());
  sym_id_.resize(n);
  sym_next_.resize(n);
  sym_prev_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(piece[i]);
    if (byte_token_[b] < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw DataError(std::string("the vocabulary has no token for the byte ") + hex + missing_byte_hint_);
    }
    sym_id_[i] = byte_token_[b];
    sym_next_[i] = i + 1;
    sym_prev_[i] = i - 1;  // wraps to UINT32_MAX for the first
  }
  // A min-heap of candidate merges by (rank, position); entries made stale by earlier merges
  // are recognised when popped (the pair there is gone or is another one).
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  heap_.clear();
  for (uint32_t i = 0; i + 1 < n; ++i) {
    if (const PairSlot* p = find_pair(sym_id_[i], sym_id_[i + 1])) heap_.push_back({p->rank, i});
  }
  std::make_heap(heap_.begin(), heap_.end(), later);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const Candidate c = heap_.back();
    heap_.pop_back();
    const uint32_t i = c.pos, j = sym_next_[i];
    if (sym_id_[i] < 0 || j >= n) continue;
    const PairSlot* p = find_pair(sym_id_[i], sym_id_[j]);
    if (p == nullptr || p->rank != c.rank) continue;
    sym_id_[i] = p->merged;
    sym_id_[j] = -1;
    sym_next_[i] = sym_next_[j];
    if (sym_next_[i] < n) sym_prev_[sym_next_[i]] = i;
    if (const uint32_t h = sym_prev_[i]; h < n) {
      if (const PairSlot* q = find_pair(sym_id_[h], sym_id_[i])) {
        heap_.push_back({q->rank, h});
        std::push_heap(heap_.begin(), heap_.end(), later);
      }
    }
    if (const uint32_t k = sym_next_[i]; k < n) {
      if (const PairSlot* q = find_pair(sym_id_[i], sym_id_[k])) {
        heap_.push_back({q->rank, i});
        std::push_heap(heap_.begin(), heap_.end(), later);
      }
    }
  }
  for (uint32_t i = 0; i < n; i = sym_next_[i]) out.push_back(sym_id_[i]);
}

}  // namespace precon::worker
