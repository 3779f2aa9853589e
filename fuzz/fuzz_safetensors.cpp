// libFuzzer target: SafetensorsFile::open over arbitrary bytes, then every entry read as f32 (float entries) or
// i64 (integer entries). open() promises that every defect is found up front: after a successful open, reading
// an entry may only fail with a named error (unsupported dtype or conversion), never crash or read past the map.
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vlpar::fuzz::MemFile file(data, size);
  auto opened = vlpar::io::SafetensorsFile::open(file.path());
  if (!opened.ok()) return 0;
  const vlpar::io::SafetensorsFile& st = opened.value();
  for (const vlpar::io::TensorInfo& info : st.tensors()) {
    if (info.end < info.begin || info.end - info.begin > size) vlpar::fuzz::violated();  // validated at open
    if (!info.supported || info.numel > (int64_t{1} << 20)) {
      (void)st.read(info.name, vlpar::TensorView{});  // must be a named error, not a crash
      continue;
    }
    for (vlpar::DType dt : {vlpar::DType::kF32, vlpar::DType::kI64}) {
      vlpar::Allocator alloc(0);
      auto dst = vlpar::Tensor::empty(alloc, info.shape, dt);
      if (!dst.ok()) continue;
      (void)st.read(info.name, dst.value().view());  // a named error is fine (float <-> int)
    }
  }
  return 0;
}
