// Text bound for logs and terminals (http/printable.h): control characters are escaped, the rest
// passes as it is.
#include <string>

#include <gtest/gtest.h>

#include "orchestrator/http/printable.h"

namespace precon::orch {
namespace {

TEST(Printable, ControlCharactersAreEscapedAndTheRestIsKept) {
  EXPECT_EQ(printable("tiny-muon_3.x"), "tiny-muon_3.x");
  EXPECT_EQ(printable("a\nprecon: trial 1 completed"), "a\\nprecon: trial 1 completed");
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m\a\r"), "\\x1b[31mred\\x1b[0m\\x07\\r");
  EXPECT_EQ(printable(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(printable("tab\tdel\x7f"), "tab\\tdel\\x7f");
  // C1 controls in UTF-8 (U+009B is CSI on some terminals) are escaped; other UTF-8 is not.
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_EQ(printable("Grüße ±1 σ"), "Grüße ±1 σ");
  EXPECT_EQ(printable("a\\nb"), "a\\nb");  // an already-escaped text reads the same
}

}  // namespace
}  // namespace precon::orch
