// libFuzzer target: a checkpoint's meta.json (the commit marker and global index: step, world size, files,
// tensors with their shard pieces) read by read_checkpoint_info and then loaded into one small destination
// tensor, as a resume would. The directory lives under /dev/shm, one per fuzzing process.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir =
      std::filesystem::path("/dev/shm") / ("vlpar-fuzz-ckpt-" + std::to_string(::getpid())) / "step-1";
  static const bool made = std::filesystem::create_directories(dir) || std::filesystem::is_directory(dir);
  if (!made) std::abort();
  {
    std::ofstream meta(dir / "meta.json", std::ios::binary | std::ios::trunc);
    meta.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto info = vlpar::io::read_checkpoint_info(dir.string());
  if (!info.ok()) return 0;
  vlpar::Allocator alloc(0);
  auto dst = vlpar::Tensor::zeros(alloc, vlpar::Shape{4, 3}, vlpar::DType::kF32);
  if (!dst.ok()) std::abort();
  const vlpar::io::CheckpointTensor tensors[] = {vlpar::io::replicated_tensor("w", dst.value().view())};
  std::string user;
  (void)vlpar::io::load_checkpoint(dir.string(), tensors, &user);  // rank files are absent: a named error
  return 0;
}
