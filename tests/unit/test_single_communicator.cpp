// The single-process communicator (size 1): every collective is the identity or a copy, errors are the same
// named errors as in the MPI backend, split gives another group of one.
// Run: ctest --preset cpu -R SingleCommunicator
#include <gtest/gtest.h>

#include <vector>

#include "vlpar/comm/single_communicator.hpp"

namespace vlpar::comm {
namespace {

std::vector<float> iota(int n, float base) {
  std::vector<float> v(size_t(n), 0.f);
  for (int i = 0; i < n; ++i) v[size_t(i)] = base + float(i);
  return v;
}

TEST(SingleCommunicator, CollectivesAreIdentityOrCopy) {
  SingleCommunicator c(CommOptions{"solo", std::chrono::seconds(1)});
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.backend(), Backend::kSingle);
  auto a = iota(6, 1.f);
  ASSERT_TRUE(c.all_reduce(TensorView(a.data(), DType::kF32, {6}), ReduceOp::kSum).ok());
  EXPECT_EQ(a, iota(6, 1.f));
  ASSERT_TRUE(c.broadcast(TensorView(a.data(), DType::kF32, {2, 3}), 0).ok());
  EXPECT_EQ(a, iota(6, 1.f));
  std::vector<float> out(6, 0.f);
  ASSERT_TRUE(c.all_gather(TensorView(out.data(), DType::kF32, {6}), TensorView(a.data(), DType::kF32, {6})).ok());
  EXPECT_EQ(out, a);
  std::vector<float> rs(6, 0.f);
  ASSERT_TRUE(c.reduce_scatter(TensorView(rs.data(), DType::kF32, {6}), TensorView(a.data(), DType::kF32, {6}),
                               ReduceOp::kMax)
                  .ok());
  EXPECT_EQ(rs, a);
  std::vector<float> a2a(6, 0.f);
  const int64_t rows[] = {3};
  ASSERT_TRUE(c.all_to_all(TensorView(a2a.data(), DType::kF32, {3, 2}), rows, TensorView(a.data(), DType::kF32, {3, 2}),
                           rows)
                  .ok());
  EXPECT_EQ(a2a, a);
  EXPECT_TRUE(c.barrier().ok());
  auto sub = c.split(7, 0, CommOptions{"sub", std::chrono::seconds(1)});
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub.value()->size(), 1);
  EXPECT_EQ(sub.value()->options().name, "sub");
}

TEST(SingleCommunicator, NamedErrors) {
  SingleCommunicator c(CommOptions{"solo", std::chrono::seconds(1)});
  std::vector<float> a(8, 0.f);
  auto s = c.all_gather(TensorView(a.data(), DType::kF32, {6}), TensorView(a.data() + 6, DType::kF32, {2}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("all_gather on group 'solo' (rank 0 of 1): out has 6 elements, expected 1 x 2 = 2"),
            std::string::npos)
      << s.message();
  s = c.send(TensorView(a.data(), DType::kF32, {8}), 0, 0);
  EXPECT_NE(s.message().find("send on group 'solo' (rank 0 of 1): peer 0 is not another rank"), std::string::npos)
      << s.message();
  const int64_t rows[] = {1};
  const int64_t other[] = {2};
  s = c.all_to_all(TensorView(a.data(), DType::kF32, {2, 2}), other, TensorView(a.data() + 4, DType::kF32, {1, 2}),
                   rows);
  EXPECT_NE(s.message().find("all_to_all on group 'solo' (rank 0 of 1): sends 1 rows to itself but expects 2"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace vlpar::comm
