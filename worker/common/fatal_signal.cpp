#include "worker/common/fatal_signal.h"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PRECON_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PRECON_SANITIZED 1
#endif
#endif

namespace precon::worker {

namespace {

char g_who[64] = "";
// The handler runs on its own stack, so a stack overflow is reported too.
alignas(16) char g_stack[64 * 1024];

void put(const char* text) {
  for (size_t n = std::strlen(text); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

// Only async-signal-safe calls: write(2), backtrace (loaded before, see below), sigaction, raise.
extern "C" void on_fatal_signal(int sig) {
  char number[16];
  int n = 0;
  for (int v = sig; v > 0 && n < 15; v /= 10) number[n++] = static_cast<char>('0' + v % 10);
  char digits[16];
  for (int i = 0; i < n; ++i) digits[i] = number[n - 1 - i];
  digits[n] = '\0';
  put("precon-train: ");
  put(g_who);
  put("fatal signal ");
  put(digits);
  put(sig == SIGSEGV ? " (Segmentation fault)" : sig == SIGBUS ? " (Bus error)" : sig == SIGFPE ? " (Floating point exception)"
                                                                                                 : " (Illegal instruction)");
  put("; stack:\n");
  void* frames[64];
  const int depth = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

void install_fatal_signal_report(const std::string& who) {
#ifndef PRECON_SANITIZED
  std::strncpy(g_who, who.c_str(), sizeof g_who - 1);
  g_who[sizeof g_who - 1] = '\0';
  // backtrace() loads libgcc on its first call, which allocates: do that now, not in the handler.
  void* warm[1];
  ::backtrace(warm, 1);
  stack_t st{};
  st.ss_sp = g_stack;
  st.ss_size = sizeof g_stack;
  ::sigaltstack(&st, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
#else
  (void)who;
#endif
}

}  // namespace precon::worker
