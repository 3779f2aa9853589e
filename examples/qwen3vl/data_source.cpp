// The dataset-backed BatchSource. See data_source.hpp.
#include "data_source.hpp"

namespace qwen3vl {

Result<std::unique_ptr<BatchSource>> make_dataset_source(const TrainConfig& cfg, int dp_rank, int dp_size) {
  (void)dp_rank;
  (void)dp_size;
  VLPAR_CHECK(!cfg.data.train.empty(), "no training data: set data.train to a dataset or pass --batches files");
  return VLPAR_STATUS(vlpar::StatusCode::kNotSupported,
                      "data.train = {}: the dataset pipeline (vlpar/data/loader.hpp) is not wired into the trainer in "
                      "this build; pass pre-packed --batches files",
                      cfg.data.train);
}

}  // namespace qwen3vl
