// qwen3vl-forward, run as a program, on tests/fixtures/qwen3vl/unseen_dense — a config that no test builds by hand
// (tied LM head, 3:1 GQA, head_dim 24, vision head_dim 20, patch 2, deepstack [1, 3]) made by tools/golden with
// transformers 4.57.1: logits within 1e-5 and every gradient within 1e-4 of transformers' (relative to each
// tensor's largest value; test_parity.cpp derives these bounds), loss to 1e-5; bad arguments exit 1 with a message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "model_test_util.hpp"
#include "vlpar/io/safetensors.hpp"

namespace qwen3vl {
namespace {

namespace io = vlpar::io;
using vlpar::DType;

double rel(const io::SafetensorsFile& got, const io::SafetensorsFile& want, const std::string& name) {
  const io::TensorInfo* w = want.find(name);
  const io::TensorInfo* g = got.find(name);
  EXPECT_TRUE(w && g) << name;
  if (!w || !g) return INFINITY;
  EXPECT_EQ(w->dims, g->dims) << name;
  Allocator alloc;
  Tensor a = Tensor::empty(alloc, w->shape, DType::kF32).value(), b = Tensor::empty(alloc, g->shape, DType::kF32).value();
  EXPECT_TRUE(want.read(name, a).ok() && got.read(name, b).ok());
  return test::rel_diff(b, a);
}

int run(const std::string& args) { return std::system((std::string(QWEN3VL_FORWARD_BIN) + " " + args).c_str()); }

TEST(ForwardCli, ReproducesTransformersOnAnUnseenConfig) {
  const std::string dir = test::fixture("unseen_dense");
  const std::string out = (std::filesystem::temp_directory_path() / ("vlpar_cli_" + std::to_string(::getpid()) +
                                                                     ".safetensors")).string();
  ASSERT_EQ(run("--model " + dir + " --input " + dir + "/batch.safetensors --output " + out + " --grads --threads 2"), 0);
  Result<io::SafetensorsFile> got = io::SafetensorsFile::open(out);
  Result<io::SafetensorsFile> want = io::SafetensorsFile::open(dir + "/expected.safetensors");
  ASSERT_TRUE(got.ok() && want.ok());
  EXPECT_LE(rel(got.value(), want.value(), "logits"), 1e-5);
  EXPECT_LE(rel(got.value(), want.value(), "loss"), 1e-5);
  int grads = 0;
  for (const io::TensorInfo& t : want.value().tensors()) {
    if (!t.name.starts_with("grad.")) continue;
    ++grads;
    EXPECT_LE(rel(got.value(), want.value(), t.name), 1e-4) << t.name;
  }
  EXPECT_GT(grads, 50);
  Allocator alloc;
  Tensor pos = Tensor::empty(alloc, got.value().find("position_ids")->shape, DType::kI64).value();
  Tensor wpos = Tensor::empty(alloc, pos.view().shape, DType::kI64).value();
  ASSERT_TRUE(got.value().read("position_ids", pos).ok() && want.value().read("position_ids", wpos).ok());
  EXPECT_TRUE(test::bitwise(pos, wpos));
  std::filesystem::remove(out);
}

TEST(ForwardCli, BadArgumentsAndMissingFilesExitWithOne) {
  EXPECT_NE(run("--model /nonexistent --input x --output y 2> /dev/null"), 0);
  EXPECT_NE(run("--frobnicate 2> /dev/null"), 0);
  const std::string dir = test::fixture("dense");
  EXPECT_NE(run("--model " + dir + " --input " + dir + "/config.json --output /tmp/x 2> /dev/null"), 0);
}

}  // namespace
}  // namespace qwen3vl
