// Stored token hashes (store/token_hash.h): SHA-256 against the FIPS 180-4 examples, and the
// comparison used for reports.
#include <string>

#include <gtest/gtest.h>

#include "orchestrator/store/token_hash.h"

namespace precon::orch {
namespace {

TEST(TokenHash, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256_hex(std::string(64, 'x')).size(), 64u);
}

TEST(TokenHash, TokensMatchOnlyTheirOwnHash) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string stored = hash_token(token);
  EXPECT_NE(stored, token);
  EXPECT_TRUE(token_matches(token, stored));
  EXPECT_FALSE(token_matches(token + "0", stored));
  EXPECT_FALSE(token_matches("", stored));
  EXPECT_FALSE(token_matches(stored, stored));  // the hash itself is no token
  EXPECT_FALSE(token_matches("", ""));          // no token issued: nothing matches
  EXPECT_FALSE(token_matches(token, stored.substr(0, 63)));
}

}  // namespace
}  // namespace precon::orch
