// The dataset-backed BatchSource. See data_source.hpp.
#include "data_source.hpp"

#include <algorithm>
#include <deque>
#include <filesystem>

#include <fmt/core.h>

#include "vlpar/data/energon.hpp"
#include "vlpar/data/loader.hpp"
#include "vlpar/data/pack_exchange.hpp"

namespace qwen3vl {

namespace data = vlpar::data;
namespace fs = std::filesystem;

Result<std::shared_ptr<const data::ConversationBuilder>> make_conversation_builder(const DataSection& d) {
  VLPAR_CHECK(!d.tokenizer.empty(), "data.tokenizer is empty: the data pipeline needs a tokenizer.json");
  VLPAR_ASSIGN_OR_RETURN(data::Tokenizer tok, data::Tokenizer::from_file(d.tokenizer));
  data::ConversationOptions o;
  o.label_mode = d.mode == "caption" ? data::LabelMode::kAllText : data::LabelMode::kAssistant;
  o.image.min_pixels = d.min_pixels;
  o.image.max_pixels = d.max_pixels;
  VLPAR_ASSIGN_OR_RETURN(data::ConversationBuilder b,
                         data::ConversationBuilder::create(std::make_shared<const data::Tokenizer>(std::move(tok)), o));
  return std::make_shared<const data::ConversationBuilder>(std::move(b));
}

Result<DatasetShards> open_dataset_shards(const std::string& root, const std::string& split) {
  DatasetShards out;
  std::error_code ec;
  if (fs::is_directory(fs::path(root) / ".nv-meta", ec)) {
    data::EnergonOpenOptions eo;
    eo.split_part = split;
    VLPAR_ASSIGN_OR_RETURN(data::EnergonDataset ds, data::open_energon_dataset(root, eo));
    for (const data::EnergonShard& s : ds.shards) out.shards.push_back({s.name, s.path, s.offsets});
    out.excludes = ds.sample_excludes;
    out.kind = fmt::format("energon split '{}'", split);
    return out;
  }
  std::vector<std::string> tars;
  if (fs::is_directory(root, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(root, ec))
      if (e.is_regular_file() && e.path().extension() == ".tar") tars.push_back(e.path().string());
    std::sort(tars.begin(), tars.end());
    VLPAR_CHECK(!tars.empty(), "dataset {}: no .nv-meta/ (Energon) and no *.tar shards in the directory", root);
  } else {
    VLPAR_ASSIGN_OR_RETURN(tars, data::brace_expand(root));
  }
  VLPAR_ASSIGN_OR_RETURN(out.shards, data::index_webdataset_shards(tars));
  out.kind = "webdataset";
  return out;
}

namespace {

class DatasetBatchSource final : public BatchSource {
 public:
  static Result<std::unique_ptr<BatchSource>> create(const TrainConfig& cfg, int dp_rank, int dp_size,
                                                     bool held_out) {
    const DataSection& d = cfg.data;
    const std::string& root = held_out && !d.eval.empty() ? d.eval : d.train;
    const std::string& split = held_out ? d.eval_split : d.split;
    VLPAR_CHECK(!root.empty(), "no {} data: set data.{} to a dataset or pass --{} files",
                held_out ? "held-out" : "training", held_out ? "eval (or data.train)" : "train",
                held_out ? "eval-batches" : "batches");
    VLPAR_ASSIGN_OR_RETURN(auto builder, make_conversation_builder(d));
    VLPAR_ASSIGN_OR_RETURN(DatasetShards ds, open_dataset_shards(root, split));
    int64_t samples = 0;
    for (const data::StreamShard& s : ds.shards) samples += s.num_samples();
    const size_t num_shards = ds.shards.size();
    data::SampleStreamConfig sc = d.stream;
    sc.dp_rank = dp_rank;
    sc.dp_size = dp_size;
    sc.num_epochs = 0;  // endless: training.steps decides when to stop
    VLPAR_ASSIGN_OR_RETURN(data::SampleStream stream, data::SampleStream::create(std::move(ds.shards), ds.excludes, sc));
    const data::LoaderConfig& lc = d.loader;
    VLPAR_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> loader,
                           data::Loader::create(std::make_unique<data::StreamSampleSource>(std::move(stream)),
                                                std::move(builder), lc));
    auto src = std::unique_ptr<DatasetBatchSource>(new DatasetBatchSource());
    src->loader_ = std::move(loader);
    src->balance_ = d.balance_vision && !held_out;  // each rank evaluates its own share as it comes
    src->describe_ = fmt::format("{} ({}, {} samples in {} shards; dp rank {} of {}; {} workers, budgets {} tokens / "
                                 "{} patches)",
                                 root, ds.kind, samples, num_shards, dp_rank, dp_size, d.loader.num_workers,
                                 lc.packing.max_tokens, lc.packing.max_patches);
    return std::unique_ptr<BatchSource>(std::move(src));
  }

