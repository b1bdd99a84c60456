// A report on stderr when precon-train dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL):
// "precon-train: rank 1: fatal signal 11 (Segmentation fault); stack:" and a backtrace, so the
// trial's log says which rank died and where. The signal is then raised again with its default
// action: the exit status (128 + signal) and any core dump are those of an unhandled crash.
// Not installed under AddressSanitizer or ThreadSanitizer, whose own reports say more.
#pragma once

#include <string>

namespace precon::worker {

// `who` ("rank 3: " or "") prefixes the report; call again to change it (e.g. once the rank is known).
void install_fatal_signal_report(const std::string& who);

}  // namespace precon::worker
