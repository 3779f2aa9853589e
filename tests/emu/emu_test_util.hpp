#pragma once
// Helpers of the emulator's tests (tests/emu/test_emu_*.cpp): device arrays from the (emulated) cudaMalloc, and
// the check that a broken kernel's launch failed with a report naming what it broke.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::emu_test {

/// A cudaMalloc'd array of n T (zeroed, or copied from init), freed at scope exit.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, const std::vector<T>& init = {}) : n_(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p_, 0, n * sizeof(T)), cudaSuccess);
    if (!init.empty()) {
      EXPECT_EQ(cudaMemcpy(p_, init.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit DeviceArray(const std::vector<T>& init) : DeviceArray(init.size(), init) {}
  ~DeviceArray() { (void)cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  size_t n_;
  T* p_ = nullptr;
};

/// The Status failed with a message containing every fragment.
inline void expect_fault(const Status& s, std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(s.ok()) << "the broken kernel ran without an error";
  for (const char* f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << f << "\n in: " << s.message();
}

}  // namespace vlpar::emu_test
