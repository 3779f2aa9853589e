// Expert parallelism's token dispatch and combine. See vlpar/nn/expert_dispatch.hpp.
#include "vlpar/nn/expert_dispatch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "vlpar/kernels/elementwise.hpp"
#include "vlpar/kernels/index_rows.hpp"

namespace vlpar::nn {
namespace {

constexpr const char* kOp = "expert dispatch";

int ep_size(const comm::Communicator* ep) { return ep != nullptr ? ep->size() : 1; }

/// Every rank's `value` (one rank: this one's), for decisions all ranks must take alike.
Result<std::vector<double>> gather_scalar(comm::Communicator* ep, double value) {
  std::vector<double> all(size_t(ep_size(ep)), value);
  if (ep_size(ep) > 1) {
    VLPAR_RETURN_IF_ERROR(ep->all_gather(TensorView(all.data(), DType::kF64, Shape{ep->size()}),
                                         TensorView(&value, DType::kF64, Shape{1})));
  }
  return all;
}

/// counts[src · E_l + e]: what each source sends to this rank's local expert e (an all-to-all of E_l counts).
Status exchange_counts(comm::Communicator* ep, ExpertDispatch& d) {
  const int P = d.ep, El = d.local_experts;
  std::vector<int64_t> mine(size_t(d.num_experts));
  for (int e = 0; e < d.num_experts; ++e) mine[size_t(e)] = d.local.expert_rows(e);
  if (P == 1) {
    d.counts = mine;
    return Status::Ok();
  }
  d.counts.assign(size_t(P) * size_t(El), 0);
  const std::vector<int64_t> rows(size_t(P), El);
  return ep->all_to_all(TensorView(d.counts.data(), DType::kI64, Shape{int64_t(P) * El, 1}), rows,
                        TensorView(mine.data(), DType::kI64, Shape{d.num_experts, 1}), rows);
}

/// Received rows per source and where each lands in the [local expert][src][token] order (received_from).
Status order_received(const Context& ctx, ExpertDispatch& d) {
  const int P = d.ep, El = d.local_experts;
  std::vector<int64_t> src_begin(size_t(P) + 1, 0);
  d.recv_rows.assign(size_t(P), 0);
  for (int p = 0; p < P; ++p) {
    for (int e = 0; e < El; ++e) d.recv_rows[size_t(p)] += d.counts[size_t(p * El + e)];
    src_begin[size_t(p) + 1] = src_begin[size_t(p)] + d.recv_rows[size_t(p)];
  }
  const int64_t N = src_begin.back();
  VLPAR_CHECK(N <= INT32_MAX, "{}: {} received rows overflow the i32 row ids", kOp, N);
  d.expert_offsets.assign(size_t(El) + 1, 0);
  if (P == 1) {  // the received rows are the local permuted rows: no reordering
    for (int e = 0; e < El; ++e) d.expert_offsets[size_t(e) + 1] = d.local.offsets[size_t(e) + 1];
    return Status::Ok();
  }
  VLPAR_ASSIGN_OR_RETURN(d.received_from, Tensor::empty(*ctx.allocator, Shape{N}, DType::kI32));
  int32_t* back = d.received_from.ptr<int32_t>();
  int64_t pos = 0;
  for (int e = 0; e < El; ++e) {
    for (int p = 0; p < P; ++p) {
      int64_t at = src_begin[size_t(p)];  // the source's block is [local expert][token]
      for (int f = 0; f < e; ++f) at += d.counts[size_t(p * El + f)];
      for (int64_t i = 0; i < d.counts[size_t(p * El + e)]; ++i, ++pos) back[at + i] = int32_t(pos);
    }
    d.expert_offsets[size_t(e) + 1] = pos;
  }
  return Status::Ok();
}

/// The receive bound, checked on every rank with every rank's N (so all of them stop, or none).
Status check_receive_bound(comm::Communicator* ep, const ExpertDispatch& d, const DispatchOptions& o) {
  if (o.max_recv_rows <= 0) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const std::vector<double> n, gather_scalar(ep, double(d.received())));
  double total = 0;
  for (double x : n) total += x;
  for (int p = 0; p < d.ep; ++p)
    VLPAR_CHECK(n[size_t(p)] <= double(o.max_recv_rows), "{}: ep rank {} would receive {} rows, more than "
                "max_recv_rows = {} (the router sends {:.0f}% of the rows to that rank's experts); nothing was sent",
                kOp, p, int64_t(n[size_t(p)]), o.max_recv_rows, total > 0 ? 100.0 * n[size_t(p)] / total : 0.0);
  return Status::Ok();
}

Status check_rows(const char* what, const char* name, TensorView t, int64_t rows, int64_t width) {
  VLPAR_CHECK(t.ndim() == 2 && t.size(0) == rows && (width < 0 || t.size(1) == width) && t.is_contiguous() &&
                  t.device.is_cpu(),
              "{}: {} must be contiguous host rows [{}, {}], got {}", what, name, rows,
              width < 0 ? std::string("F") : std::to_string(width), t.to_string());
  return Status::Ok();
}

std::span<const int32_t> index_span(const Tensor& t) { return {t.ptr<int32_t>(), size_t(t.numel())}; }

/// Rows of `in` in this rank's send order (in[send_index[r]] for permuted row r; in order without an index) → the
/// experts' rows [N, F] in [expert][src][token] order: one all_to_all_rows, the received rows placed straight at
/// their sorted positions (received_from), no staging copy where the backend moves indexed rows (MPI).
Status send_to_experts(comm::Communicator* ep, const ExpertDispatch& d, TensorView out, TensorView in,
                       const Tensor* send_index) {
  return ep->all_to_all_rows(out, d.recv_rows, index_span(d.received_from), in, d.send_rows,
                             send_index ? index_span(*send_index) : std::span<const int32_t>{});
}

/// The reverse: the experts' rows [N, F] → this rank's permuted rows (into out[out_index[r]] for permuted row r,
/// in order without an index), back from every expert's rank.
Status return_from_experts(comm::Communicator* ep, const ExpertDispatch& d, TensorView out, TensorView rows,
                           const Tensor* out_index) {
  return ep->all_to_all_rows(out, d.send_rows, out_index ? index_span(*out_index) : std::span<const int32_t>{}, rows,
                             d.recv_rows, index_span(d.received_from));
}

/// Rows grouped by expert at `offsets` as a plan over themselves (each row one top-1 "token", identity maps): lets
/// the per-row ops (moe_row_dot, moe_scale_rows) work on the experts' side with per-row values [R, 1].
MoeDispatch rows_as_plan(int experts, const std::vector<int64_t>& offsets) {
  MoeDispatch p;
  p.num_experts = experts;
  p.top_k = 1;
  p.num_tokens = offsets.empty() ? 0 : offsets.back();
  p.offsets = offsets;
  p.row_assignment.resize(size_t(p.num_tokens));
  for (size_t i = 0; i < p.row_assignment.size(); ++i) p.row_assignment[i] = int32_t(i);
  p.assignment_row = p.row_assignment;
  return p;
}

}  // namespace

