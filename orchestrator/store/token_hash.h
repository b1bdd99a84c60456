// What the store keeps of a secret token: its SHA-256, never the token. Trial tokens are 128
// random bits, so a plain (unsalted, fast) hash is enough: nobody can search that space, and a
// copy of the database no longer holds anything a worker's report could be forged with.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace precon::orch {

// SHA-256 of text as 64 lower-case hex digits (FIPS 180-4).
std::string sha256_hex(std::string_view text);

// The stored form of a token: sha256_hex(token).
inline std::string hash_token(std::string_view token) { return sha256_hex(token); }

// Whether token hashes to stored_hash, in a time that does not depend on where they differ.
// An empty stored_hash (no token issued) matches nothing.
bool token_matches(std::string_view token, std::string_view stored_hash);

}  // namespace precon::orch
