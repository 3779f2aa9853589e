// Collectives and point-to-point of the MPI communicator, with rank-encoded payloads (STYLE §12): every element
// says which rank and position it came from, so a wrong reduce op, order, displacement or peer shows up as a
// wrong value at a known place. Covers all_reduce (every dtype, sum and max, bf16 rounded once), all_gather and
// reduce_scatter (out-of-place, in-place, misaligned), broadcast from every root, all_to_all with uneven and zero
// row counts, overlapped non-blocking ops, sub-groups from split, a send/recv ring, a receive of the wrong length
// and the named argument errors.
// Run: ctest --preset cpu -R test_collectives   (mpirun -np 2 and -np 4 ./build/cpu/tests/test_collectives)
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/comm/mpi_communicator.hpp"

namespace vlpar::test {
namespace {

using comm::ReduceOp;

constexpr DType kAllDtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64};
constexpr DType kMoveDtypes[] = {DType::kF32, DType::kBF16, DType::kI64};

class Collectives : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = world_comm("world");
    ASSERT_NE(comm_, nullptr);
    rank_ = comm_->rank();
    n_ = comm_->size();
  }
  Allocator alloc_;
  std::unique_ptr<comm::Communicator> comm_;
  int rank_ = 0, n_ = 1;
};

TEST_F(Collectives, AllReduceEveryDtypeSumAndMax) {
  const int64_t count = 37;
  for (DType t : kAllDtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(fmt::format("{} {} offset {}", dtype_name(t), comm::reduce_op_name(op), offset));
        Buf b = make_buf(alloc_, {count}, t, offset);
        for (int64_t i = 0; i < count; ++i) set_at(b.view, i, red_in(t, rank_, i));
        ASSERT_TRUE(comm_->all_reduce(b.view, op).ok());
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(get_at(b.view, i), red_expected(t, op, n_, i)) << "element " << i;
      }
    }
  }
}

TEST_F(Collectives, AllReduceBf16AccumulatesInF32AndRoundsOnce) {
  // Rank 0 holds 256, every other rank 1. In f32 the sum is 256 + (n-1), rounded once to bf16 (n=4: 259 -> 260).
  // Summing in bf16 would round after each add: 256 + 1 = 257 -> 256 (tie to even), and stay at 256.
  Buf b = make_buf(alloc_, {4}, DType::kBF16);
  for (int64_t i = 0; i < 4; ++i) set_at(b.view, i, rank_ == 0 ? 256.0 : 1.0);
  ASSERT_TRUE(comm_->all_reduce(b.view, ReduceOp::kSum).ok());
  const double want = bf16_to_float(float_to_bf16(float(256 + n_ - 1)));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(get_at(b.view, i), want);
}

TEST_F(Collectives, AllGatherOutOfPlaceInPlaceMisaligned) {
  const Shape in_shape{3, 5};
  const int64_t per = in_shape.numel();
  for (DType t : kMoveDtypes) {
    for (int64_t offset : {0, 1}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(fmt::format("{} offset {} in_place {}", dtype_name(t), offset, in_place));
        Buf out = make_buf(alloc_, {n_ * in_shape[0], in_shape[1]}, t, offset);
        Buf in = make_buf(alloc_, in_shape, t, offset);
        TensorView src = in_place ? out.view.slice(0, rank_ * in_shape[0], (rank_ + 1) * in_shape[0]) : in.view;
        for (int64_t i = 0; i < per; ++i) set_at(src, i, payload(t, rank_, i));
        ASSERT_TRUE(comm_->all_gather(out.view, src).ok());
        for (int r = 0; r < n_; ++r)
          for (int64_t i = 0; i < per; ++i)
            ASSERT_EQ(get_at(out.view, r * per + i), payload(t, r, i)) << "block of rank " << r << ", element " << i;
      }
    }
  }
}

