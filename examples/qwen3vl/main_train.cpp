// qwen3vl-train: trains Qwen3-VL (trainer.hpp) from a TOML config with --section.key=value overrides.
//   qwen3vl-train [--config train.toml] [--batches a.safetensors,b.safetensors,...] [--eval-batches ...]
//                 [--section.key=value ...]
//   qwen3vl-train plot --metrics runs/x/metrics.jsonl --out plot.png
// Data: pre-packed batch files (--batches, the batch_io.hpp format), or the dataset in data.train through the data
// pipeline; held-out data for training.eval_interval likewise (--eval-batches, or data.eval at data.eval_split).
// Several processes: mpirun -np N qwen3vl-train ... (world = parallel.tp x dp x parallel.pp). Exit status
// 0 on success, 1 with a one-line error (a rank's error aborts the job).
#include <fmt/core.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint_model.hpp"
#include "data_source.hpp"
#include "trainer.hpp"
#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/core/cli.hpp"
#include "vlpar/obs/plot.hpp"

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int plot(int argc, char** argv) {  // argv[0] = "plot"
  std::string metrics, out;
  vlpar::cli::Parser p("qwen3vl-train plot", "draw the loss, lr and throughput curves of a run");
  p.add("metrics", &metrics, "metrics.jsonl of the run", vlpar::cli::kRequired);
  p.add("out", &out, "PNG to write", vlpar::cli::kRequired);
  return vlpar::cli::run_main(p, argc, argv, [&]() -> vlpar::Status {
    vlpar::obs::PlotOptions o;
  o.title = metrics;
    VLPAR_RETURN_IF_ERROR(vlpar::obs::plot_metrics_png(metrics, out, o));
    fmt::print("{} -> {}\n", metrics, out);
    return vlpar::Status::Ok();
  });
}

// The trainer's own options; every other `--section.key=value` is a config override (train_config.hpp).
struct TrainArgs {
  std::string config, batches, eval_batches;
  std::vector<std::string> overrides;
};

vlpar::cli::Parser train_parser(TrainArgs& a) {
  vlpar::cli::Parser p("qwen3vl-train",
                       "train Qwen3-VL (under mpirun: tp x dp x pp); `qwen3vl-train plot --help` for plots");
  p.add("config", &a.config, "TOML config (default: the defaults); then --section.key=value overrides");
  p.add("batches", &a.batches, "pre-packed batch files, comma-separated (default: the dataset of the config)");
  p.add("eval-batches", &a.eval_batches, "held-out pre-packed batch files for training.eval_interval, "
        "comma-separated (default: data.eval at data.eval_split)");
  p.collect_rest(&a.overrides, true);
  return p;
}

vlpar::Status train(const TrainArgs& args, vlpar::comm::Communicator* world) {
  const std::string& config = args.config;
  const std::string& batches = args.batches;
  const std::vector<std::string>& overrides = args.overrides;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::TrainConfig cfg, qwen3vl::load_train_config(config, overrides));
  const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
  VLPAR_ASSIGN_OR_RETURN(const qwen3vl::DataRank data, qwen3vl::data_rank_of(cfg, rank, size));
  const int dp_rank = data.rank, dp_size = data.size;
  // Pre-packed files when given, else the config's dataset (the held-out one only when evaluation is on).
  using SourcePtr = std::unique_ptr<qwen3vl::BatchSource>;
  auto make_source = [&](const std::string& files, bool held_out) -> vlpar::Result<SourcePtr> {
    if (!files.empty()) {
      VLPAR_ASSIGN_OR_RETURN(const qwen3vl::Config mc, qwen3vl::model_config_of(cfg.model));
      VLPAR_ASSIGN_OR_RETURN(auto f, qwen3vl::FileBatchSource::create(split_list(files), mc.mrope_desc(), dp_rank,
                                                                      dp_size));
      return SourcePtr(std::move(f));
    }
    return qwen3vl::make_dataset_source(cfg, dp_rank, dp_size, held_out);
  };
  // Only the ranks that read data build a source (with pipeline stages: pipeline rank 0; the others receive).
  SourcePtr source, held_out;
  if (data.loads) {
    VLPAR_ASSIGN_OR_RETURN(source, make_source(batches, false));
  }
  if (data.loads && cfg.training.eval_interval > 0) {
    VLPAR_ASSIGN_OR_RETURN(held_out, make_source(args.eval_batches, true));
  }
  VLPAR_ASSIGN_OR_RETURN(std::unique_ptr<qwen3vl::Trainer> trainer,
                         qwen3vl::Trainer::create(cfg, world, std::move(source), std::move(held_out)));
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::TrainSummary s, trainer->run());
  if (rank == 0) {
    fmt::print("trained steps {}..{} in {:.1f} s ({} skipped); checkpoint {}; metrics {}/metrics.jsonl, plot "
               "{}/plot.png, trace {}/trace.json, TensorBoard {}/tb\n",
               s.first_step, trainer->step(), s.seconds, s.skipped_steps, s.last_checkpoint, cfg.metrics.dir,
               cfg.metrics.dir, cfg.metrics.dir, cfg.metrics.dir);
  }
  return vlpar::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "plot") return plot(argc - 1, argv + 1);
  // Under mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE) the ranks form the world; otherwise one process, no MPI.
  const char* ws = std::getenv("OMPI_COMM_WORLD_SIZE");
  std::optional<vlpar::comm::MpiSession> session;
  std::unique_ptr<vlpar::comm::Communicator> world;
  if (ws != nullptr && std::atoi(ws) > 1) {
    auto sess = vlpar::comm::MpiSession::init(&argc, &argv);
    if (!sess.ok()) {
      fmt::print(stderr, "qwen3vl-train: {}\n", sess.status().message());
      return 1;
    }
    session.emplace(std::move(sess).value());
    auto w = session->world();
    if (!w.ok()) vlpar::comm::MpiSession::abort_job(w.status());
    world = std::move(w).value();
  }
  TrainArgs args;
  vlpar::cli::Parser p = train_parser(args);
  vlpar::Status s = p.parse(argc, argv);
  if (s.ok() && p.help_requested()) {
    if (!world || world->rank() == 0) fmt::print("{}", p.usage());
    return 0;
  }
  if (s.ok()) s = train(args, world.get());
  if (!s.ok()) {
    fmt::print(stderr, "qwen3vl-train: {}\n", s.message());
    if (world) vlpar::comm::MpiSession::abort_job(s);
    return 1;
  }
  return 0;
}
