#pragma once
// Expert parallelism's token dispatch and combine (spec pipeline-and-experts B6, Megatron's all-to-all dispatcher,
// dropless, or with a capacity factor (DispatchOptions): each expert then takes at most C rows from each source
// rank, its lowest tokens, and the rest are dropped and counted): the E experts of a MoE layer are split over the
// P ranks of the ep group, rank p holding the E_l = E / P experts p·E_l … (p+1)·E_l − 1. From the router's top-k
// choices [T, K] of this rank's T tokens:
//
//   plan      local plan (moe_dispatch_plan: T·K rows grouped by global expert ascending, tokens ascending inside
//             an expert) → send_rows[p] = the rows of rank p's experts → exchange of the per-expert counts (an
//             all-to-all of E_l counts per rank pair) → counts[src][e], recv_rows[src], expert_offsets over the
//             received rows in [local expert][src] order. Collective over ep; the only host sync of a dispatch.
//   dispatch  rows [T, F] → one Communicator::all_to_all_rows: each rank sends its tokens' rows in permuted order
//             (indexed straight from [T, F]; a weighted dispatch first scales copies, moe_permute), arrival order
//             [src][local expert][token], each received row placed at its [local expert][src][token] position:
//             out [N, F], expert e's rows at expert_offsets[e] … expert_offsets[e+1] (the grouped GEMM's groups).
//             With MPI the rows move by derived datatypes, no staging copy in vlpar (bench_expert_dispatch).
//   combine   the exact reverse: rows [N, F] → all_to_all_rows back (sent from their sorted positions) → every
//             (token, k) output at its source rank → out[t] = Σ over t's k in ascending expert order of
//             w_{t,k} · y_{t,k}, from 0 (moe_unpermute), never in arrival order.
//   *_assignments  the same moves for per-(token, k) payloads [T·K, F] (routing weights, expert ids, tags),
//             without the sum.
// The payload is any TensorView of rows (any dtype the communicator moves, any width): activations, gradients,
// probabilities and test tags travel the same way. Backwards: d(dispatch) = combine without weights (the K copies of
// a token summed), d(combine) = dispatch of dOut with the weights, plus d(w_{t,k}) = ⟨dOut[t], y_{t,k}⟩ from the
// rows combine returns (moe_row_dot on this rank's plan).
//
// Exactness (B9): each local expert sees its rows ordered by (source rank, source token), the order one rank with
// all experts would give them, and combine sums a token's outputs at the source in ascending expert order; so EP = N
// equals EP = 1 bitwise wherever the per-expert computation sees the same rows in the same order.
// Memory: the receive side holds N = Σ_src recv_rows rows; DispatchOptions::max_recv_rows bounds it (a skewed router
// sending everything to one rank is then a named error naming the rows, not an out-of-memory).
// The all-to-alls run on `ep` (MPI on CPU); null or a size-1 ep group is EP = 1 (local permute only).
// Test: tests/mpi/test_expert_dispatch.cpp (np 2 and 4; EP 1 = every rank alone, as the reference).
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/moe.hpp"