TEST_F(Collectives, ReduceScatterOutOfPlaceInPlaceMisaligned) {
  const int64_t per = 6;
  for (DType t : kMoveDtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t offset : {0, 1}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} offset {} in_place {}", dtype_name(t), comm::reduce_op_name(op), offset,
                                   in_place));
          Buf in = make_buf(alloc_, {n_ * per}, t, offset);
          Buf out = make_buf(alloc_, {per}, t, offset);
          for (int64_t i = 0; i < n_ * per; ++i) set_at(in.view, i, red_in(t, rank_, i));
          TensorView dst = in_place ? in.view.slice(0, rank_ * per, (rank_ + 1) * per) : out.view;
          ASSERT_TRUE(comm_->reduce_scatter(dst, in.view, op).ok());
          for (int64_t i = 0; i < per; ++i)
            ASSERT_EQ(get_at(dst, i), red_expected(t, op, n_, rank_ * per + i)) << "element " << i;
        }
      }
    }
  }
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  for (DType t : kMoveDtypes) {
    for (int root = 0; root < n_; ++root) {
      SCOPED_TRACE(fmt::format("{} root {}", dtype_name(t), root));
      Buf b = make_buf(alloc_, {2, 9}, t, 1);
      for (int64_t i = 0; i < 18; ++i) set_at(b.view, i, payload(t, rank_, i));
      ASSERT_TRUE(comm_->broadcast(b.view, root).ok());
      for (int64_t i = 0; i < 18; ++i) ASSERT_EQ(get_at(b.view, i), payload(t, root, i)) << "element " << i;
    }
  }
}

/// Rows rank `src` sends to rank `dst`: uneven, and zero for some pairs (including to itself for some ranks).
int64_t a2a_rows(int src, int dst) { return (src + 2 * dst) % 3; }
/// Value of column c of row k that src sends to dst: encodes (src, dst, k, c); < 256 for the 16-bit code.
double a2a_value(DType t, int src, int dst, int64_t k, int64_t c) {
  if (is16(t)) return double(src * 64 + dst * 16 + k * 4 + c);
  return double(src) * 1e6 + double(dst) * 1e4 + double(k) * 100 + double(c);
}

TEST_F(Collectives, AllToAllUnevenCountsWithZeroRows) {
  const int64_t cols = 3;
  std::vector<int64_t> send(static_cast<size_t>(n_)), recv(static_cast<size_t>(n_));
  for (int p = 0; p < n_; ++p) {
    send[size_t(p)] = a2a_rows(rank_, p);
    recv[size_t(p)] = a2a_rows(p, rank_);
  }
  const int64_t send_total = std::accumulate(send.begin(), send.end(), int64_t{0});
  const int64_t recv_total = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  for (DType t : kMoveDtypes) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} offset {}", dtype_name(t), offset));
      Buf in = make_buf(alloc_, {send_total, cols}, t, offset);
      Buf out = make_buf(alloc_, {recv_total, cols}, t, offset);
      int64_t row = 0;
      for (int p = 0; p < n_; ++p)
        for (int64_t k = 0; k < send[size_t(p)]; ++k, ++row)
          for (int64_t c = 0; c < cols; ++c) set_at(in.view, row * cols + c, a2a_value(t, rank_, p, k, c));
      ASSERT_TRUE(comm_->all_to_all(out.view, recv, in.view, send).ok());
      row = 0;
      for (int p = 0; p < n_; ++p)
        for (int64_t k = 0; k < recv[size_t(p)]; ++k, ++row)
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(get_at(out.view, row * cols + c), a2a_value(t, p, rank_, k, c))
                << "row " << row << " (row " << k << " from rank " << p << "), col " << c;
    }
  }
}

