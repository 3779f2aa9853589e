// The conjugate communication pairs (comm/conjugate.hpp): a forward and a backward test per pair, with
// rank-encoded payloads (element (row, col) of rank r encodes (r, row, col)), f32 and bf16, misaligned buffers
// (element offset 1), and the in-place layouts where they mean something (identity/all-reduce steps with
// out == in, dim-0 steps with the chunk inside the full tensor). AllToAll also checks backward ∘ forward = id.
// Run: ctest --preset cpu -R test_conjugate   (mpirun -np 2 and -np 4 ./build/cpu/tests/test_conjugate)
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/comm/conjugate.hpp"

namespace vlpar::test {
namespace {

using namespace vlpar::comm;  // NOLINT: the pair names read better unqualified here

/// (rank, row, col) -> value, exact in the dtype; the 16-bit code stays below 256.
double enc(DType t, int r, int64_t row, int64_t col) {
  if (is16(t)) return double(r * 64 + (row * 8 + col) % 64);
  return double(r) * 1e6 + double(row) * 1000 + double(col);
}

/// Fills a view seen as [rows, cols] (cols = last dim) with f(row, col).
void fill(const TensorView& v, const std::function<double(int64_t, int64_t)>& f) {
  const int64_t cols = v.size(-1), rows = cols ? v.numel() / cols : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) set_at(v, r * cols + c, f(r, c));
}
/// Expects v[row, col] == f(row, col) everywhere; reports the first mismatch with its coordinates.
void expect_all(const TensorView& v, const std::function<double(int64_t, int64_t)>& f) {
  const int64_t cols = v.size(-1), rows = cols ? v.numel() / cols : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(get_at(v, r * cols + c), f(r, c)) << "at [row " << r << ", col " << c << "] of " << v.to_string();
}

constexpr DType kDtypes[] = {DType::kF32, DType::kBF16};

class Conjugate : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = world_comm("tp");
    ASSERT_NE(comm_, nullptr);
    rank_ = comm_->rank();
    n_ = comm_->size();
  }
  /// Runs body(dtype, offset) for every dtype and for aligned and misaligned buffers.
  void for_each_case(const std::function<void(DType, int64_t)>& body) {
    for (DType t : kDtypes)
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(fmt::format("{} offset {}", dtype_name(t), offset));
        body(t, offset);
        if (::testing::Test::HasFatalFailure()) return;
      }
  }
  Allocator alloc_;
  std::unique_ptr<Communicator> comm_;
  int rank_ = 0, n_ = 1;
  // Region ops: [B, S, H] with H = n·w. Sequence ops: [n·S, H].
  static constexpr int64_t kB = 2, kS = 3, kW = 4, kH = 5;
};

// ---- copy_to_region: identity / all-reduce ---------------------------------------------------------------

TEST_F(Conjugate, CopyToRegionForwardIsIdentity) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf in = make_buf(alloc_, {kB, kS, kW}, t, off), out = make_buf(alloc_, {kB, kS, kW}, t, off);
      fill(in.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
      TensorView dst = in_place ? in.view : out.view;
      ASSERT_TRUE(CopyToRegion::forward(*comm_, dst, in.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    }
  });
}

TEST_F(Conjugate, CopyToRegionBackwardSumsOverRanks) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf go = make_buf(alloc_, {kB * kS, kW}, t, off), gi = make_buf(alloc_, {kB * kS, kW}, t, off);
      fill(go.view, [&](int64_t r, int64_t c) { return red_in(t, rank_, r * kW + c); });
      TensorView dst = in_place ? go.view : gi.view;
      ASSERT_TRUE(CopyToRegion::backward(*comm_, dst, go.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) { return red_expected(t, ReduceOp::kSum, n_, r * kW + c); });
    }
  });
}

// ---- reduce_from_region: all-reduce / identity -----------------------------------------------------------