int64_t ExpertDispatch::host_bytes() const {
  const auto bytes = [](const auto& v) { return int64_t(v.size() * sizeof(v[0])); };
  return bytes(local.offsets) + bytes(local.row_assignment) + bytes(local.assignment_row) + bytes(send_rows) +
         bytes(recv_rows) + bytes(counts) + bytes(expert_offsets);
}

MoeDispatch ExpertDispatch::received_plan() const { return rows_as_plan(local_experts, expert_offsets); }

Status agree_on_outcome(comm::Communicator* group, const Status& mine, const char* name, const char* what) {
  // Each rank contributes 0 (ok) or 1 + its status code.
  VLPAR_ASSIGN_OR_RETURN(const std::vector<double> failed,
                         gather_scalar(group, mine.ok() ? 0.0 : 1.0 + double(mine.code())));
  if (!mine.ok()) return mine;
  std::vector<int> bad;
  for (int p = 0; p < int(failed.size()); ++p)
    if (failed[size_t(p)] != 0.0) bad.push_back(p);
  if (bad.empty()) return Status::Ok();
  return VLPAR_STATUS(StatusCode(int(failed[size_t(bad[0])]) - 1), "{} rank(s) {} {} (see their error)", name,
                      fmt::join(bad, ", "), what);
}