namespace vlpar::nn {

/// The expert-parallel group of a MoE block: the E experts split over its ranks (null: every expert here), and
/// the expert-tensor-parallel group (null: each expert whole here): every expert's SwiGLU width I split over its
/// ranks, which hold different tokens (spec B6 step 7).
struct ExpertParallel {
  comm::Communicator* comm = nullptr;
  comm::Communicator* etp = nullptr;
  int size() const { return comm != nullptr ? comm->size() : 1; }
  int rank() const { return comm != nullptr ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  int etp_size() const { return etp != nullptr ? etp->size() : 1; }
  int etp_rank() const { return etp != nullptr ? etp->rank() : 0; }
};

struct DispatchOptions {
  int64_t max_recv_rows = 0;  // > 0: a plan receiving more rows than this on some rank is a named error
  /// > 0: each expert takes at most C = ⌈capacity_factor · T · K / E⌉ of this rank's T tokens' rows (its first C
  /// by token, moe_capacity_plan's position policy); the others are dropped: not sent, left out of combine's sum
  /// (their token keeps its other experts' outputs and the residual), 0 in every gradient through them, counted
  /// in ExpertDispatch::dropped. 0: dropless.
  double capacity_factor = 0;
};

/// The layout of one dispatch, from plan_expert_dispatch; what dispatch, combine and both backwards use (no
/// recomputation of the routing). Index tensors are i32 on the host, allocated from the planning context.
struct ExpertDispatch {
  int ep = 1, ep_rank = 0;        // P and this rank's position in the ep group
  int num_experts = 0;            // E
  int local_experts = 0;          // E_l = E / P
  MoeDispatch local;              // this rank's T·K rows grouped by global expert (the send order), less the
                                  // dropped ones with a capacity (their assignment_row is −1)
  int64_t capacity = 0;           // rows per expert per source rank (0: dropless)
  int64_t dropped = 0;            // this rank's assignments dropped by the capacity
  std::vector<int64_t> send_rows;       // [P] rows to rank p
  std::vector<int64_t> recv_rows;       // [P] rows from rank p
  std::vector<int64_t> counts;          // [P · E_l] rows from rank src for local expert e, at src · E_l + e
  std::vector<int64_t> expert_offsets;  // [E_l + 1] the received rows of each local expert, [expert][src] order
  Tensor row_token;       // [R_l] i32: permuted row r → its token (R_l = T·K less the dropped)
  Tensor row_assignment;  // [R_l] i32: permuted row r → its assignment t·K + k
  Tensor received_from;   // [N] i32: received row j (in [src][expert][token] arrival order) is row
                          // received_from[j] of the [expert][src] order; empty at P = 1, where the received rows
                          // are this rank's permuted rows

  int64_t num_tokens() const { return local.num_tokens; }
  int top_k() const { return local.top_k; }
  /// N: rows this rank's experts process.
  int64_t received() const { return expert_offsets.empty() ? 0 : expert_offsets.back(); }
  /// Rows of local expert e (the grouped GEMM's group e).
  int64_t expert_rows(int e) const { return expert_offsets[size_t(e) + 1] - expert_offsets[size_t(e)]; }
  /// Host memory of the plan's vectors (the index tensors come from the allocator).
  int64_t host_bytes() const;
  /// The received rows as a plan over themselves (N "tokens", top-1, E_l experts at expert_offsets, identity maps):
  /// lets the row ops (moe_row_dot, moe_scale_rows) work on the experts' side with per-row values [N, 1].
  MoeDispatch received_plan() const;
};

/// @brief Plans a dispatch. Collective over `ep` (null or size 1: EP = 1).
/// @param indices [T, K] i32 host, every id in [0, E), a token's K ids distinct (T may be 0 on some ranks)
/// @param num_experts E, a multiple of the ep size
/// @param routed this rank's outcome of what made `indices` (the router: non-finite logits are a kNonFinite error);
///               an error is agreed on with the plan's own checks, so that every rank returns an error and none
///               waits in the count exchange (`indices` is then not read)
Result<ExpertDispatch> plan_expert_dispatch(const Context& ctx, comm::Communicator* ep, TensorView indices,
                                            int num_experts, const DispatchOptions& options = {},
                                            const Status& routed = Status::Ok());

/// The rows of this rank's local experts gathered over the expert-tensor-parallel group (spec B6 steps 7 and 11):
/// every etp rank q brings its dispatched rows (R_q of them, [local expert][…] order); the gathered rows are in
/// [local expert][etp rank][…] order, so that local expert e's rows are one group of the grouped GEMM. From
/// plan_expert_tp; gather_expert_rows moves rows there, reduce_scatter_expert_rows sums the etp ranks' partial
/// results of each rank's rows back to it (in etp-rank order, from 0: deterministic).
struct ExpertTpRows {
  int etp = 1, etp_rank = 0;
  int local_experts = 0;                // E_l
  std::vector<int64_t> counts;          // [P · E_l] rows of etp rank q for local expert e, at q · E_l + e
  std::vector<int64_t> rows;            // [P] R_q
  std::vector<int64_t> offsets;         // [E_l + 1] over the gathered rows
  std::vector<int32_t> placed;          // [R_g] the k-th row received (rank order, each rank's in its order) → its
                                        // gathered position
  std::vector<int32_t> send_all;        // [P · R] this rank's rows, once per etp rank
  std::vector<int32_t> positions;       // [R_g] rank q's rows' gathered positions, ranks in order (the reverse)

