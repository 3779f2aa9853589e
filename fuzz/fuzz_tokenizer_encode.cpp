// libFuzzer target: the encode path of the Qwen tokenizer (tests/fixtures/tokenizer/tokenizer.json) over
// arbitrary bytes: UTF-8 validation, NFC, added-token split, the pre-tokenizer regex, byte-level BPE.
// Oracle: decode_bytes(encode(s)) is NFC(s), and NFC is idempotent, so encoding the decoded bytes again must give
// the same ids.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.hpp"
#include "vlpar/data/tokenizer.hpp"

namespace {
const vlpar::data::Tokenizer& qwen_tokenizer() {
  static const vlpar::data::Tokenizer tok = [] {
    auto t = vlpar::data::Tokenizer::from_file(VLPAR_FIXTURES_DIR "/tokenizer/tokenizer.json");
    if (!t.ok()) std::abort();
    return std::move(t).value();
  }();
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vlpar::data::Tokenizer& tok = qwen_tokenizer();
  auto ids = tok.encode(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!ids.ok()) return 0;  // invalid UTF-8: a named error
  auto text = tok.decode_bytes(ids.value());
  if (!text.ok()) vlpar::fuzz::violated();
  auto again = tok.encode(text.value());
  if (!again.ok() || again.value() != ids.value()) vlpar::fuzz::violated();
  return 0;
}