Result<ExpertDispatch> plan_expert_dispatch(const Context& ctx, comm::Communicator* ep, TensorView indices,
                                            int num_experts, const DispatchOptions& options, const Status& routed) {
  ExpertDispatch d;
  d.ep = ep_size(ep);
  d.ep_rank = ep != nullptr ? ep->rank() : 0;
  d.num_experts = num_experts;
  Status local = [&]() -> Status {
    VLPAR_RETURN_IF_ERROR(routed);
    VLPAR_CHECK(ctx.allocator != nullptr, "{}: ctx.allocator must be set", kOp);
    VLPAR_CHECK(num_experts > 0 && num_experts % d.ep == 0, "{}: {} experts cannot be split evenly over the {} ranks "
                "of the ep group", kOp, num_experts, d.ep);
    VLPAR_CHECK(indices.device.is_cpu(), "{}: the router's indices must be on the host, got {}", kOp,
                indices.to_string());
    VLPAR_CHECK(options.capacity_factor >= 0 && std::isfinite(options.capacity_factor), "{}: capacity_factor "
                "must be finite and >= 0 (0: dropless), got {}", kOp, options.capacity_factor);
    VLPAR_RETURN_IF_ERROR(moe_dispatch_plan(ctx, d.local, indices, num_experts));
    if (options.capacity_factor == 0) return Status::Ok();
    const double rows = double(d.local.num_assignments());  // no expert can take more than every row
    d.capacity = int64_t(std::ceil(std::min(options.capacity_factor * rows / num_experts, rows)));
    VLPAR_ASSIGN_OR_RETURN(d.dropped, moe_capacity_plan(d.local, d.capacity));
    return Status::Ok();
  }();
  VLPAR_RETURN_IF_ERROR(agree_on_outcome(ep, local, "expert dispatch: ep",
                                         "could not route or plan the dispatch; nothing was sent"));
  d.local_experts = num_experts / d.ep;
  d.send_rows.assign(size_t(d.ep), 0);
  for (int p = 0; p < d.ep; ++p)
    d.send_rows[size_t(p)] = d.local.offsets[size_t((p + 1) * d.local_experts)] -
                             d.local.offsets[size_t(p * d.local_experts)];
  VLPAR_RETURN_IF_ERROR(exchange_counts(ep, d));
  VLPAR_RETURN_IF_ERROR(order_received(ctx, d));
  VLPAR_RETURN_IF_ERROR(check_receive_bound(ep, d, options));
  const int64_t R = d.local.num_rows();  // T·K less the dropped
  VLPAR_ASSIGN_OR_RETURN(d.row_token, Tensor::empty(*ctx.allocator, Shape{R}, DType::kI32));
  VLPAR_ASSIGN_OR_RETURN(d.row_assignment, Tensor::empty(*ctx.allocator, Shape{R}, DType::kI32));
  for (int64_t r = 0; r < R; ++r) {
    d.row_assignment.ptr<int32_t>()[r] = d.local.row_assignment[size_t(r)];
    d.row_token.ptr<int32_t>()[r] = d.local.row_assignment[size_t(r)] / d.local.top_k;
  }
  return d;
}

Status dispatch_rows(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out, TensorView in,
                     TensorView weights) {
  const char* op = "dispatch_rows";
  VLPAR_CHECK(ep_size(ep) == d.ep, "{}: the plan is for {} ep ranks, the group has {}", op, d.ep, ep_size(ep));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "in", in, d.num_tokens(), -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, d.received(), in.size(1)));
  VLPAR_CHECK(out.dtype == in.dtype, "{}: out {} and in {} differ in dtype", op, out.to_string(), in.to_string());
  if (d.ep == 1) {  // the permuted rows are the output
    if (!weights.empty()) return moe_permute(ctx, out, in, weights, d.local);
    return gather_rows(ctx, out, in, d.row_token);
  }
  if (weights.empty()) return send_to_experts(ep, d, out, in, &d.row_token);  // rows straight from the tokens
  VLPAR_ASSIGN_OR_RETURN(Tensor send, Tensor::empty(*ctx.allocator, Shape{d.local.num_rows(), in.size(1)},
                                                    in.dtype));  // weighted copies in send order
  VLPAR_RETURN_IF_ERROR(moe_permute(ctx, send, in, weights, d.local));
  return send_to_experts(ep, d, out, send, nullptr);
}

