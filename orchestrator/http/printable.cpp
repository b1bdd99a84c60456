#include "orchestrator/http/printable.h"

namespace precon::orch {

std::string printable(std::string_view text) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      const auto d = static_cast<unsigned char>(text[++i]);
      out += "\\u00";
      out += kHex[d >> 4];
      out += kHex[d & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace precon::orch
