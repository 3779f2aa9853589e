#pragma once
// Helpers for the multi-process tests: a world communicator per test (no globals), buffers at a deliberate
// element offset (misaligned views), and element access in fp64 for every dtype.
#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::test {

/// Every test group gets a finite watchdog, so a broken collective fails the test instead of hanging ctest.
inline comm::CommOptions test_options(std::string name = "world") {
  return comm::CommOptions{std::move(name), std::chrono::seconds(20)};
}

/// A fresh dup of MPI_COMM_WORLD (collective: every rank calls it in the same test).
inline std::unique_ptr<comm::Communicator> world_comm(std::string name = "world") {
  auto c = comm::MpiCommunicator::create(MPI_COMM_WORLD, test_options(std::move(name)));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::unique_ptr<comm::Communicator>(std::move(c).value()) : nullptr;
}

/// A fresh directory under the temp dir named `prefix` + rank 0's pid, the same path on every rank (collective;
/// rank 0 removes what a crashed run left there). The caller removes it.
inline std::string shared_temp_dir(comm::Communicator& world, const std::string& prefix) {
  int64_t pid = ::getpid();
  EXPECT_TRUE(world.broadcast(TensorView(&pid, DType::kI64, Shape{1}), 0).ok());
  const std::string dir = (std::filesystem::temp_directory_path() / (prefix + std::to_string(pid))).string();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  EXPECT_TRUE(world.barrier().ok());
  return dir;
}

/// A view of `shape` that starts `offset` elements into its own allocation (offset 1 misaligns it).
struct Buf {
  Tensor storage;
  TensorView view;
};
inline Buf make_buf(Allocator& alloc, Shape shape, DType dtype, int64_t offset = 0) {
  Buf b;
  b.storage = Tensor::zeros(alloc, {shape.numel() + offset}, dtype).value();
  b.view = TensorView(static_cast<char*>(b.storage.view().data) + offset * int64_t(dtype_size(dtype)), dtype, shape);
  return b;
}

inline void set_at(const TensorView& v, int64_t i, double x) {
  switch (v.dtype) {
    case DType::kF32: v.ptr<float>()[i] = float(x); break;
    case DType::kBF16: v.ptr<bf16>()[i] = float_to_bf16(float(x)); break;
    case DType::kF16: v.ptr<f16>()[i] = float_to_f16(float(x)); break;
    case DType::kI32: v.ptr<int32_t>()[i] = int32_t(x); break;
    case DType::kI64: v.ptr<int64_t>()[i] = int64_t(x); break;
    case DType::kF64: v.ptr<double>()[i] = x; break;
  }
}
inline double get_at(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kF32: return v.ptr<float>()[i];
    case DType::kBF16: return bf16_to_float(v.ptr<bf16>()[i]);
    case DType::kF16: return f16_to_float(v.ptr<f16>()[i]);
    case DType::kI32: return v.ptr<int32_t>()[i];
    case DType::kI64: return double(v.ptr<int64_t>()[i]);
    case DType::kF64: return v.ptr<double>()[i];
  }
  return 0;
}

/// Rank-encoded payload (STYLE §12) exact in every dtype: element `i` of rank `r`'s buffer.
/// 16-bit floats hold 8 (bf16) or 11 (f16) significant bits, so they get a compact code: r*64 + i%64 (< 256).
inline double payload(DType t, int r, int64_t i) {
  if (t == DType::kBF16 || t == DType::kF16) return double(r * 64 + i % 64);
  return double(r) * 100000.0 + double(i);
}

inline bool is16(DType t) { return t == DType::kBF16 || t == DType::kF16; }

/// Reduction payload, exact for every dtype and any order of summation: rank r contributes
/// (r+1)·1000 + i (wide dtypes) or (r+1)·2^(i mod 8) (16-bit floats: few significant bits).
inline double red_in(DType t, int r, int64_t i) {
  if (is16(t)) return double(r + 1) * double(1 << (i % 8));
  return double(r + 1) * 1000.0 + double(i);
}
/// Sum or max of red_in over ranks 0..n-1.
inline double red_expected(DType t, comm::ReduceOp op, int n, int64_t i) {
  double s = 0, m = -1e300;
  for (int r = 0; r < n; ++r) {
    s += red_in(t, r, i);
    m = std::max(m, red_in(t, r, i));
  }
  return op == comm::ReduceOp::kSum ? s : m;
}

}  // namespace vlpar::test