Status dispatch_assignments(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                            TensorView in) {
  const char* op = "dispatch_assignments";
  VLPAR_CHECK(ep_size(ep) == d.ep, "{}: the plan is for {} ep ranks, the group has {}", op, d.ep, ep_size(ep));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "in", in, d.local.num_assignments(), -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, d.received(), in.size(1)));
  VLPAR_CHECK(out.dtype == in.dtype, "{}: out {} and in {} differ in dtype", op, out.to_string(), in.to_string());
  if (d.ep == 1) return gather_rows(ctx, out, in, d.row_assignment);
  return send_to_experts(ep, d, out, in, &d.row_assignment);
}

Status combine_rows(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                    TensorView rows, TensorView weights, TensorView returned) {
  const char* op = "combine_rows";
  VLPAR_CHECK(ep_size(ep) == d.ep, "{}: the plan is for {} ep ranks, the group has {}", op, d.ep, ep_size(ep));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "rows", rows, d.received(), -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, d.num_tokens(), rows.size(1)));
  if (!returned.empty())
    VLPAR_RETURN_IF_ERROR(check_rows(op, "returned", returned, d.local.num_rows(), rows.size(1)));
  Tensor back;  // this rank's permuted rows back from the experts; at P = 1 they are `rows`
  if (d.ep > 1) {
    VLPAR_ASSIGN_OR_RETURN(back, Tensor::empty(*ctx.allocator, Shape{d.local.num_rows(), rows.size(1)},
                                               rows.dtype));
    VLPAR_RETURN_IF_ERROR(return_from_experts(ep, d, back, rows, nullptr));
  }
  const TensorView permuted = d.ep > 1 ? back.view() : rows;
  if (!returned.empty()) VLPAR_RETURN_IF_ERROR(copy_(returned, permuted));
  return moe_unpermute(ctx, out, permuted, weights, d.local);
}

Status combine_assignments(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                           TensorView rows) {
  const char* op = "combine_assignments";
  VLPAR_CHECK(ep_size(ep) == d.ep, "{}: the plan is for {} ep ranks, the group has {}", op, d.ep, ep_size(ep));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "rows", rows, d.received(), -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, d.local.num_assignments(), rows.size(1)));
  VLPAR_CHECK(out.dtype == rows.dtype, "{}: out {} and rows {} differ in dtype", op, out.to_string(),
              rows.to_string());
  if (d.dropped > 0) std::memset(out.data, 0, out.nbytes());  // a dropped assignment's row stays zero
  if (d.ep == 1) return scatter_rows(ctx, out, rows, d.row_assignment);
  return return_from_experts(ep, d, out, rows, &d.row_assignment);  // straight to each row's assignment
}

// ---- the expert-tensor-parallel gather and reduce-scatter ----------------------------------------------------------

MoeDispatch ExpertTpRows::gathered_plan() const { return rows_as_plan(local_experts, offsets); }

Result<ExpertTpRows> plan_expert_tp(comm::Communicator* etp, std::span<const int64_t> expert_offsets) {
  const char* op = "expert tp plan";
  VLPAR_CHECK(!expert_offsets.empty() && expert_offsets.front() == 0, "{}: expert_offsets must start at 0", op);
  ExpertTpRows g;
  g.etp = ep_size(etp);
  g.etp_rank = etp != nullptr ? etp->rank() : 0;
  const int P = g.etp, El = int(expert_offsets.size()) - 1;
  g.local_experts = El;
  std::vector<int64_t> mine(static_cast<size_t>(El), 0);
  for (int e = 0; e < El; ++e) mine[size_t(e)] = expert_offsets[size_t(e) + 1] - expert_offsets[size_t(e)];
  g.counts.assign(size_t(P) * size_t(El), 0);
  if (P > 1) {
    VLPAR_RETURN_IF_ERROR(etp->all_gather(TensorView(g.counts.data(), DType::kI64, Shape{int64_t(P) * El}),
                                          TensorView(mine.data(), DType::kI64, Shape{El})));
  } else {
    g.counts = mine;
  }
  // Gathered position of rank q's rows of expert e: after every rank's rows of experts < e and ranks < q's of e.
  g.rows.assign(size_t(P), 0);
  g.offsets.assign(size_t(El) + 1, 0);
  for (int e = 0; e < El; ++e) {
    int64_t n = 0;
    for (int q = 0; q < P; ++q) n += g.counts[size_t(q * El + e)];
    g.offsets[size_t(e) + 1] = g.offsets[size_t(e)] + n;
  }
  VLPAR_CHECK(g.gathered() <= INT32_MAX, "{}: {} gathered rows overflow the i32 row ids", op, g.gathered());
  for (int q = 0; q < P; ++q)
    for (int e = 0; e < El; ++e) {
      int64_t at = g.offsets[size_t(e)];
      for (int r = 0; r < q; ++r) at += g.counts[size_t(r * El + e)];
      for (int64_t i = 0; i < g.counts[size_t(q * El + e)]; ++i) g.positions.push_back(int32_t(at + i));
      g.rows[size_t(q)] += g.counts[size_t(q * El + e)];
    }
  if (P == 1) {  // nothing moves: no index lists
    g.positions.clear();
    return g;
  }
  g.placed = g.positions;  // rank q's rows arrive in q's own order, ranks in order: the same list
  const int64_t R = g.rows[size_t(g.etp_rank)];
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < R; ++i) g.send_all.push_back(int32_t(i));
  return g;
}