  int64_t gathered() const { return offsets.empty() ? 0 : offsets.back(); }
  /// The gathered rows as a plan over themselves (R_g "tokens", top-1, E_l experts, identity maps), for the row
  /// ops (moe_row_dot, moe_scale_rows) with per-row values [R_g, 1].
  MoeDispatch gathered_plan() const;
};

/// @brief The gathered layout from this rank's per-local-expert row offsets ([E_l + 1], the dispatch's
/// expert_offsets). Collective over `etp` (an all-gather of E_l counts); null or size 1: the rows as they are.
Result<ExpertTpRows> plan_expert_tp(comm::Communicator* etp, std::span<const int64_t> expert_offsets);
/// @brief out [R_g, F] = every etp rank's rows `in` [R, F] at their gathered positions. Collective.
Status gather_expert_rows(comm::Communicator* etp, const ExpertTpRows& g, TensorView out, TensorView in);
/// @brief out [R, F] = Σ over etp ranks q (ascending, from 0) of q's `in` [R_g, F] at this rank's rows' gathered
/// positions (the partial sums of an expert split by width), f32 or bf16 rows of one dtype, summed in f32. Collective.
Status reduce_scatter_expert_rows(const Context& ctx, comm::Communicator* etp, const ExpertTpRows& g, TensorView out,
                                  TensorView in);

/// @brief Every rank of `group` learns whether any failed a step that precedes a collective, so that all return
/// or none: this rank's own error, else (another rank failed) an error naming the ranks that did, "<name> rank(s)
/// 1, 3 <what> (see their error)", with the first failing rank's code; Ok on every rank if none failed. Collective
/// (one all-gather of a double; nothing when `group` is null or of size 1).
Status agree_on_outcome(comm::Communicator* group, const Status& mine, const char* name, const char* what);

/// @brief Token rows to the experts: out[i] (in [local expert][src][token] order) = (w ·) in[token]. Collective.
/// @param out     [N, F] written (N = d.received())
/// @param in      [T, F]
/// @param weights [T, K] f32 or empty: scale each row by its routing weight before sending
Status dispatch_rows(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out, TensorView in,
                     TensorView weights = {});

/// @brief Per-(token, k) rows to the experts: out[i] = in[assignment of row i]. Collective.
/// @param out [N, F] written;  in [T·K, F]
Status dispatch_assignments(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                            TensorView in);

/// @brief Expert outputs back to their tokens: out[t] = Σ_k (ascending expert) (w_{t,k} ·) y_{t,k}. Collective.
/// @param out      [T, F] written, rows' dtype (each token's sum in f32, rounded once)
/// @param rows     [N, F] f32 or bf16, [local expert][src][token] order (what the experts made of dispatch's out)
/// @param weights  [T, K] f32 or empty (a plain sum: the backward of dispatch_rows)
/// @param returned [R_l, F] rows' dtype or empty: receives every kept (token, k) output in this rank's permuted-row
///                 order (d.local), for the routing-weight gradient (moe_row_dot; R_l = T·K less the dropped)
Status combine_rows(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                    TensorView rows, TensorView weights = {}, TensorView returned = {});

/// @brief The reverse of dispatch_assignments: out[t·K + k] = the row its expert holds (zeros for a dropped
/// assignment). Collective.
/// @param out [T·K, F] written;  rows [N, F]
Status combine_assignments(const Context& ctx, comm::Communicator* ep, const ExpertDispatch& d, TensorView out,
                           TensorView rows);

}  // namespace vlpar::nn
