// libFuzzer target: a packed batch file (safetensors with input_ids, labels, cu_seqlens, pixel values, grids)
// read, checked and given MRoPE positions (qwen3vl::load_batch), the path of qwen3vl-forward/-train --batches.
// Grid products and pad counts come from the file: they must never size a write.
#include <cstdint>

#include "batch_io.hpp"
#include "config.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vlpar::data::MropeDesc desc = qwen3vl::preset("2B").value().mrope_desc();
  const vlpar::fuzz::MemFile file(data, size);
  (void)qwen3vl::load_batch(file.path(), desc);
  return 0;
}