Status gather_expert_rows(comm::Communicator* etp, const ExpertTpRows& g, TensorView out, TensorView in) {
  const char* op = "gather_expert_rows";
  VLPAR_CHECK(ep_size(etp) == g.etp, "{}: the layout is for {} etp ranks, the group has {}", op, g.etp, ep_size(etp));
  const int64_t R = g.rows[size_t(g.etp_rank)];
  VLPAR_RETURN_IF_ERROR(check_rows(op, "in", in, R, -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, g.gathered(), in.size(1)));
  VLPAR_CHECK(out.dtype == in.dtype, "{}: out {} and in {} differ in dtype", op, out.to_string(), in.to_string());
  if (g.etp == 1) return copy_(out, in);
  const std::vector<int64_t> send(size_t(g.etp), R);
  return etp->all_to_all_rows(out, g.rows, g.placed, in, send, g.send_all);
}

Status reduce_scatter_expert_rows(const Context& ctx, comm::Communicator* etp, const ExpertTpRows& g, TensorView out,
                                  TensorView in) {
  const char* op = "reduce_scatter_expert_rows";
  VLPAR_CHECK(ep_size(etp) == g.etp, "{}: the layout is for {} etp ranks, the group has {}", op, g.etp, ep_size(etp));
  const int64_t R = g.rows[size_t(g.etp_rank)];
  VLPAR_RETURN_IF_ERROR(check_rows(op, "in", in, g.gathered(), -1));
  VLPAR_RETURN_IF_ERROR(check_rows(op, "out", out, R, in.size(1)));
  VLPAR_CHECK(out.dtype == in.dtype && (in.dtype == DType::kF32 || in.dtype == DType::kBF16),
              "{}: f32 or bf16 rows of one dtype only, got {} and {}", op, out.to_string(), in.to_string());
  if (g.etp == 1) return copy_(out, in);
  // Every rank's partial result of this rank's rows, in etp-rank order: [P · R, F]; then the sum in that order,
  // in f32 and rounded once (bf16 partials were each rounded already, so bf16 etp > 1 is not bitwise etp 1).
  const int64_t F = in.size(1);
  VLPAR_ASSIGN_OR_RETURN(Tensor parts, Tensor::empty(*ctx.allocator, Shape{int64_t(g.etp) * R, F}, in.dtype));
  const std::vector<int64_t> recv(size_t(g.etp), R);
  VLPAR_RETURN_IF_ERROR(etp->all_to_all_rows(parts, recv, {}, in, g.rows, g.positions));
  Tensor sum;
  if (out.dtype != DType::kF32) {
    VLPAR_ASSIGN_OR_RETURN(sum, Tensor::empty(*ctx.allocator, Shape{R, F}, DType::kF32));
  }
  const TensorView acc = sum.defined() ? sum.view() : out;
  const TensorView first = parts.view().slice(0, 0, R);
  VLPAR_RETURN_IF_ERROR(sum.defined() ? convert_(acc, first) : copy_(acc, first));
  for (int q = 1; q < g.etp; ++q)
    VLPAR_RETURN_IF_ERROR(add_(ctx, acc, parts.view().slice(0, int64_t(q) * R, int64_t(q + 1) * R)));
  if (sum.defined()) VLPAR_RETURN_IF_ERROR(convert_(out, acc));
  return Status::Ok();
}

}  // namespace vlpar::nn
