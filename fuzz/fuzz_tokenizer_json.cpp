// libFuzzer target: Tokenizer::from_json over arbitrary text (tokenizer.json: BPE model, vocab, merges, added
// tokens, pre-tokenizer regexes, normalizer), then, when it loads, an encode of a fixed mixed-script text.
#include <cstdint>
#include <string_view>

#include "fuzz_util.hpp"
#include "vlpar/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = vlpar::data::Tokenizer::from_json(json, "fuzz");
  if (!tokenizer.ok()) return 0;
  auto ids = tokenizer.value().encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 <|im_start|>x");
  if (ids.ok()) (void)tokenizer.value().decode_bytes(ids.value());
  return 0;
}
