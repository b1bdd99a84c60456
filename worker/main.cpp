// precon-train: trains one run (a trial) and needs nothing else.
//   precon-train --config config.toml --run-dir DIR [--report-url URL --token T] [--resume auto|never|PATH]
//   precon-train keys
//   precon-train prepare-data --input FILES_OR_DIR --out DIR [--tokenizer T] [--format llmc|megatron] ...
//   precon-train --version        (and the backends it can use: cpu, and cuda when its plugin loads)
// Exit codes: worker/train/exit_codes.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "kernels/cuda_plugin.h"
#include "kernels/error.h"
#include "worker/common/error.h"
#include "worker/common/fatal_signal.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"
#include "worker/data/prepare_cli.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/layout.h"
#include "worker/parallel/mpi_communicator.h"
#include "worker/parallel/nccl_communicator.h"
#include "worker/train/exit_codes.h"
#include "worker/train/trainer.h"

namespace pw = precon::worker;

namespace {
// One line per problem, each with the prefix the controller looks for.
// Each line of text after the prefix, written to stderr in one call: under mpirun a piece written
// apart could be forwarded apart, with the launcher's abort notice between the prefix and its text.
void print_lines(const std::string& prefix, const std::string& text) {
  std::istringstream lines(text);
  std::string out;
  for (std::string line; std::getline(lines, line);) out += prefix + line + "\n";
  std::cerr.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::cerr.flush();
}
}  // namespace

int main(int argc, char** argv) {
  pw::LaunchInfo launch;
  std::unique_ptr<pw::MpiSession> mpi;          // before `world`: finalized after it is freed
  std::unique_ptr<pw::Communicator> world;
  std::string who;                              // "rank R: " when there are several
  CLI::App app{"precon-train: train one GPT-2 run with AdamW, Muon or Shampoo"};
  app.require_subcommand(0, 1);
  pw::TrainOptions opt;
  std::string config, run_dir;
  app.add_option("--config", config, "trial config (TOML: the recipe schema without [sweep])");
  app.add_option("--run-dir", run_dir, "run directory: checkpoints/, metrics.jsonl, logs");
  app.add_option("--report-url", opt.report_url, "controller endpoint for metric reports");
  app.add_option("--token", opt.token, "bearer token for --report-url")->envname("PRECON_TRIAL_TOKEN");
  app.add_option("--trial-id", opt.trial_id, "trial id sent with reports")->envname("PRECON_TRIAL_ID");
  app.add_option("--resume", opt.resume, "auto (newest good checkpoint), never, or a checkpoint directory")
      ->default_val("auto");
  app.add_option("--set", opt.overrides, "override a config key: key=value (repeatable)");
  // The backends this program can use. Loading the CUDA plugin to say so maps its libraries but
  // initialises no device.
  app.set_version_flag("--version", [] {
    return std::string("precon-train ") + PRECON_VERSION + "\nbackends: cpu, " + precon::kernels::cuda_backend_summary();
  });

  CLI::App* keys = app.add_subcommand("keys", "print every config key: type, default, unit, description");

  CLI::App* prep = app.add_subcommand("prepare-data", "turn UTF-8 text or JSON Lines into token data (llm.c or Megatron)");
  pw::PrepareCli pcli;
  pcli.add_to(prep);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? pw::kExitOk : pw::kExitUsage;
  }

  try {
    if (*keys) {
      std::cout << pw::format_key_table();
      return pw::kExitOk;
    }
    if (*prep) {
      if (pcli.encoder.empty() != pcli.vocab.empty()) {
        std::cerr << "precon-train prepare-data: --encoder and --vocab go together (GPT-2 BPE)\n";
        return pw::kExitUsage;
      }
      pw::PrepareResult r = pw::prepare_data(pcli.options());
      std::cout << pw::prepare_summary(r) << "\n";
      return pw::kExitOk;
    }
    if (config.empty() || run_dir.empty()) {
      std::cerr << "precon-train: --config and --run-dir are required to train (see --help)\n";
      return pw::kExitUsage;
    }
    opt.config_path = config;
    opt.run_dir = run_dir;
    pw::install_requeue_signal_handlers();
    // Several ranks (mpirun, srun): MPI for the collectives. One process needs no MPI at all.
    launch = pw::launch_info_from_env();
    if (launch.world_size > 1) who = "rank " + std::to_string(launch.world_rank) + ": ";
    pw::install_fatal_signal_report(who);
    if (launch.world_size > 1) {
      mpi = std::make_unique<pw::MpiSession>(&argc, &argv);
      world = mpi->world();
      opt.world = world.get();
      who = "rank " + std::to_string(world->rank()) + ": ";
      pw::install_fatal_signal_report(who);  // over MPI's own handlers, which do not name the rank
      pw::select_gpu_for_local_rank(launch.local_rank);
    }
    switch (pw::train(opt)) {
      case pw::TrainOutcome::completed:
      case pw::TrainOutcome::stopped: return pw::kExitOk;
      case pw::TrainOutcome::requeue: return pw::kExitRequeue;
    }
  } catch (const precon::kernels::PluginError& e) {
    // A run on the GPU with no loadable CUDA backend: a setup problem that a retry will not fix.
    // Every rank says so (nodes may differ); ranks that did load it may wait in a collective.
    print_lines("precon-train: " + who + "error: ", e.what());
    if (mpi) pw::abort_mpi_job(pw::kExitUsage);
    return pw::kExitUsage;
  } catch (const pw::ConfigError& e) {
    // Every rank reads the same config and fails at the same point; the first one says why.
    if (launch.world_rank == 0) print_lines("precon-train: config error: ", e.what());
    return pw::kExitUsage;
  } catch (const std::exception& e) {
    print_lines("precon-train: " + who + "error: ", e.what());
    // The other ranks may be waiting in a collective for this one: end the whole job now.
    if (mpi) pw::abort_mpi_job(pw::kExitFailed);
    return pw::kExitFailed;
  }
  return pw::kExitFailed;
}
