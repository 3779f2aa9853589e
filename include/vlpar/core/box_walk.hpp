#pragma once
// walk_box: the contiguous runs of an n-d box copied between two row-major layouts (a parameter shard and its
// full tensor, a saved checkpoint piece and this rank's shard). Used by core/shard.cpp and io/checkpoint.cpp.
// Test: tests/unit/test_shard_copy.cpp, tests/unit/test_checkpoint.cpp.
#include <algorithm>
#include <cstdint>

#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// Calls fn(dst_element_offset, src_element_offset, elements) for each contiguous run of a box of `size[0..nd)`
/// elements that starts at `sorig` inside a row-major tensor of shape `sshape` and at `dorig` inside one of shape
/// `dshape`. Trailing dims the box spans whole in both layouts merge into one run (a dim-0 piece is one run); an
/// empty box calls nothing.
template <class F>
void walk_box(int nd, const int64_t* size, const int64_t* sshape, const int64_t* sorig, const int64_t* dshape,
              const int64_t* dorig, F&& fn) {
  for (int j = 0; j < nd; ++j)
    if (size[j] == 0) return;
  int64_t sstr[kMaxDims] = {}, dstr[kMaxDims] = {};
  int64_t sacc = 1, dacc = 1;
  for (int j = nd - 1; j >= 0; --j) {
    sstr[j] = sacc;
    sacc *= sshape[j];
    dstr[j] = dacc;
    dacc *= dshape[j];
  }
  int k = nd - 1;  // the run covers dims [k, nd): dims > k whole in both, dim k partial
  while (k > 0 && size[k] == sshape[k] && size[k] == dshape[k]) --k;
  int64_t run = 1;
  for (int j = std::max(k, 0); j < nd; ++j) run *= size[j];
  int64_t idx[kMaxDims] = {};
  for (;;) {
    int64_t so = 0, dof = 0;
    for (int j = 0; j < nd; ++j) {
      const int64_t i = j < k ? idx[j] : 0;
      so += (sorig[j] + i) * sstr[j];
      dof += (dorig[j] + i) * dstr[j];
    }
    fn(dof, so, run);
    int j = k - 1;
    for (; j >= 0; --j) {
      if (++idx[j] < size[j]) break;
      idx[j] = 0;
    }
    if (j < 0) return;
  }
}

}  // namespace vlpar
