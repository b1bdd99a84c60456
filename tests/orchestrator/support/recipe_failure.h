// What a recipe's parse and expansion refuse: the first problem a user would see, for the recipe
// tests of every folder.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"

namespace precon::orch::testing {

struct RecipeFailure {
  std::string message;  // empty when the recipe parses and expands
  std::string source;
  int line = -1;
  std::string key;
};

// Parses `text` as the recipe file `path` with `overrides` (--set) and expands its sweep.
inline RecipeFailure recipe_failure(const std::string& text, const std::string& path,
                                    const std::vector<std::string>& overrides = {}) {
  try {
    expand_sweep(parse_recipe_text(text, path, overrides));
  } catch (const worker::ConfigError& e) {
    return {e.what(), e.source(), e.line(), e.key()};
  }
  return {};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace precon::orch::testing
