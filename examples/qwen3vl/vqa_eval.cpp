// Held-out VQA accuracy by greedy generation. See vqa_eval.hpp.
#include "vqa_eval.hpp"

#include <fmt/core.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "data_source.hpp"
#include "generate.hpp"
#include "vlpar/core/log.hpp"
#include "vlpar/data/sample_stream.hpp"
#include "vlpar/obs/stopwatch.hpp"

namespace qwen3vl {

namespace data = vlpar::data;
using vlpar::DType;
using vlpar::Shape;

bool vqa_correct(const std::vector<int64_t>& generated, const std::vector<int32_t>& reference) {
  return std::equal(generated.begin(), generated.end(), reference.begin(), reference.end());
}

std::string VqaEvalReport::to_string() const {
  std::string s = fmt::format("accuracy {:.3f} ({}/{}) vs chance {:.3f}; {} skipped; {:.1f} s", accuracy(), correct,
                              total, chance, skipped, seconds);
  for (const auto& [type, t] : by_type)
    s += fmt::format("\n  {:<12} accuracy {:.3f} ({}/{}) vs chance {:.3f}", type, t.accuracy(), t.correct, t.total,
                     t.chance());
  for (const std::string& e : examples) s += "\n  e.g. " + e;
  return s;
}

namespace {

// The record's "question_type" ("all" when absent) and its last user turn without the image placeholder.
std::pair<std::string, std::string> describe_record(const data::Sample& sample, const std::string& field) {
  std::pair<std::string, std::string> out{"all", ""};
  for (const data::SampleField& f : sample.fields) {
    if (f.ext != field) continue;
    const nlohmann::json j = nlohmann::json::parse(f.data.begin(), f.data.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) break;
    if (j.contains("question_type") && j["question_type"].is_string()) out.first = j["question_type"].get<std::string>();
    if (j.contains("conversations") && j["conversations"].is_array())
      for (const nlohmann::json& t : j["conversations"])
        if (t.value("from", "") == "human" && t.contains("value") && t["value"].is_string()) out.second = t["value"];
  }
  if (const size_t p = out.second.find("<image>\n"); p != std::string::npos) out.second.erase(p, 8);
  return out;
}

}  // namespace

Result<VqaEvalReport> evaluate_vqa(const Context& ctx, const Model& model, const data::ConversationBuilder& builder,
                                   const VqaEvalOptions& o, Allocator& alloc) {
  const vlpar::obs::Stopwatch watch;
  VLPAR_ASSIGN_OR_RETURN(DatasetShards ds, open_dataset_shards(o.dataset, o.split));
  data::SampleStreamConfig sc;
  sc.shuffle_shards = false;
  sc.num_epochs = 1;
  VLPAR_ASSIGN_OR_RETURN(data::SampleStream stream, data::SampleStream::create(std::move(ds.shards), ds.excludes, sc));
  const int32_t im_end = builder.token_ids().im_end;
  VqaEvalReport report;
  while (o.limit <= 0 || report.total < o.limit) {
    VLPAR_ASSIGN_OR_RETURN(std::optional<data::Sample> sample, stream.next());
    if (!sample) break;
    Result<data::TokenizedSample> built = builder.build(*sample);
    if (!built.ok()) {
      vlpar::log_warn("eval: skipping {}: {}", sample->key, built.status().message());
      ++report.skipped;
      continue;
    }
    const data::TokenizedSample& ts = built.value();
    size_t p = 0;
    while (p < ts.labels.size() && ts.labels[p] == data::kIgnoreLabel) ++p;
    std::vector<int32_t> reference;
    for (size_t i = p; i < ts.labels.size() && ts.labels[i] != data::kIgnoreLabel; ++i) {
      reference.push_back(ts.labels[i]);
      if (ts.labels[i] == im_end) break;
    }
    if (p == 0 || reference.empty()) {
      ++report.skipped;
      continue;
    }
    // The prompt: ids before the first supervised token, with every image of the sample (packed as the
    // trainer's data is, positions included).
    const data::TokenizedSample* one[] = {&ts};
    VLPAR_ASSIGN_OR_RETURN(const data::PackedBatch pack,
                           data::make_packed_batch(one, model.config().mrope_desc(), ts.num_tokens()));
    VLPAR_ASSIGN_OR_RETURN(const data::PackedBatch prompt_pack, data::sample_of_pack(pack, 0, int64_t(p)));
    const Batch prompt = prompt_pack.view();
    const int64_t prompt_len = int64_t(p);
    GenerateOptions go;
    go.max_new_tokens = int64_t(reference.size()) + o.extra_tokens;
    go.eos_ids = {im_end};
    VLPAR_ASSIGN_OR_RETURN(Generator gen, Generator::create(model, prompt_len + go.max_new_tokens, alloc));
    VLPAR_ASSIGN_OR_RETURN(GenerateResult r, gen.generate(ctx, prompt, go));
    const bool ok = vqa_correct(r.tokens, reference);
    const auto [type, question] = describe_record(*sample, builder.options().record_field);
    std::vector<int32_t> answer_ids(reference.begin(), reference.end() - (reference.back() == im_end ? 1 : 0));
    VLPAR_ASSIGN_OR_RETURN(std::string answer, builder.tokenizer().decode(answer_ids));
    VqaTypeScore& t = report.by_type[type];
    ++t.total;
    t.correct += ok;
    ++t.answers[answer];
    ++report.total;
    report.correct += ok;
    if (int64_t(report.examples.size()) < o.examples) {
      const std::vector<int32_t> gen_ids(r.tokens.begin(), r.tokens.end());
      VLPAR_ASSIGN_OR_RETURN(std::string said, builder.tokenizer().decode(gen_ids));
      report.examples.push_back(fmt::format("{} [{}] {} → \"{}\" (reference \"{}\")", sample->key, type, question,
                                            said, answer));
    }
  }
  VLPAR_CHECK(report.total > 0, "eval: split '{}' of {} gave no sample to evaluate ({} skipped)", o.split, o.dataset,
              report.skipped);
  // Mean of the samples' chances: each type's chance weighted by its sample count.
  double chance_sum = 0;
  for (const auto& [type, t] : report.by_type) chance_sum += double(t.total) * t.chance();
  report.chance = chance_sum / double(report.total);
  report.seconds = watch.elapsed_s();
  return report;
}

}  // namespace qwen3vl
