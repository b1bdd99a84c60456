// precon: the recipe-submission CLI and controller. `precon run RECIPE` is the embedded default.
#include "orchestrator/cli/common.h"

int main(int argc, char** argv) {
  CLI::App app{"precon: sweeps of GPT training runs with AdamW, Muon and Shampoo, locally or on Slurm"};
  app.require_subcommand(1);
  if (argc > 0 && argv[0][0] != '\0') precon::cli::global().program = argv[0];
  precon::cli::add_run(app);
  precon::cli::add_serve(app);
  precon::cli::add_submit(app);
  precon::cli::add_ls(app);
  precon::cli::add_show(app);
  precon::cli::add_best(app);
  precon::cli::add_compare(app);
  precon::cli::add_cancel(app);
  precon::cli::add_logs(app);
  precon::cli::add_recipe(app);
  precon::cli::add_data(app);
  precon::cli::add_study(app);
  precon::cli::add_importance(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return precon::cli::exit_code();
}
