#include "worker/config/choice.h"

#include <algorithm>
#include <stdexcept>

#include "worker/config/keys.h"

namespace precon::worker {

namespace {

const KeySpec& key_with_choices(std::string_view key) {
  const KeySpec* k = find_key(key);
  if (k == nullptr || k->choices.empty())
    throw std::logic_error("parse_choice: " + std::string(key) + " is not a key with choices in the key table");
  return *k;
}

}  // namespace

std::string not_a_choice_text(std::string_view key, std::string_view value) {
  return "\"" + std::string(value) + "\" is not " + key_with_choices(key).expected_text();
}

void check_choice_names(std::string_view key, const std::vector<std::string_view>& names) {
  const KeySpec& k = key_with_choices(key);
  const bool same = names.size() == k.choices.size() &&
                    std::all_of(k.choices.begin(), k.choices.end(), [&](const std::string& c) {
                      return std::find(names.begin(), names.end(), c) != names.end();
                    });
  if (!same)
    throw std::logic_error("parse_choice: the table for " + k.name + " does not list exactly its key table choices (" +
                           k.expected_text() + ")");
}

}  // namespace precon::worker
