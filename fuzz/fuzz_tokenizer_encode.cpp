// libFuzzer target: the encode path of the Qwen tokenizer (tests/fixtures/tokenizer/tokenizer.json) over
// arbitrary bytes: UTF-8 validation, NFC, added-token split, the pre-tokenizer regex, byte-level BPE.
// Oracle: decode_bytes(encode(s)) is NFC(s), and NFC is idempotent, so encoding the decoded bytes again must give
// the same ids.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.hpp"
#include "vlpar/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vlpar::data::Tokenizer& tok = vlpar::fuzz::fixture_tokenizer();
  auto ids = tok.encode(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!ids.ok()) return 0;  // invalid UTF-8: a named error
  auto text = tok.decode_bytes(ids.value());
  if (!text.ok()) vlpar::fuzz::violated();
  auto again = tok.encode(text.value());
  if (!again.ok() || again.value() != ids.value()) vlpar::fuzz::violated();
  return 0;
}
