#pragma once
// The weight half of a split backward (zero-bubble pipelines, spec A3.2): a backward run with
// Context::weight_grads set computes input gradients only and queues each parameter-gradient computation here,
// with (shared owners of) the tensors it reads; run() executes them later, in the order they were queued.
//
//   I:  Context ictx = ctx; ictx.weight_grads = &queue; block.backward(ictx, ...)   dx written, dW queued
//   W:  queue.run(ctx)                                                               dW accumulated, queue empty
//
// I then W gives every gradient bitwise equal to the full backward: each queued item is the same call on the same
// operands that the full backward makes, and every gradient buffer receives the same accumulations in the same
// order (a backward adds to each of its parameter gradients once; the queue keeps their order). Gradient views
// are not owned: the parameter registry outlives the step. Not thread-safe (one backward at a time).
// Test: tests/unit/test_layer_stack.cpp (PipelineSplitBackward…: decoder layers dense, q/k-norm and MoE; the
// queue's bytes).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct Context;

class WeightGradQueue {
 public:
  using Work = std::function<Status(const Context&)>;

  /// @brief Queues `work`; `keep` are the tensors it reads (their buffers stay alive until it ran).
  void push(Work work, std::initializer_list<Tensor> keep) {
    items_.push_back(Item{std::move(work), std::vector<Tensor>(keep)});
  }
  /// @brief Runs every queued item in order on `ctx` and empties the queue (also when an item fails: the first
  /// error is returned and the rest are dropped, as a failed backward leaves gradients undefined).
  Status run(const Context& ctx) {
    std::vector<Item> items = std::move(items_);
    items_.clear();
    for (Item& it : items) {
      const Status s = it.work(ctx);
      if (!s.ok()) return s;
      it.keep.clear();  // free each item's operands as soon as it ran
    }
    return Status::Ok();
  }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  /// @brief Bytes of the distinct buffers the queued items keep alive (each buffer counted once however many
  /// items read it; what the memory model calls the weight stash).
  int64_t bytes() const {
    std::vector<const void*> seen;
    int64_t total = 0;
    for (const Item& it : items_)
      for (const Tensor& t : it.keep) {
        if (!t.defined()) continue;
        const void* p = t.view().data;
        bool dup = false;
        for (const void* q : seen) dup = dup || q == p;
        if (dup) continue;
        seen.push_back(p);
        total += int64_t(t.view().nbytes());
      }
    return total;
  }
  /// @brief Drops every queued item unrun (an aborted step).
  void clear() { items_.clear(); }

 private:
  struct Item {
    Work work;
    std::vector<Tensor> keep;
  };
  std::vector<Item> items_;
};

}  // namespace vlpar
