// `recipe check`'s data checks on Megatron prefixes and blends: a missing prefix, a truncated
// index, pointers past the .bin, a dtype outside the table and a token past vocab_size are named
// with the file, the key and the trials, before anything runs; a good blend passes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "tests/common/temp_dir.h"
#include "worker/data/indexed.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string write_prefix(const fs::path& dir, const std::string& name, int docs, int32_t token = 7) {
  const std::string prefix = (dir / name).string();
  worker::IndexedWriter w(prefix, worker::TokenDType::uint16);
  for (int d = 0; d < docs; ++d) w.add_document(std::vector<int32_t>(50, token));
  w.finish();
  return prefix;
}

std::vector<std::string> problems(const std::string& data_toml) {
  return check_recipe_data(expand_sweep(
      parse_recipe_text("[model]\nseq_len = 32\nvocab_size = 256\n[data]\n" + data_toml, "blend.toml")));
}

TEST(RecipeData, MegatronBlendsAreCheckedPerDatasetWithTheFileAndWhatIsWrong) {
  TempDir dir;
  const std::string web = write_prefix(dir.path, "web", 4), code = write_prefix(dir.path, "code", 3);
  const std::string blend = "train = [{path = \"" + web + "\", weight = 0.7}, {path = \"" + code +
                            "\", weight = 0.3}]\nval = \"" + code + "\"\n";
  EXPECT_TRUE(problems(blend).empty()) << ::testing::PrintToString(problems(blend));

  // A missing prefix.
  auto p = problems("train = [{path = \"" + web + "\", weight = 1}, {path = \"" + (dir.path / "nope").string() +
                    "\", weight = 1}]\nval = \"\"\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], (dir.path / "nope").string() + " (data.train) does not exist");

  // Too short for seq_len, a token past vocab_size.
  const std::string tiny = write_prefix(dir.path, "tiny", 0);
  const std::string wide = write_prefix(dir.path, "wide", 2, 300);
  p = problems("train = \"" + tiny + "\"\nval = \"" + wide + "\"\n");
  ASSERT_EQ(p.size(), 2u) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find(tiny), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("(data.train)"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("300"), std::string::npos) << p[1];
  EXPECT_NE(p[1].find("vocab_size"), std::string::npos) << p[1];

  // A truncated index, pointers past the .bin, a dtype code outside the table: said with the
  // file, never with its bytes.
  const std::string cut = write_prefix(dir.path, "cut", 4);
  fs::resize_file(cut + ".idx", fs::file_size(cut + ".idx") - 9);
  const std::string shortbin = write_prefix(dir.path, "shortbin", 4);
  fs::resize_file(shortbin + ".bin", 150);
  const std::string badcode = write_prefix(dir.path, "badcode", 4);
  {
    std::fstream f(badcode + ".idx", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(17);  // magic (9) + version (8): the dtype code
    f.put(static_cast<char>(42));
  }
  for (const auto& [prefix, says] : {std::pair{cut, "truncated"}, std::pair{shortbin, "past the end"},
                                     std::pair{badcode, "dtype code 42"}}) {
    p = problems("train = \"" + prefix + "\"\nval = \"\"\n");
    ASSERT_EQ(p.size(), 1u) << prefix;
    EXPECT_NE(p[0].find(prefix), std::string::npos) << p[0];
    EXPECT_NE(p[0].find(says), std::string::npos) << p[0];
    EXPECT_NE(p[0].find("(data.train)"), std::string::npos) << p[0];
  }
  // data.format = "megatron" on a shard path that is no prefix: the missing index is named.
  std::ofstream(dir.path / "plain.bin") << "not a dataset";
  p = problems("train = \"" + (dir.path / "plain.bin").string() + "\"\nval = \"\"\nformat = \"megatron\"\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find(".idx"), std::string::npos) << p[0];
  EXPECT_EQ(p[0].find("not a dataset"), std::string::npos) << p[0];
}

}  // namespace
}  // namespace precon::orch
