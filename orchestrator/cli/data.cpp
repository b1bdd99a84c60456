// precon data prepare: text to token shards (the same code as `precon-train prepare-data`).
#include <iostream>

#include "orchestrator/cli/common.h"
#include "worker/common/error.h"
#include "worker/data/prepare.h"

namespace precon::cli {

void add_data(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("data", "training data");
  cmd->require_subcommand(1);
  auto opt = std::make_shared<worker::PrepareOptions>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto encoder = std::make_shared<std::string>();
  auto vocab = std::make_shared<std::string>();
  CLI::App* prep = cmd->add_subcommand("prepare", "turn UTF-8 text into train.bin / val.bin token shards");
  prep->add_option("--input", *inputs, "text files or directories (*.txt, recursively)")->required();
  prep->add_option("--out", *out, "output directory")->required();
  prep->add_option("--val-fraction", opt->val_fraction, "share of tokens for val.bin")->capture_default_str();
  prep->add_option("--seq-len", opt->seq_len, "each split keeps at least seq_len + 1 tokens")->default_val(64);
  prep->add_option("--encoder", *encoder, "GPT-2 encoder.json (with --vocab: GPT-2 BPE)");
  prep->add_option("--vocab", *vocab, "GPT-2 vocab.bpe");
  prep->callback([=] {
    guarded([&] {
      for (const std::string& i : *inputs) opt->inputs.emplace_back(i);
      opt->out_dir = *out;
      opt->encoder_json = *encoder;
      opt->vocab_bpe = *vocab;
      if (opt->encoder_json.empty() != opt->vocab_bpe.empty())
        throw std::invalid_argument("--encoder and --vocab go together (GPT-2 BPE)");
      worker::PrepareResult r;
      try {
        r = worker::prepare_data(*opt);
      } catch (const worker::DataError& e) {
        throw std::invalid_argument(e.what());  // the inputs or options are wrong: exit 2
      }
      std::cout << "wrote " << r.train_path.string() << " (" << r.train_tokens << " tokens) and "
                << r.val_path.string() << " (" << r.val_tokens << " tokens), tokenizer " << r.tokenizer
                << ", vocab_size " << r.vocab_size << "\n";
    });
  });
}

}  // namespace precon::cli