TEST_F(Conjugate, ReduceFromRegionForwardSumsOverRanks) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf in = make_buf(alloc_, {kS, kH}, t, off), out = make_buf(alloc_, {kS, kH}, t, off);
      fill(in.view, [&](int64_t r, int64_t c) { return red_in(t, rank_, r * kH + c); });
      TensorView dst = in_place ? in.view : out.view;
      ASSERT_TRUE(ReduceFromRegion::forward(*comm_, dst, in.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) { return red_expected(t, ReduceOp::kSum, n_, r * kH + c); });
      if (!in_place) expect_all(in.view, [&](int64_t r, int64_t c) { return red_in(t, rank_, r * kH + c); });
    }
  });
}

TEST_F(Conjugate, ReduceFromRegionBackwardIsIdentity) {
  for_each_case([&](DType t, int64_t off) {
    Buf go = make_buf(alloc_, {kS, kH}, t, off), gi = make_buf(alloc_, {kS, kH}, t, off);
    fill(go.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(ReduceFromRegion::backward(*comm_, gi.view, go.view).ok());
    expect_all(gi.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
  });
}

// ---- scatter_to_region / gather_from_region: last dim ----------------------------------------------------

TEST_F(Conjugate, ScatterToRegionForwardKeepsOwnColumns) {
  for_each_case([&](DType t, int64_t off) {
    Buf in = make_buf(alloc_, {kB, kS, n_ * kW}, t, off), out = make_buf(alloc_, {kB, kS, kW}, t, off);
    fill(in.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(ScatterToRegion::forward(*comm_, out.view, in.view).ok());
    expect_all(out.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, rank_ * kW + c); });
  });
}

TEST_F(Conjugate, ScatterToRegionBackwardGathersColumnsInRankOrder) {
  for_each_case([&](DType t, int64_t off) {
    Buf go = make_buf(alloc_, {kB, kS, kW}, t, off), gi = make_buf(alloc_, {kB, kS, n_ * kW}, t, off);
    fill(go.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(ScatterToRegion::backward(*comm_, gi.view, go.view).ok());
    expect_all(gi.view, [&](int64_t r, int64_t c) { return enc(t, int(c / kW), r, c % kW); });
  });
}

TEST_F(Conjugate, GatherFromRegionForwardGathersColumnsInRankOrder) {
  for_each_case([&](DType t, int64_t off) {
    Buf in = make_buf(alloc_, {kB * kS, kW}, t, off), out = make_buf(alloc_, {kB * kS, n_ * kW}, t, off);
    fill(in.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(GatherFromRegion::forward(*comm_, out.view, in.view).ok());
    expect_all(out.view, [&](int64_t r, int64_t c) { return enc(t, int(c / kW), r, c % kW); });
  });
}

TEST_F(Conjugate, GatherFromRegionBackwardKeepsOwnColumns) {
  for_each_case([&](DType t, int64_t off) {
    Buf go = make_buf(alloc_, {kB * kS, n_ * kW}, t, off), gi = make_buf(alloc_, {kB * kS, kW}, t, off);
    fill(go.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(GatherFromRegion::backward(*comm_, gi.view, go.view).ok());
    expect_all(gi.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, rank_ * kW + c); });
  });
}

// ---- sequence ops: dim 0 ---------------------------------------------------------------------------------

TEST_F(Conjugate, ScatterToSequenceForwardKeepsOwnRows) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf in = make_buf(alloc_, {n_ * kS, kH}, t, off), out = make_buf(alloc_, {kS, kH}, t, off);
      fill(in.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
      TensorView dst = in_place ? in.view.slice(0, rank_ * kS, (rank_ + 1) * kS) : out.view;
      ASSERT_TRUE(ScatterToSequence::forward(*comm_, dst, in.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) { return enc(t, rank_, rank_ * kS + r, c); });
    }
  });
}

TEST_F(Conjugate, ScatterToSequenceBackwardGathersRowsInRankOrder) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf gi = make_buf(alloc_, {n_ * kS, kH}, t, off), go = make_buf(alloc_, {kS, kH}, t, off);
      TensorView src = in_place ? gi.view.slice(0, rank_ * kS, (rank_ + 1) * kS) : go.view;
      fill(src, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
      ASSERT_TRUE(ScatterToSequence::backward(*comm_, gi.view, src).ok());
      expect_all(gi.view, [&](int64_t r, int64_t c) { return enc(t, int(r / kS), r % kS, c); });
    }
  });
}

