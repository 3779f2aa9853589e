// libFuzzer target: the trainer's TOML config (toml++ parse, then vlpar's typed fields, ranges and cross-field
// checks) from arbitrary text.
#include <cstdint>
#include <string_view>

#include "train_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)qwen3vl::parse_train_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  return 0;
}