  Result<MicroBatch> next() override {
    MicroBatch mb;
    VLPAR_ASSIGN_OR_RETURN(mb.pack, next_pack());
    mb.real_tokens = mb.pack.real_tokens;
    mb.images = mb.pack.num_images + mb.pack.num_videos;
    return mb;
  }
  Result<std::string> state() const override {
    VLPAR_CHECK(group_.empty(), "data source state asked for in the middle of a balanced step ({} packs pending)",
                group_.size());
    return loader_->save_state();
  }
  Status restore(std::string_view state) override {
    group_.clear();
    return loader_->restore(state);
  }
  std::string describe() const override { return describe_; }
  std::string summary() const override {
    std::string s = loader_->summary();
    if (balanced_steps_ > 0 && sum_before_ > 0)
      s += fmt::format("\nvision balance over {} steps (dp {}): the most loaded rank's vision cost {:.3f} of what it "
                       "was without balancing (ideal {:.3f}); this rank sent {} and received {} packs",
                       balanced_steps_, dp_->size(), sum_after_ / sum_before_, sum_mean_ / sum_before_, sent_,
                       received_);
    return s;
  }
  Status set_data_parallel(vlpar::comm::Communicator* dp, int micro_batches_per_step,
                           const data::VisionCostModel& vision_cost) override {
    dp_ = balance_ && dp != nullptr && dp->size() > 1 ? dp : nullptr;
    per_step_ = micro_batches_per_step;
    cost_model_ = vision_cost;
    return Status::Ok();
  }

 private:
  DatasetBatchSource() = default;

  Result<data::PackedBatch> loader_pack() {
    VLPAR_ASSIGN_OR_RETURN(std::optional<data::PackedBatch> pack, loader_->next());
    VLPAR_CHECK(pack.has_value(), "the data pipeline ended ({})", loader_->summary());
    return std::move(*pack);
  }
  // Without balancing: the loader's next pack. With it: a step's packs are fetched and re-dealt over the dp
  // ranks (pack_exchange.hpp) at the step's first micro-batch, then handed out in order.
  Result<data::PackedBatch> next_pack() {
    if (dp_ == nullptr) return loader_pack();
    if (group_.empty()) {
      std::vector<data::PackedBatch> mine;
      for (int i = 0; i < per_step_; ++i) {
        VLPAR_ASSIGN_OR_RETURN(data::PackedBatch p, loader_pack());
        mine.push_back(std::move(p));
      }
      data::PackBalanceReport rep;
      VLPAR_ASSIGN_OR_RETURN(std::vector<data::PackedBatch> dealt,
                             data::exchange_balanced_packs(dp_, std::move(mine), cost_model_, &rep));
      for (data::PackedBatch& p : dealt) group_.push_back(std::move(p));
      ++balanced_steps_;
      sum_before_ += rep.max_rank_cost_before;
      sum_after_ += rep.max_rank_cost_after;
      sum_mean_ += rep.mean_rank_cost;
      sent_ += rep.packs_sent;
      received_ += rep.packs_received;
    }
    data::PackedBatch p = std::move(group_.front());
    group_.pop_front();
    return p;
  }

  std::unique_ptr<data::Loader> loader_;
  std::string describe_;
  bool balance_ = true;
  data::VisionCostModel cost_model_;        // from the trainer (the model's vision width)
  vlpar::comm::Communicator* dp_ = nullptr;  // set when balancing across > 1 dp ranks
  int per_step_ = 1;
  std::deque<data::PackedBatch> group_;      // this step's re-dealt packs not yet handed out
  int64_t balanced_steps_ = 0, sent_ = 0, received_ = 0;
  double sum_before_ = 0, sum_after_ = 0, sum_mean_ = 0;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> make_dataset_source(const TrainConfig& cfg, int dp_rank, int dp_size,
                                                         bool held_out) {
  return DatasetBatchSource::create(cfg, dp_rank, dp_size, held_out);
}

}  // namespace qwen3vl
