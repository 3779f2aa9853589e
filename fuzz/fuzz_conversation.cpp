// libFuzzer target: a chat/conversation record (LLaVA "conversations" and "messages" forms, roles, content
// lists, image and video references) parsed from arbitrary JSON, then rendered through the Qwen chat template and
// tokenized with the fixture tokenizer (no media are given: a record naming some must be a named error).
// Tokens and labels must have one entry each.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "fuzz_util.hpp"
#include "vlpar/data/conversation.hpp"
#include "vlpar/data/tokenizer.hpp"

namespace {
const vlpar::data::ConversationBuilder& builder() {
  static const vlpar::data::ConversationBuilder b = [] {
    // non-owning: the tokenizer is fixture_tokenizer()'s static
    const std::shared_ptr<const vlpar::data::Tokenizer> shared(std::shared_ptr<void>(),
                                                               &vlpar::fuzz::fixture_tokenizer());
    auto made = vlpar::data::ConversationBuilder::create(shared, vlpar::data::ConversationOptions{});
    if (!made.ok()) std::abort();
    return std::move(made.value());
  }();
  return b;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto conversation = vlpar::data::parse_conversation(json, "fuzz");
  if (!conversation.ok()) return 0;
  auto sample = builder().tokenize(conversation.value(), {}, {}, "fuzz");
  if (!sample.ok()) return 0;
  if (sample.value().labels.size() != sample.value().input_ids.size()) vlpar::fuzz::violated();
  return 0;
}
