// Text from users (experiment names, metric names, paths, error messages quoting them) on its
// way to a log line or a terminal table: control characters are written as escapes, so a name
// cannot forge a log line (\n), move the cursor or recolour a terminal (ESC, CSI), ring the bell
// or overwrite a line (\r). The one helper for every log sink and CLI table.
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace precon::orch {

// C0 controls and DEL become \n, \r, \t or \xHH; the C1 controls (U+0080..U+009F, two bytes in
// UTF-8) become \u0080..\u009f; a backslash stays as it is. Everything else, UTF-8 included,
// passes unchanged.
std::string printable(std::string_view text);

}  // namespace precon::orch
