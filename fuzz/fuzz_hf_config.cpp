// libFuzzer target: a Hugging Face config.json of Qwen3-VL (dense or MoE; text_config, vision_config, rope
// scaling, token ids) parsed and validated from arbitrary JSON: sizes are bounded before anything is allocated.
#include <cstdint>
#include <string_view>

#include "config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)qwen3vl::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  return 0;
}
