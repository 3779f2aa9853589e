#pragma once
// Central finite differences in double, for checking fp64 reference backwards (tolerances.hpp derives the bound).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace vlpar::test {

/// Checks analytic ∂L/∂x against (L(x + h e_i) − L(x − h e_i)) / 2h for every i (or every `stride`-th i).
inline ::testing::AssertionResult finite_diff_matches(const std::string& what,
                                                      const std::function<double(const std::vector<double>&)>& loss,
                                                      std::vector<double> x, const std::vector<double>& analytic,
                                                      int64_t stride = 1) {
  double gmax = 0;
  for (double g : analytic) gmax = std::max(gmax, std::fabs(g));
  if (gmax == 0.0) return ::testing::AssertionFailure() << what << ": analytic gradient is all zero (vacuous)";
  const double tol = kFiniteDiffRelTol * std::max(1.0, gmax);
  std::vector<double> fd, an;
  std::vector<int64_t> where;
  for (size_t i = 0; i < x.size(); i += size_t(stride)) {
    const double x0 = x[i], h = kFiniteDiffStep * std::max(1.0, std::fabs(x0));
    x[i] = x0 + h;
    const double lp = loss(x);
    x[i] = x0 - h;
    const double lm = loss(x);
    x[i] = x0;
    fd.push_back((lp - lm) / (2 * h));
    an.push_back(analytic[i]);
  }
  Shape s;
  s.ndim = 1;
  s.dims[0] = int64_t(fd.size());
  return all_close(what + " (analytic vs finite differences, every " + std::to_string(stride) + "th element)", an,
                   fd, s, tol);
}

/// Σ out·G: a scalar loss whose gradient w.r.t. out is G.
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace vlpar::test