TEST_F(Collectives, NonBlockingOpsOverlap) {
  // Two ops in flight at once, waited in the opposite order of their start.
  Buf a = make_buf(alloc_, {1000}, DType::kF32);
  Buf g_in = make_buf(alloc_, {16}, DType::kI64);
  Buf g_out = make_buf(alloc_, {n_ * 16}, DType::kI64);
  for (int64_t i = 0; i < 1000; ++i) set_at(a.view, i, red_in(DType::kF32, rank_, i));
  for (int64_t i = 0; i < 16; ++i) set_at(g_in.view, i, payload(DType::kI64, rank_, i));
  auto w1 = comm_->iall_reduce(a.view, ReduceOp::kSum);
  auto w2 = comm_->iall_gather(g_out.view, g_in.view);
  ASSERT_TRUE(w1.ok() && w2.ok());
  ASSERT_TRUE(w2.value()->wait().ok());
  ASSERT_TRUE(w1.value()->wait().ok());
  ASSERT_TRUE(w1.value()->wait().ok()) << "a second wait() on a completed op is Ok";
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(get_at(a.view, i), red_expected(DType::kF32, ReduceOp::kSum, n_, i));
  for (int r = 0; r < n_; ++r)
    for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(get_at(g_out.view, r * 16 + i), payload(DType::kI64, r, i));
}

TEST_F(Collectives, SplitEvenOddRanks) {
  auto sub_r = comm_->split(rank_ % 2, rank_, test_options(rank_ % 2 ? "odd" : "even"));
  ASSERT_TRUE(sub_r.ok()) << sub_r.status().to_string();
  auto& sub = *sub_r.value();
  const int expect_size = (n_ + 1 - rank_ % 2) / 2;
  ASSERT_EQ(sub.size(), expect_size);
  ASSERT_EQ(sub.rank(), rank_ / 2);
  // Sum of world ranks in my parity class, via the sub-group only.
  Buf b = make_buf(alloc_, {1}, DType::kI64);
  set_at(b.view, 0, rank_);
  ASSERT_TRUE(sub.all_reduce(b.view, ReduceOp::kSum).ok());
  int64_t want = 0;
  for (int r = rank_ % 2; r < n_; r += 2) want += r;
  EXPECT_EQ(get_at(b.view, 0), double(want));
  // Gather order follows the key: sub-rank j is world rank 2j + parity.
  Buf g = make_buf(alloc_, {sub.size()}, DType::kI32);
  Buf me = make_buf(alloc_, {1}, DType::kI32);
  set_at(me.view, 0, rank_);
  ASSERT_TRUE(sub.all_gather(g.view, me.view).ok());
  for (int j = 0; j < sub.size(); ++j) EXPECT_EQ(get_at(g.view, j), 2 * j + rank_ % 2);
  // Errors name the sub-group.
  Buf bad = make_buf(alloc_, {sub.size() + 1}, DType::kI32);
  auto s = sub.all_gather(bad.view, me.view);
  EXPECT_NE(s.message().find(fmt::format("all_gather on group '{}' (rank {} of {})", rank_ % 2 ? "odd" : "even",
                                         rank_ / 2, expect_size)),
            std::string::npos)
      << s.message();
}

TEST_F(Collectives, SendRecvRing) {
  const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
  for (DType t : kMoveDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Buf s = make_buf(alloc_, {7}, t, 1);
    Buf r = make_buf(alloc_, {7}, t);
    for (int64_t i = 0; i < 7; ++i) set_at(s.view, i, payload(t, rank_, i));
    auto wr = comm_->irecv(r.view, prev, 5);
    auto ws = comm_->isend(s.view, next, 5);
    ASSERT_TRUE(wr.ok() && ws.ok());
    ASSERT_TRUE(ws.value()->wait().ok());
    ASSERT_TRUE(wr.value()->wait().ok());
    for (int64_t i = 0; i < 7; ++i) ASSERT_EQ(get_at(r.view, i), payload(t, prev, i)) << "element " << i;
  }
}

