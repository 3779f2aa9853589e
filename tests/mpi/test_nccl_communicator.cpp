// The NCCL communicator on CUDA tensors (CUDA builds only): all_reduce (f32, bf16, sum, max), all_gather
// (out-of-place and in-place), reduce_scatter, broadcast, all_to_all with uneven and zero counts, a send/recv ring,
// sub-groups from split, and the named error for a CPU tensor. Rank-encoded payloads as in test_collectives.cpp.
// Every test skips ("no CUDA device") on machines without a GPU, or with fewer GPUs than ranks on the node.
// Run: ctest --preset cuda -R test_nccl_communicator   (mpirun -np 1 / -np 2 ./build/cuda/tests/test_nccl_communicator)
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/comm/nccl_communicator.hpp"
#include "vlpar/core/device.hpp"

namespace vlpar::test {
namespace {

using comm::ReduceOp;

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lr = comm::local_rank(MPI_COMM_WORLD);
    ASSERT_TRUE(lr.ok()) << lr.status().to_string();
    // Decide on every rank alike (the device count is a node fact), so either all ranks skip or none does.
    if (cuda_device_count() < lr->size) GTEST_SKIP() << "no CUDA device (or fewer than the ranks on this node)";
    auto c = comm::NcclCommunicator::create(MPI_COMM_WORLD, test_options("nccl"));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    comm_ = std::move(c).value();
    rank_ = comm_->rank();
    n_ = comm_->size();
  }
  /// A CUDA tensor holding host values f(i), and a way back.
  Tensor to_device(const Buf& host) {
    Tensor d = Tensor::empty(alloc_, host.view.shape, host.view.dtype, Device::cuda(comm_->device())).value();
    EXPECT_TRUE(copy_(d.view(), host.view).ok());
    return d;
  }
  Buf to_host(const TensorView& d) {
    Buf h = make_buf(alloc_, d.shape, d.dtype);
    EXPECT_TRUE(copy_(h.view, d).ok());
    return h;
  }
  Allocator alloc_;
  std::unique_ptr<comm::NcclCommunicator> comm_;
  int rank_ = 0, n_ = 1;
};

TEST_F(Nccl, AllReduceSumAndMax) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(t), comm::reduce_op_name(op)));
      Buf h = make_buf(alloc_, {33}, t);
      for (int64_t i = 0; i < 33; ++i) set_at(h.view, i, red_in(t, rank_, i));
      Tensor d = to_device(h);
      ASSERT_TRUE(comm_->all_reduce(d.view(), op).ok());
      Buf back = to_host(d.view());
      for (int64_t i = 0; i < 33; ++i) ASSERT_EQ(get_at(back.view, i), red_expected(t, op, n_, i)) << i;
    }
  }
}

TEST_F(Nccl, AllGatherInPlaceAndOutOfPlace) {
  for (bool in_place : {false, true}) {
    Buf h = make_buf(alloc_, {n_ * 8}, DType::kBF16);
    for (int64_t i = 0; i < 8; ++i) set_at(h.view, rank_ * 8 + i, payload(DType::kBF16, rank_, i));
    Tensor out = to_device(h);
    Tensor in = to_device(make_buf(alloc_, {8}, DType::kBF16));
    ASSERT_TRUE(copy_(in.view(), h.view.slice(0, rank_ * 8, rank_ * 8 + 8)).ok());
    TensorView src = in_place ? out.view().slice(0, rank_ * 8, rank_ * 8 + 8) : in.view();
    ASSERT_TRUE(comm_->all_gather(out.view(), src).ok());
    Buf back = to_host(out.view());
    for (int r = 0; r < n_; ++r)
      for (int64_t i = 0; i < 8; ++i) ASSERT_EQ(get_at(back.view, r * 8 + i), payload(DType::kBF16, r, i));
  }
}