TEST_F(Conjugate, GatherFromSequenceForwardGathersRowsInRankOrder) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf out = make_buf(alloc_, {n_ * kS, kH}, t, off), in = make_buf(alloc_, {kS, kH}, t, off);
      TensorView src = in_place ? out.view.slice(0, rank_ * kS, (rank_ + 1) * kS) : in.view;
      fill(src, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
      ASSERT_TRUE(GatherFromSequence::forward(*comm_, out.view, src).ok());
      expect_all(out.view, [&](int64_t r, int64_t c) { return enc(t, int(r / kS), r % kS, c); });
    }
  });
}

TEST_F(Conjugate, GatherFromSequenceBackwardReduceScattersRows) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf go = make_buf(alloc_, {n_ * kS, kH}, t, off), gi = make_buf(alloc_, {kS, kH}, t, off);
      fill(go.view, [&](int64_t r, int64_t c) { return red_in(t, rank_, r * kH + c); });
      TensorView dst = in_place ? go.view.slice(0, rank_ * kS, (rank_ + 1) * kS) : gi.view;
      ASSERT_TRUE(GatherFromSequence::backward(*comm_, dst, go.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) {
        return red_expected(t, ReduceOp::kSum, n_, (rank_ * kS + r) * kH + c);
      });
    }
  });
}

TEST_F(Conjugate, ReduceScatterToSequenceForwardSumsOwnRows) {
  for_each_case([&](DType t, int64_t off) {
    for (bool in_place : {false, true}) {
      Buf in = make_buf(alloc_, {n_ * kS, kH}, t, off), out = make_buf(alloc_, {kS, kH}, t, off);
      fill(in.view, [&](int64_t r, int64_t c) { return red_in(t, rank_, r * kH + c); });
      TensorView dst = in_place ? in.view.slice(0, rank_ * kS, (rank_ + 1) * kS) : out.view;
      ASSERT_TRUE(ReduceScatterToSequence::forward(*comm_, dst, in.view).ok());
      expect_all(dst, [&](int64_t r, int64_t c) {
        return red_expected(t, ReduceOp::kSum, n_, (rank_ * kS + r) * kH + c);
      });
    }
  });
}