/// A message shorter than the receive buffer is an error naming the sender (MPI itself accepts it silently and
/// would leave the buffer's tail stale); a longer one is MPI's truncation error.
TEST_F(Collectives, SendRecvLengthMismatchIsNamed) {
  const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
  Buf s = make_buf(alloc_, {5}, DType::kF32);
  Buf r = make_buf(alloc_, {7}, DType::kF32);
  auto wr = comm_->irecv(r.view, prev, 6);
  auto ws = comm_->isend(s.view, next, 6);
  ASSERT_TRUE(wr.ok() && ws.ok());
  ASSERT_TRUE(ws.value()->wait().ok());
  const Status st = wr.value()->wait();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("sent 5 elements (tag 6), the receive buffer holds 7"), std::string::npos)
      << st.message();
  Buf big = make_buf(alloc_, {9}, DType::kF32), small = make_buf(alloc_, {4}, DType::kF32);
  auto wr2 = comm_->irecv(small.view, prev, 7);
  auto ws2 = comm_->isend(big.view, next, 7);
  ASSERT_TRUE(wr2.ok() && ws2.ok());
  ASSERT_TRUE(ws2.value()->wait().ok());
  EXPECT_FALSE(wr2.value()->wait().ok());
}

TEST_F(Collectives, BarrierCompletes) { EXPECT_TRUE(comm_->barrier().ok()); }

/// The error names op, group and rank, and the problem; nothing is communicated (each rank fails locally).
void expect_error(const Status& s, const std::string& want);

