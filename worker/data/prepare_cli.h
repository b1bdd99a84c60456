// The options of `precon data prepare` and `precon-train prepare-data` (one definition for both
// programs), and the progress line they draw on a terminal.
// Header-only: it needs CLI11, which only the programs link.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "worker/data/prepare.h"

namespace precon::worker {

// The options' storage: filled by CLI11, then turned into PrepareOptions by options().
struct PrepareCli {
  PrepareOptions o;
  std::vector<std::string> inputs;
  std::string out, encoder, vocab, tiktoken_dir;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--input", inputs, "text or .jsonl files, or directories (*.txt, *.jsonl, recursively)")->required();
    cmd->add_option("--out", out, "output directory")->required();
    cmd->add_option("--tokenizer", o.tokenizer, "bytes | gpt2 | cl100k_base | o200k_base | a tokenizer.json")
        ->capture_default_str();
    cmd->add_option("--format", o.format, "llmc (train.bin/val.bin) | megatron (*_text_document.bin/.idx)")
        ->capture_default_str();
    cmd->add_flag("--append-eod", o.append_eod, "end every document with the tokenizer's end-of-document token");
    cmd->add_option("--json-key", o.json_key, "the document's key in .jsonl lines")->capture_default_str();
    cmd->add_option("--val-fraction", o.val_fraction, "share of tokens for validation")->default_val(0.1);
    cmd->add_option("--seq-len", o.seq_len, "each split keeps at least seq_len + 1 tokens")->default_val(64);
    cmd->add_option("--tiktoken-dir", tiktoken_dir, "where tiktoken's rank files are (default: the installed ones)");
    cmd->add_option("--encoder", encoder, "GPT-2 encoder.json (with --vocab: GPT-2's BPE from these files)");
    cmd->add_option("--vocab", vocab, "GPT-2 vocab.bpe");
  }

  // PrepareOptions from the parsed flags; a progress line on stderr when it is a terminal.
  PrepareOptions options() {
    PrepareOptions r = o;
    for (const std::string& i : inputs) r.inputs.emplace_back(i);
    r.out_dir = out;
    r.encoder_json = encoder;
    r.vocab_bpe = vocab;
    r.tiktoken_dir = tiktoken_dir;
    if (isatty(STDERR_FILENO)) {
      r.progress = [](const PrepareProgress& p) {
        const double mb = static_cast<double>(p.bytes) / 1e6, s = p.seconds > 0 ? p.seconds : 1e-9;
        const int width = 30;
        const int filled = p.files > 0 ? static_cast<int>(width * p.files_done / p.files) : 0;
        std::fprintf(stderr, "\r[%s%s] %lld/%lld files  %.1f MB  %lld tokens  %.0f tokens/s  %.1f MB/s ",
                     std::string(static_cast<size_t>(filled), '#').c_str(),
                     std::string(static_cast<size_t>(width - filled), '.').c_str(),
                     static_cast<long long>(p.files_done), static_cast<long long>(p.files), mb,
                     static_cast<long long>(p.tokens), static_cast<double>(p.tokens) / s, mb / s);
        if (p.files_done == p.files) std::fprintf(stderr, "\n");
        std::fflush(stderr);
      };
    }
    return r;
  }
};

// The summary line both programs print.
inline std::string prepare_summary(const PrepareResult& r) {
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.1f MB/s", r.seconds > 0 ? static_cast<double>(r.bytes) / 1e6 / r.seconds : 0.0);
  return "wrote " + r.train_path.string() + " (" + std::to_string(r.train_tokens) + " tokens) and " +
         r.val_path.string() + " (" + std::to_string(r.val_tokens) + " tokens), tokenizer " + r.tokenizer +
         ", vocab_size " + std::to_string(r.vocab_size) + ", format " + r.format + ", " + std::to_string(r.documents) +
         " documents, " + rate;
}

}  // namespace precon::worker