TEST_F(Conjugate, ReduceScatterToSequenceBackwardGathersRows) {
  for_each_case([&](DType t, int64_t off) {
    Buf gi = make_buf(alloc_, {n_ * kS, kH}, t, off), go = make_buf(alloc_, {kS, kH}, t, off);
    fill(go.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(ReduceScatterToSequence::backward(*comm_, gi.view, go.view).ok());
    expect_all(gi.view, [&](int64_t r, int64_t c) { return enc(t, int(r / kS), r % kS, c); });
  });
}

// ---- all_to_all ------------------------------------------------------------------------------------------

/// Rows rank src sends to rank dst in the forward: uneven, zero for some pairs.
int64_t rows_between(int src, int dst) { return (2 * src + dst + 1) % 3; }

class ConjugateAllToAll : public Conjugate {
 protected:
  void SetUp() override {
    Conjugate::SetUp();
    send_.resize(size_t(n_));
    recv_.resize(size_t(n_));
    for (int p = 0; p < n_; ++p) {
      send_[size_t(p)] = rows_between(rank_, p);
      recv_[size_t(p)] = rows_between(p, rank_);
    }
    send_total_ = std::accumulate(send_.begin(), send_.end(), int64_t{0});
    recv_total_ = std::accumulate(recv_.begin(), recv_.end(), int64_t{0});
  }
  AllToAll::Counts counts() const { return {send_, recv_}; }
  /// Row k (in send order) of `src`'s forward input: encodes (src, k, col).
  std::vector<int64_t> send_, recv_;
  int64_t send_total_ = 0, recv_total_ = 0;
};

TEST_F(ConjugateAllToAll, ForwardDeliversRowsByCounts) {
  for_each_case([&](DType t, int64_t off) {
    Buf in = make_buf(alloc_, {send_total_, kH}, t, off), out = make_buf(alloc_, {recv_total_, kH}, t, off);
    fill(in.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(AllToAll::forward(*comm_, out.view, in.view, counts()).ok());
    // Row j of out came from rank p (in rank order), as row `first + k` of p's input, where `first` is the number
    // of rows p sent to ranks before this one.
    int64_t row = 0;
    for (int p = 0; p < n_; ++p) {
      int64_t first = 0;
      for (int q = 0; q < rank_; ++q) first += rows_between(p, q);
      for (int64_t k = 0; k < recv_[size_t(p)]; ++k, ++row)
        for (int64_t c = 0; c < kH; ++c)
          ASSERT_EQ(get_at(out.view, row * kH + c), enc(t, p, first + k, c)) << "row " << row << " col " << c;
    }
  });
}

TEST_F(ConjugateAllToAll, BackwardReturnsGradientsToTheirSources) {
  for_each_case([&](DType t, int64_t off) {
    // Gradient of forward's output row j is tagged with (this rank, j); backward must bring it to the row of
    // forward's input that produced it, i.e. backward ∘ forward = identity on row positions.
    Buf x = make_buf(alloc_, {send_total_, kH}, t, off), y = make_buf(alloc_, {recv_total_, kH}, t, off);
    Buf back = make_buf(alloc_, {send_total_, kH}, t, off);
    fill(x.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(AllToAll::forward(*comm_, y.view, x.view, counts()).ok());
    ASSERT_TRUE(AllToAll::backward(*comm_, back.view, y.view, counts()).ok());
    expect_all(back.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    // And where each gradient row goes: the rows this rank received from p return to p.
    Buf gy = make_buf(alloc_, {recv_total_, kH}, t, off), gx = make_buf(alloc_, {send_total_, kH}, t, off);
    fill(gy.view, [&](int64_t r, int64_t c) { return enc(t, rank_, r, c); });
    ASSERT_TRUE(AllToAll::backward(*comm_, gx.view, gy.view, counts()).ok());
    int64_t row = 0;
    for (int p = 0; p < n_; ++p) {
      int64_t first = 0;  // rows rank p received from ranks before this one
      for (int q = 0; q < rank_; ++q) first += rows_between(q, p);
      for (int64_t k = 0; k < send_[size_t(p)]; ++k, ++row)
        for (int64_t c = 0; c < kH; ++c)
          ASSERT_EQ(get_at(gx.view, row * kH + c), enc(t, p, first + k, c)) << "row " << row << " col " << c;
    }
  });
}

// ---- argument errors name the pair, the group and the rank -----------------------------------------------

TEST_F(Conjugate, NamedErrors) {
  Buf full = make_buf(alloc_, {kS, n_ * kW + 1}, DType::kF32), chunk = make_buf(alloc_, {kS, kW}, DType::kF32);
  Status s = ScatterToRegion::forward(*comm_, chunk.view, full.view);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fmt::format("scatter_to_region.forward on group 'tp' (rank {} of {}): last dim of in is "
                                         "{}, expected {} x {} = {}",
                                         rank_, n_, n_ * kW + 1, n_, kW, n_ * kW)),
            std::string::npos)
      << s.message();
  Buf rows = make_buf(alloc_, {n_ * kS + 1, kH}, DType::kF32), rows_chunk = make_buf(alloc_, {kS, kH}, DType::kF32);
  s = GatherFromSequence::forward(*comm_, rows.view, rows_chunk.view);
  EXPECT_NE(s.message().find(fmt::format("gather_from_sequence.forward on group 'tp' (rank {} of {}): dim 0 of out is "
                                         "{}, expected {} x {} = {}",
                                         rank_, n_, n_ * kS + 1, n_, kS, n_ * kS)),
            std::string::npos)
      << s.message();
  Buf other = make_buf(alloc_, {kS, kH + 1}, DType::kF32);
  s = CopyToRegion::backward(*comm_, other.view, rows_chunk.view);
  EXPECT_NE(s.message().find(fmt::format("copy_to_region.backward on group 'tp' (rank {} of {}): out [{}, {}] and in "
                                         "[{}, {}] must have the same shape",
                                         rank_, n_, kS, kH + 1, kS, kH)),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(comm_->barrier().ok());
}

}  // namespace
}  // namespace vlpar::test