// all_to_all_rows: the rows to send picked from `in` by an index (reversed, a row sent twice where 3 or more go) and
// received placed by an index (reversed), against the plain all_to_all of the same rows; with the MPI backend's
// derived datatypes and with the interface's default staging path (called explicitly), uneven and zero counts,
// the same bytes either way, rows to the rank itself included. Then the named errors of the index checks.
TEST_F(Collectives, AllToAllRowsPlacesIndexedRowsAsTheStagedCopy) {
  const int64_t cols = 5;
  std::vector<int64_t> send(static_cast<size_t>(n_)), recv(static_cast<size_t>(n_));
  for (int p = 0; p < n_; ++p) {  // with 2 more rows to itself (the MPI backend copies those locally)
    send[size_t(p)] = a2a_rows(rank_, p) + (p == rank_ ? 2 : 0);
    recv[size_t(p)] = a2a_rows(p, rank_) + (p == rank_ ? 2 : 0);
  }
  const int64_t S = std::accumulate(send.begin(), send.end(), int64_t{0});
  const int64_t R = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  const int64_t in_rows = S + 1;  // in has one spare row; one row is sent twice when S > 2
  std::vector<int32_t> send_index(static_cast<size_t>(S)), recv_index(static_cast<size_t>(R));
  for (int64_t k = 0; k < S; ++k) send_index[size_t(k)] = int32_t(S - 1 - k);
  if (S > 2) send_index[1] = send_index[0];  // (with 2 rows they stay distinct: the placement must tell them apart)
  for (int64_t k = 0; k < R; ++k) recv_index[size_t(k)] = int32_t(R - 1 - k);
  for (DType t : kMoveDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Buf in = make_buf(alloc_, {in_rows, cols}, t), staged = make_buf(alloc_, {S, cols}, t);
    for (int64_t i = 0; i < in_rows * cols; ++i)
      set_at(in.view, i, a2a_value(t, rank_, int(i % 7), i / cols, i % cols));
    for (int64_t k = 0; k < S; ++k)  // the reference: gather by hand, plain all_to_all, scatter by hand
      for (int64_t c = 0; c < cols; ++c)
        set_at(staged.view, k * cols + c, get_at(in.view, send_index[size_t(k)] * cols + c));
    Buf plain = make_buf(alloc_, {R, cols}, t), want = make_buf(alloc_, {R, cols}, t);
    ASSERT_TRUE(comm_->all_to_all(plain.view, recv, staged.view, send).ok());
    for (int64_t k = 0; k < R; ++k)
      for (int64_t c = 0; c < cols; ++c)
        set_at(want.view, recv_index[size_t(k)] * cols + c, get_at(plain.view, k * cols + c));
    Buf got = make_buf(alloc_, {R, cols}, t), got_default = make_buf(alloc_, {R, cols}, t);
    ASSERT_TRUE(comm_->all_to_all_rows(got.view, recv, recv_index, in.view, send, send_index).ok());
    ASSERT_TRUE(
        comm_->Communicator::all_to_all_rows(got_default.view, recv, recv_index, in.view, send, send_index).ok());
    for (int64_t i = 0; i < R * cols; ++i) {
      ASSERT_EQ(get_at(got.view, i), get_at(want.view, i)) << "element " << i;
      ASSERT_EQ(get_at(got_default.view, i), get_at(want.view, i)) << "element " << i << " (default path)";
    }
    // Without indices it is the plain all_to_all.
    ASSERT_TRUE(comm_->all_to_all_rows(got.view, recv, {}, staged.view, send, {}).ok());
    for (int64_t i = 0; i < R * cols; ++i) ASSERT_EQ(get_at(got.view, i), get_at(plain.view, i)) << "element " << i;
  }
  const std::string site = fmt::format("on group 'world' (rank {} of {})", rank_, n_);
  Buf in = make_buf(alloc_, {in_rows, cols}, DType::kF32), out = make_buf(alloc_, {R, cols}, DType::kF32);
  if (S > 0) {
    std::vector<int32_t> bad = send_index;
    bad[0] = int32_t(in_rows);
    expect_error(comm_->all_to_all_rows(out.view, recv, recv_index, in.view, send, bad),
                 fmt::format("all_to_all_rows {}: send_index[0] = {} outside in's {} rows", site, in_rows, in_rows));
  }
  if (R > 1) {
    std::vector<int32_t> twice = recv_index;
    twice[1] = twice[0];
    expect_error(comm_->all_to_all_rows(out.view, recv, twice, in.view, send, send_index),
                 fmt::format("all_to_all_rows {}: recv_index[1] = {} is outside out's {} rows or repeats a row", site,
                             twice[1], R));
  }
  std::vector<int32_t> short_index(send_index.begin(), send_index.end());
  short_index.push_back(0);
  expect_error(comm_->all_to_all_rows(out.view, recv, recv_index, in.view, send, short_index),
               fmt::format("all_to_all_rows {}: send_rows sum to {} for {} rows to send", site, S, S + 1));
  // The rows a rank sends itself are copied locally (not through MPI), so the counts must agree here.
  std::vector<int64_t> to_self = send;
  for (int p = 0; p < n_; ++p) {
    if (p == rank_ || send[size_t(p)] == 0) continue;
    to_self[size_t(rank_)] += 1;  // one row moved from peer p to itself: the same total, another split
    to_self[size_t(p)] -= 1;
    expect_error(comm_->all_to_all_rows(out.view, recv, recv_index, in.view, to_self, send_index),
                 fmt::format("all_to_all_rows {}: this rank sends itself {} rows but receives {} from itself", site,
                             send[size_t(rank_)] + 1, recv[size_t(rank_)]));
    break;
  }
}

void expect_error(const Status& s, const std::string& want) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(want), std::string::npos) << "got: " << s.message() << "\nwant: " << want;
}

