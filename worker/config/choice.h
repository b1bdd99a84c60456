// A string key's value parsed into the enum of the module that reads it, once, where the module
// sets up; afterwards the module compares enum values, not strings. The config structs keep their
// strings (recipes, tests and the config hash read them). The allowed values are the key table's
// `choices`: an error names the key, the value and those choices, and a module's table must list
// exactly them, so a choice added to the key table cannot be silently missed by a module.
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace precon::worker {

// One allowed value of a key and the enum value it stands for.
template <class E>
struct Choice {
  std::string_view name;
  E value;
};

// "\"x\" is not one of \"a\", \"b\"": the message of a value outside the key's choices, the list
// from the key table (the parser's own message for the same problem).
std::string not_a_choice_text(std::string_view key, std::string_view value);

// Throws std::logic_error unless `key` is a key with choices and `names` are exactly those choices
// (any order): a module's table that misses or invents one is a bug of the program.
void check_choice_names(std::string_view key, const std::vector<std::string_view>& names);

// The enum value of `value` in `table`. A value outside it throws Error: a ConfigError with the
// key ("config" as its source, line 0), any other error type with "key: message" from its string.
template <class Error, class E, size_t N>
E parse_choice(std::string_view key, std::string_view value, const Choice<E> (&table)[N]) {
  std::vector<std::string_view> names;
  names.reserve(N);
  for (const Choice<E>& c : table) names.push_back(c.name);
  check_choice_names(key, names);
  for (const Choice<E>& c : table)
    if (c.name == value) return c.value;
  if constexpr (std::is_constructible_v<Error, std::string>) {
    throw Error(std::string(key) + ": " + not_a_choice_text(key, value));
  } else {
    throw Error("config", 0, std::string(key), not_a_choice_text(key, value));
  }
}

// The name of an enum value in `table` (for messages and logs); "" if absent.
template <class E, size_t N>
std::string_view choice_name(E value, const Choice<E> (&table)[N]) {
  for (const Choice<E>& c : table)
    if (c.value == value) return c.name;
  return {};
}

}  // namespace precon::worker
