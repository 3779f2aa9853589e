#pragma once
// Helpers of vlpar's libFuzzer targets (fuzz/*.cpp): the parsers that read files get the fuzzer's bytes through an
// anonymous in-memory file (memfd), named by its /proc/self/fd path, so no fuzzing run touches the disk.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "vlpar/data/tokenizer.hpp"

namespace vlpar::fuzz {

/// An in-memory file holding `size` bytes of `data`; path() opens it like any file. Closed on destruction.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("vlpar-fuzz", 0)) {
    if (fd_ < 0) std::abort();  // the harness itself failed, not the parser
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

/// The Qwen tokenizer of the test fixtures, loaded once per fuzzing process (VLPAR_FIXTURES_DIR from fuzz/).
inline const data::Tokenizer& fixture_tokenizer() {
  static const data::Tokenizer tok = [] {
    auto t = data::Tokenizer::from_file(VLPAR_FIXTURES_DIR "/tokenizer/tokenizer.json");
    if (!t.ok()) std::abort();
    return std::move(t.value());
  }();
  return tok;
}

/// A property the parser promises was broken: a finding, like a crash.
[[noreturn]] inline void violated() { __builtin_trap(); }

}  // namespace vlpar::fuzz