TEST_F(Collectives, NamedErrorsForWrongArguments) {
  const std::string site = fmt::format("on group 'world' (rank {} of {})", rank_, n_);
  Buf in = make_buf(alloc_, {4}, DType::kF32);
  Buf out6 = make_buf(alloc_, {n_ * 4 - 2}, DType::kF32);
  expect_error(comm_->all_gather(out6.view, in.view),
               fmt::format("all_gather {}: out has {} elements, expected {} x 4 = {}", site, n_ * 4 - 2, n_, n_ * 4));
  expect_error(comm_->reduce_scatter(in.view, out6.view, ReduceOp::kSum),
               fmt::format("reduce_scatter {}: in has {} elements, expected {} x 4 = {}", site, n_ * 4 - 2, n_,
                           n_ * 4));
  Buf out_bf = make_buf(alloc_, {n_ * 4}, DType::kBF16);
  expect_error(comm_->all_gather(out_bf.view, in.view),
               fmt::format("all_gather {}: out is bf16, in is f32 (dtypes must match)", site));
  expect_error(comm_->broadcast(in.view, n_), fmt::format("broadcast {}: root {} is not a rank", site, n_));
  TensorView on_gpu = in.view;
  on_gpu.device = Device::cuda(0);
  expect_error(comm_->all_reduce(on_gpu, ReduceOp::kSum),
               fmt::format("all_reduce {}: inout is on cuda:0, the mpi backend takes tensors on cpu", site));
  Buf wide = make_buf(alloc_, {4, 4}, DType::kF32);
  TensorView strided = wide.view.slice(1, 0, 2);
  expect_error(comm_->all_reduce(strided, ReduceOp::kSum), fmt::format("all_reduce {}: inout", site));
  expect_error(comm_->all_reduce(strided, ReduceOp::kSum), "is not contiguous");
  // all_to_all: counts that do not sum to the rows, wrong number of counts, mismatched row sizes, overlap.
  std::vector<int64_t> counts(size_t(n_), 1);
  Buf rows_in = make_buf(alloc_, {n_ + 1, 2}, DType::kF32);
  Buf rows_out = make_buf(alloc_, {n_, 2}, DType::kF32);
  expect_error(comm_->all_to_all(rows_out.view, counts, rows_in.view, counts),
               fmt::format("all_to_all {}: send_rows sum to {} but in has {} rows", site, n_, n_ + 1));
  std::vector<int64_t> short_counts(size_t(n_ - 1), 1);
  expect_error(comm_->all_to_all(rows_out.view, short_counts, rows_out.view, counts),
               fmt::format("all_to_all {}: send_rows has {} entries and recv_rows {}", site, n_, n_ - 1));
  Buf rows3 = make_buf(alloc_, {n_, 3}, DType::kF32);
  expect_error(comm_->all_to_all(rows3.view, counts, rows_out.view, counts),
               fmt::format("all_to_all {}: rows of out", site));
  expect_error(comm_->all_to_all(rows_out.view, counts, rows_out.view, counts),
               fmt::format("all_to_all {}: out and in overlap", site));
  std::vector<int64_t> huge(size_t(n_), 0);
  huge[0] = int64_t(1) << 31;
  expect_error(comm_->all_to_all(rows_out.view, counts, rows_in.view, huge),
               fmt::format("all_to_all {}: row counts/displacements for peer 0 exceed the int range", site));
  expect_error(comm_->send(in.view, rank_, 0), fmt::format("send {}: peer {} is not another rank", site, rank_));
  expect_error(comm_->recv(in.view, n_, 0), fmt::format("recv {}: peer {} is not another rank", site, n_));
  // all_gather with an overlapping `in` that is not this rank's block.
  Buf big = make_buf(alloc_, {n_ * 4}, DType::kF32);
  const int other = (rank_ + 1) % n_;
  expect_error(comm_->all_gather(big.view, big.view.slice(0, other * 4, other * 4 + 4)),
               fmt::format("all_gather {}: out and in overlap", site));
  // The group is still usable after local argument errors.
  EXPECT_TRUE(comm_->barrier().ok());
}

TEST_F(Collectives, LocalRankFromLauncherAgreesWithSharedMemorySplit) {
  auto lr = comm::local_rank(MPI_COMM_WORLD);
  ASSERT_TRUE(lr.ok()) << lr.status().to_string();
  // Portable answer: rank within the node's shared-memory communicator (one node here, so the world rank).
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  int node_rank = 0, node_size = 0;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  EXPECT_EQ(lr->rank, node_rank) << "from " << lr->source;
  EXPECT_EQ(lr->size, node_size) << "from " << lr->source;
  EXPECT_EQ(lr->source, "OMPI_COMM_WORLD_LOCAL_RANK") << "mpirun (Open MPI) exports the local rank";
}

}  // namespace
}  // namespace vlpar::test
