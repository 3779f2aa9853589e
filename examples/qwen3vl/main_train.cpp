// qwen3vl-train: trains Qwen3-VL (trainer.hpp) from a TOML config with --section.key=value overrides.
//   qwen3vl-train [--config train.toml] [--batches a.safetensors,b.safetensors,...] [--section.key=value ...]
//   qwen3vl-train plot --metrics runs/x/metrics.jsonl --out plot.png
// Data: pre-packed batch files (--batches, the batch_io.hpp format), or the dataset in data.train through the data
// pipeline. Several processes: mpirun -np N qwen3vl-train ... (world = parallel.tp x dp). Exit status 0 on success,
// 1 with a one-line error (a rank's error aborts the job).
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint_model.hpp"
#include "data_source.hpp"
#include "trainer.hpp"
#include "vlpar/comm/mpi_communicator.hpp"
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

vlpar::Status plot(int argc, char** argv) {
  std::string metrics, out;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--metrics") metrics = argv[i + 1];
    else if (a == "--out") out = argv[i + 1];
    else return VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument, "plot: unknown argument '{}'", a);
  }
  VLPAR_CHECK(!metrics.empty() && !out.empty(), "usage: qwen3vl-train plot --metrics metrics.jsonl --out plot.png");
  vlpar::obs::PlotOptions o;
  o.title = metrics;
  VLPAR_RETURN_IF_ERROR(vlpar::obs::plot_metrics_png(metrics, out, o));
  fmt::print("{} -> {}\n", metrics, out);
  return vlpar::Status::Ok();
}

vlpar::Status train(int argc, char** argv, vlpar::comm::Communicator* world) {
  std::string config, batches;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a.starts_with("--config=")) config = a.substr(9);
    else if (a == "--batches" && i + 1 < argc) batches = argv[++i];
    else if (a.starts_with("--batches=")) batches = a.substr(10);
    else overrides.push_back(a);
  }
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::TrainConfig cfg, qwen3vl::load_train_config(config, overrides));
  const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
  const int dp_rank = rank / cfg.parallel.tp, dp_size = size / cfg.parallel.tp;
  std::unique_ptr<qwen3vl::BatchSource> source;
  if (!batches.empty()) {
    VLPAR_ASSIGN_OR_RETURN(const qwen3vl::Config mc, qwen3vl::model_config_of(cfg.model));
    VLPAR_ASSIGN_OR_RETURN(auto files,
                           qwen3vl::FileBatchSource::create(split_list(batches), mc.mrope_desc(), dp_rank, dp_size));
    source = std::move(files);
  } else {
    VLPAR_ASSIGN_OR_RETURN(source, qwen3vl::make_dataset_source(cfg, dp_rank, dp_size));
  }
  VLPAR_ASSIGN_OR_RETURN(std::unique_ptr<qwen3vl::Trainer> trainer, qwen3vl::Trainer::create(cfg, world, std::move(source)));
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
  if (argc > 1 && std::string(argv[1]) == "plot") {
    vlpar::Status s = plot(argc, argv);
    if (!s.ok()) fmt::print(stderr, "qwen3vl-train plot: {}\n", s.message());
    return s.ok() ? 0 : 1;
  }
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
  vlpar::Status s = train(argc, argv, world.get());
  if (!s.ok()) {
    fmt::print(stderr, "qwen3vl-train: {}\n", s.message());
    if (world) vlpar::comm::MpiSession::abort_job(s);
    return 1;
  }
  return 0;
}