TEST_F(Nccl, ReduceScatterAndBroadcast) {
  Buf h = make_buf(alloc_, {n_ * 5}, DType::kF32);
  for (int64_t i = 0; i < n_ * 5; ++i) set_at(h.view, i, red_in(DType::kF32, rank_, i));
  Tensor in = to_device(h);
  Tensor out = to_device(make_buf(alloc_, {5}, DType::kF32));
  ASSERT_TRUE(comm_->reduce_scatter(out.view(), in.view(), ReduceOp::kSum).ok());
  Buf back = to_host(out.view());
  for (int64_t i = 0; i < 5; ++i)
    ASSERT_EQ(get_at(back.view, i), red_expected(DType::kF32, ReduceOp::kSum, n_, rank_ * 5 + i));
  const int root = n_ - 1;
  ASSERT_TRUE(comm_->broadcast(in.view(), root).ok());
  back = to_host(in.view());
  for (int64_t i = 0; i < n_ * 5; ++i) ASSERT_EQ(get_at(back.view, i), red_in(DType::kF32, root, i));
}

TEST_F(Nccl, AllToAllUnevenCounts) {
  std::vector<int64_t> send(static_cast<size_t>(n_)), recv(static_cast<size_t>(n_));
  for (int p = 0; p < n_; ++p) {
    send[size_t(p)] = (rank_ + 2 * p) % 3;
    recv[size_t(p)] = (p + 2 * rank_) % 3;
  }
  const int64_t st = std::accumulate(send.begin(), send.end(), int64_t{0});
  const int64_t rt = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  Buf h = make_buf(alloc_, {st, 2}, DType::kF32);
  int64_t row = 0;
  for (int p = 0; p < n_; ++p)
    for (int64_t k = 0; k < send[size_t(p)]; ++k, ++row)
      for (int64_t c = 0; c < 2; ++c) set_at(h.view, row * 2 + c, rank_ * 1e4 + p * 100 + k * 10 + c);
  Tensor in = to_device(h);
  Tensor out = to_device(make_buf(alloc_, {rt, 2}, DType::kF32));
  ASSERT_TRUE(comm_->all_to_all(out.view(), recv, in.view(), send).ok());
  Buf back = to_host(out.view());
  row = 0;
  for (int p = 0; p < n_; ++p)
    for (int64_t k = 0; k < recv[size_t(p)]; ++k, ++row)
      for (int64_t c = 0; c < 2; ++c) ASSERT_EQ(get_at(back.view, row * 2 + c), p * 1e4 + rank_ * 100 + k * 10 + c);
}

TEST_F(Nccl, SendRecvRingAndSplit) {
  if (n_ >= 2) {
    const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
    Buf h = make_buf(alloc_, {6}, DType::kI64);
    for (int64_t i = 0; i < 6; ++i) set_at(h.view, i, payload(DType::kI64, rank_, i));
    Tensor s = to_device(h);
    Tensor r = to_device(make_buf(alloc_, {6}, DType::kI64));
    auto wr = comm_->irecv(r.view(), prev, 0);
    auto ws = comm_->isend(s.view(), next, 0);
    ASSERT_TRUE(wr.ok() && ws.ok());
    ASSERT_TRUE(ws.value()->wait().ok());
    ASSERT_TRUE(wr.value()->wait().ok());
    Buf back = to_host(r.view());
    for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(get_at(back.view, i), payload(DType::kI64, prev, i));
  }
  auto sub = comm_->split(rank_ % 2, rank_, test_options("parity"));
  ASSERT_TRUE(sub.ok()) << sub.status().to_string();
  EXPECT_EQ(sub.value()->rank(), rank_ / 2);
  EXPECT_TRUE(sub.value()->barrier().ok());
}

TEST_F(Nccl, CpuTensorIsANamedError) {
  Buf h = make_buf(alloc_, {4}, DType::kF32);
  const Status s = comm_->all_reduce(h.view, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fmt::format("all_reduce on group 'nccl' (rank {} of {}): inout is on cpu, the nccl "
                                         "backend takes tensors on cuda:{}",
                                         rank_, n_, comm_->device())),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace vlpar::test
