// The learning-rate schedule (include/vlpar/parallel/lr_schedule.hpp): warmup to the peak, cosine / linear decay
// to the floor (half way: the mean of peak and floor), constant, monotone after warmup, and named config errors.
#include <gtest/gtest.h>

#include <string>

#include "vlpar/parallel/lr_schedule.hpp"

namespace vlpar::test {
namespace {

parallel::LrSchedule schedule(const char* decay) {
  return parallel::LrSchedule{.warmup_steps = 10, .total_steps = 100, .decay = decay, .min_lr_ratio = 0.1};
}

TEST(LrSchedule, WarmupThenDecayToTheFloor) {
  const parallel::LrSchedule c = schedule("cosine");
  ASSERT_TRUE(c.validate().ok());
  EXPECT_DOUBLE_EQ(c.at(1.0, 0), 0.1);
  EXPECT_DOUBLE_EQ(c.at(1.0, 9), 1.0);
  EXPECT_DOUBLE_EQ(c.at(1.0, 10), 1.0);
  EXPECT_NEAR(c.at(1.0, 55), 0.55, 1e-12);  // half way: (1 + 0.1) / 2
  EXPECT_NEAR(c.at(1.0, 100), 0.1, 1e-12);
  EXPECT_NEAR(c.at(2.0, 100), 0.2, 1e-12);  // the floor scales with the peak
  for (int s = 11; s < 100; ++s) EXPECT_LE(c.at(1.0, s), c.at(1.0, s - 1));
  EXPECT_NEAR(schedule("linear").at(1.0, 55), 0.55, 1e-12);
  EXPECT_NEAR(schedule("linear").at(1.0, 32), 1.0 - 0.9 * 22.0 / 90.0, 1e-12);
  EXPECT_DOUBLE_EQ(schedule("constant").at(1.0, 80), 1.0);
}

TEST(LrSchedule, BadConfigsAreNamed) {
  auto expect_error = [](parallel::LrSchedule s, const std::string& needle) {
    const Status st = s.validate();
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  parallel::LrSchedule s = schedule("cosine");
  s.warmup_steps = 101;
  expect_error(s, "warmup_steps 101");
  expect_error(schedule("step"), "decay must be cosine, linear or constant, got 'step'");
  s = schedule("cosine");
  s.min_lr_ratio = 1.5;
  expect_error(s, "min_lr_ratio");
}

}  // namespace
}  // namespace vlpar::test
