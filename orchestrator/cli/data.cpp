// precon data prepare: text to token data (the same code and options as `precon-train prepare-data`).
#include <iostream>

#include "orchestrator/cli/common.h"
#include "worker/common/error.h"
#include "worker/data/prepare_cli.h"

namespace precon::cli {

void add_data(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("data", "training data");
  cmd->require_subcommand(1);
  auto cli = std::make_shared<worker::PrepareCli>();
  CLI::App* prep = cmd->add_subcommand("prepare", "turn UTF-8 text or JSON Lines into token data (llm.c or Megatron)");
  cli->add_to(prep);
  prep->callback([=] {
    guarded([&] {
      if (cli->encoder.empty() != cli->vocab.empty())
        throw std::invalid_argument("--encoder and --vocab go together (GPT-2 BPE)");
      worker::PrepareResult r;
      try {
        r = worker::prepare_data(cli->options());
      } catch (const worker::DataError& e) {
        throw std::invalid_argument(e.what());  // the inputs or options are wrong: exit 2
      }
      std::cout << worker::prepare_summary(r) << "\n";
    });
  });
}

}  // namespace precon::cli
