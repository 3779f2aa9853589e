// Loading a model from a training checkpoint. See checkpoint_model.hpp.
#include "checkpoint_model.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "vlpar/io/checkpoint.hpp"

namespace qwen3vl {

namespace io = vlpar::io;

Result<Config> model_config_of(const ModelSection& m) {
  if (!m.hf_dir.empty()) return load_hf_config(m.hf_dir);
  if (!m.config_json.empty()) return load_hf_config(m.config_json);
  return preset(m.preset);
}

Result<CheckpointModel> load_checkpoint_model(const Context& ctx, const std::string& path, const Freeze& freeze,
                                              Allocator& alloc) {
  io::CheckpointInfo info;
  if (std::filesystem::exists(std::filesystem::path(path) / "meta.json")) {
    VLPAR_ASSIGN_OR_RETURN(info, io::read_checkpoint_info(path));
  } else {
    VLPAR_ASSIGN_OR_RETURN(std::optional<io::CheckpointInfo> latest, io::latest_checkpoint(path));
    VLPAR_CHECK(latest.has_value(), "{}: no committed checkpoint (no step-<N>/meta.json)", path);
    info = *latest;
  }
  const nlohmann::json user = nlohmann::json::parse(info.user_json, nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(user.is_object() && user.contains("config") && user["config"].is_string(),
              "{}: meta.json has no training config (not a qwen3vl-train checkpoint?)", info.dir);
  VLPAR_ASSIGN_OR_RETURN(TrainConfig tc, parse_train_config(user["config"].get<std::string>(), info.dir + "/meta.json"));
  VLPAR_ASSIGN_OR_RETURN(Config mc, model_config_of(tc.model));
  VLPAR_ASSIGN_OR_RETURN(Model model, Model::create(ctx, mc, freeze, std::nullopt, alloc));
  std::vector<io::CheckpointTensor> tensors;
  const vlpar::nn::ParamRegistry& reg = model.registry();
  for (size_t i = 0; i < reg.size(); ++i) tensors.push_back(io::sharded_tensor(reg.entry(i).shard.name, reg.value(i), reg.entry(i).shard));
  VLPAR_RETURN_IF_ERROR(io::load_checkpoint(info.dir, tensors, nullptr));
  return CheckpointModel{info.dir, info.step, std::move(tc), std::move(model)};
}

}  // namespace qwen3vl
