// The MPI backend: non-blocking MPI_I* collectives and point-to-point, polled under the group's timeout.
// See include/vlpar/comm/mpi_communicator.hpp for the dtype policy.
// Tests: tests/mpi/test_collectives.cpp, tests/mpi/test_watchdog.cpp (ctest --preset cpu -L mpi).
#include "vlpar/comm/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <fmt/ranges.h>

#include "comm_checks.hpp"
#include "vlpar/core/log.hpp"

namespace vlpar::comm {

struct MpiCommunicator::GroupState {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // world rank of each group rank
  bool is_world_order = true;    // group rank == world rank for every member
  std::string broken_by;         // site of the collective that timed out; empty while usable

  std::string site(const char* op) const {
    return fmt::format("{} on group '{}' (rank {} of {})", op, name, rank, size);
  }
  /// "any of ranks {1, 2, 3}" (+ " (world ranks {...})" for a sub-group) — who a collective may be waiting for.
  std::string others() const {
    std::vector<int> g, w;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      g.push_back(r);
      w.push_back(world_ranks[size_t(r)]);
    }
    std::string s = fmt::format("any of ranks {{{}}}", fmt::join(g, ", "));
    if (!is_world_order) s += fmt::format(" (world ranks {{{}}})", fmt::join(w, ", "));
    return s;
  }
  std::string peer(int p) const {
    std::string s = fmt::format("rank {}", p);
    if (!is_world_order) s += fmt::format(" (world rank {})", world_ranks[size_t(p)]);
    return s;
  }
};

namespace {

using GroupState = MpiCommunicator::GroupState;
using Clock = std::chrono::steady_clock;

std::string mpi_error_string(int err) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", err);
  return std::string(buf, size_t(len));
}

#define VLPAR_MPI_CHECK(expr, site)                                                                         \
  do {                                                                                                      \
    const int vlpar_mpi_err_ = (expr);                                                                      \
    if (vlpar_mpi_err_ != MPI_SUCCESS)                                                                      \
      return VLPAR_STATUS(::vlpar::StatusCode::kCommError, "{}: {} failed: {}", (site), #expr,             \
                          mpi_error_string(vlpar_mpi_err_));                                                \
  } while (0)

bool is_16bit_float(DType t) { return t == DType::kBF16 || t == DType::kF16; }

/// MPI type an element travels as. 16-bit floats travel as raw words (no arithmetic on them in MPI).
MPI_Datatype wire_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

/// 16-bit storage -> f32 staging (exact).
void widen(float* dst, const TensorView& src) {
  const int64_t n = src.numel();
  if (src.dtype == DType::kBF16) {
    const bf16* s = src.ptr<bf16>();
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
  } else {
    const f16* s = src.ptr<f16>();
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
  }
}
/// f32 staging -> 16-bit storage, rounding to nearest even once.
void narrow(const TensorView& dst, const float* src) {
  const int64_t n = dst.numel();
  if (dst.dtype == DType::kBF16) {
    bf16* d = dst.ptr<bf16>();
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
  } else {
    f16* d = dst.ptr<f16>();
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
  }
}

/// Memory MPI may still touch while a request is pending: staging buffers and the count arrays of alltoallv.
struct PendingBuffers {
  std::vector<float> stage_in, stage_out;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<MPI_Datatype> send_types, recv_types;  // all_to_all_rows: one per peer (freed after issuing)
};

enum class WaitKind : uint8_t { kCollective, kSend, kRecv };

class MpiWork final : public Work {
 public:
  MpiWork(const char* op, std::shared_ptr<GroupState> group, std::chrono::milliseconds timeout, WaitKind kind,
          int peer, int tag)
      : op_(op), group_(std::move(group)), timeout_(timeout), kind_(kind), peer_(peer), tag_(tag) {}

  ~MpiWork() override {
    if (request_ == MPI_REQUEST_NULL) return;
    int flag = 0;
    MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    // MPI may still write into the buffers of a pending request, and a collective request cannot be freed or
    // cancelled: keep the staging memory alive for the rest of the process (the job is about to abort anyway).
    log_warn("{}: Work destroyed while the op is pending; its staging buffers are leaked", group_->site(op_));
    new PendingBuffers(std::move(buffers_));  // NOLINT: deliberate leak, see above
  }

  PendingBuffers& buffers() { return buffers_; }
  MPI_Request* request() { return &request_; }
  /// Runs once when the request completes (rounding staging buffers back, moving in-place results).
  void set_on_complete(std::function<void()> fn) { on_complete_ = std::move(fn); }
  /// A receive must deliver exactly `count` elements of `type` (MPI accepts a shorter message silently).
  void expect_count(MPI_Datatype type, int count) {
    recv_type_ = type;
    recv_count_ = count;
  }

  Status wait() override {
    if (done_) return result_;
    const auto deadline = Clock::now() + timeout_;
    for (int64_t polls = 0; !poll(); ++polls) {
      if (Clock::now() >= deadline) return on_timeout();
      // Spin briefly for latency, then yield so oversubscribed ranks (more ranks than cores) make progress.
      if (polls > 1000) std::this_thread::yield();
    }
    return result_;
  }

  bool test() override { return done_ || poll(); }

 private:
  /// One MPI_Test (which also drives MPI's progress for every pending request of this process); on completion
  /// records the result (the receive length check, the completion hook) for wait() to return.
  bool poll() {
    int flag = 0;
    MPI_Status st;
    const int err = MPI_Test(&request_, &flag, &st);
    if (err != MPI_SUCCESS) {
      done_ = true;
      result_ = VLPAR_STATUS(StatusCode::kCommError, "{}: MPI_Test failed: {}", group_->site(op_),
                             mpi_error_string(err));
      return true;
    }
    if (!flag) return false;
    complete(st);
    return true;
  }

  /// The request completed with status `st`: a receive's length is checked, then the completion hook runs.
  void complete(MPI_Status& st) {
    request_ = MPI_REQUEST_NULL;
    done_ = true;
    if (recv_count_ >= 0) {
      int got = 0;
      MPI_Get_count(&st, recv_type_, &got);
      if (got != recv_count_) {
        result_ = VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {} sent {} elements (tag {}), the receive buffer "
                               "holds {}", group_->site(op_), group_->peer(peer_), got, tag_, recv_count_);
        return;
      }
    }
    if (on_complete_) on_complete_();
  }

  Status on_timeout() {
    const auto ms = timeout_.count();
    if (kind_ == WaitKind::kRecv) {
      // A receive can be cancelled cleanly, leaving the group usable.
      MPI_Cancel(&request_);
      MPI_Status st;
      MPI_Wait(&request_, &st);
      int cancelled = 0;
      MPI_Test_cancelled(&st, &cancelled);
      if (!cancelled) {  // the message arrived just in time
        complete(st);
        return result_;
      }
      request_ = MPI_REQUEST_NULL;
      done_ = true;  // nothing pending any more; a second wait() repeats the timeout
      result_ = VLPAR_STATUS(StatusCode::kTimeout, "{}: timed out after {} ms waiting for {} (tag {}); receive "
                             "cancelled", group_->site(op_), ms, group_->peer(peer_), tag_);
      return result_;
    }
    const std::string site = group_->site(op_);
    if (group_->broken_by.empty()) group_->broken_by = site;
    if (kind_ == WaitKind::kSend)
      return VLPAR_STATUS(StatusCode::kTimeout, "{}: timed out after {} ms waiting for {} (tag {})", site, ms,
                          group_->peer(peer_), tag_);
    return VLPAR_STATUS(StatusCode::kTimeout, "{}: timed out after {} ms waiting for {}", site, ms,
                        group_->others());
  }

  const char* op_;
  std::shared_ptr<GroupState> group_;
  std::chrono::milliseconds timeout_;
  WaitKind kind_;
  int peer_, tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  MPI_Datatype recv_type_ = MPI_BYTE;
  int recv_count_ = -1;  // receives: the expected element count
  PendingBuffers buffers_;
  std::function<void()> on_complete_;
  bool done_ = false;
  Status result_;  // of the completed op (wait() returns it again on a second call)
};

}  // namespace

// ---- session ---------------------------------------------------------------------------------------------

Result<MpiSession> MpiSession::init(int* argc, char*** argv, int required) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return MpiSession(false);
  int provided = 0;
  const int err = MPI_Init_thread(argc, argv, required, &provided);
  VLPAR_CHECK_CODE(err == MPI_SUCCESS, StatusCode::kCommError, "MPI_Init_thread failed: {}", mpi_error_string(err));
  MpiSession session(true);
  VLPAR_CHECK_CODE(provided >= required, StatusCode::kNotSupported,
                   "MPI_Init_thread: this MPI provides thread level {}, vlpar asked for {}", provided, required);
  return session;
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Result<std::unique_ptr<Communicator>> MpiSession::world(CommOptions options) const {
  VLPAR_ASSIGN_OR_RETURN(auto c, MpiCommunicator::create(MPI_COMM_WORLD, std::move(options)));
  return std::unique_ptr<Communicator>(std::move(c));
}

void MpiSession::abort_job(const Status& status, int exit_code) {
  std::fprintf(stderr, "vlpar: aborting the job: %s\n", status.to_string().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever does
}

Result<LocalRank> local_rank(MPI_Comm comm) {
  struct EnvPair {
    const char* rank;
    const char* size;
  };
  for (const EnvPair& e : {EnvPair{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                           EnvPair{"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
                           EnvPair{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, EnvPair{"LOCAL_RANK", "LOCAL_WORLD_SIZE"}}) {
    const char* r = std::getenv(e.rank);
    if (r == nullptr || *r == '\0') continue;
    char* end = nullptr;
    const long v = std::strtol(r, &end, 10);
    VLPAR_CHECK(*end == '\0' && v >= 0, "local_rank: {}='{}' is not a non-negative integer", e.rank, r);
    const char* s = std::getenv(e.size);
    const long n = s ? std::strtol(s, nullptr, 10) : 0;  // may be absent (or "2(x3)" in Slurm): then unknown
    return LocalRank{int(v), n > v ? int(n) : int(v) + 1, e.rank};
  }
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  VLPAR_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "local_rank");
  LocalRank lr;
  MPI_Comm_rank(node, &lr.rank);
  MPI_Comm_size(node, &lr.size);
  MPI_Comm_free(&node);
  lr.source = "MPI_Comm_split_type";
  return lr;
}

// ---- communicator ----------------------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm owned_comm, CommOptions options)
    : comm_(owned_comm), options_(std::move(options)), state_(std::make_shared<GroupState>()) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);  // errors become Status, never a library-side abort
  state_->name = options_.name;
  state_->rank = rank_;
  state_->size = size_;
  MPI_Group group, world;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(size_t(size_), 0);
  for (int r = 0; r < size_; ++r) ranks[size_t(r)] = r;
  state_->world_ranks.assign(size_t(size_), 0);
  MPI_Group_translate_ranks(group, size_, ranks.data(), world, state_->world_ranks.data());
  for (int r = 0; r < size_; ++r) state_->is_world_order &= state_->world_ranks[size_t(r)] == r;
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create(MPI_Comm comm, CommOptions options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  VLPAR_CHECK_CODE(initialized, StatusCode::kCommError,
                   "MpiCommunicator::create for group '{}': MPI is not initialised (create an MpiSession first)",
                   options.name);
  VLPAR_CHECK(options.timeout.count() > 0, "MpiCommunicator::create for group '{}': timeout must be positive",
              options.name);
  MPI_Comm dup = MPI_COMM_NULL;
  const std::string site = fmt::format("create group '{}'", options.name);
  VLPAR_MPI_CHECK(MPI_Comm_dup(comm, &dup), site);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(dup, std::move(options)));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a timeout peers may still be inside a collective on this communicator: leave it to MPI_Abort.
  if (!finalized && comm_ != MPI_COMM_NULL && state_->broken_by.empty()) MPI_Comm_free(&comm_);
}

Status MpiCommunicator::check_usable(const char* op) const {
  return detail::check_usable(op, *this, state_->broken_by);
}

namespace {
std::unique_ptr<MpiWork> new_work(const char* op, const std::shared_ptr<GroupState>& g, const CommOptions& o,
                                  WaitKind kind = WaitKind::kCollective, int peer = -1, int tag = -1) {
  return std::make_unique<MpiWork>(op, g, o.timeout, kind, peer, tag);
}
}  // namespace

Result<WorkHandle> MpiCommunicator::iall_reduce(TensorView inout, ReduceOp op) {
  VLPAR_RETURN_IF_ERROR(check_usable("all_reduce"));
  VLPAR_RETURN_IF_ERROR(detail::check_all_reduce(*this, inout, Device::cpu()));
  auto w = new_work("all_reduce", state_, options_);
  const int n = int(inout.numel());
  const std::string site = state_->site("all_reduce");
  if (is_16bit_float(inout.dtype)) {
    auto& stage = w->buffers().stage_in;
    stage.resize(size_t(n));
    widen(stage.data(), inout);
    VLPAR_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, stage.data(), n, MPI_FLOAT, mpi_op(op), comm_, w->request()), site);
    w->set_on_complete([inout, &stage] { narrow(inout, stage.data()); });
  } else {
    VLPAR_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, inout.data, n, wire_type(inout.dtype), mpi_op(op), comm_,
                                   w->request()),
                    site);
  }
  return WorkHandle(std::move(w));
}

Result<WorkHandle> MpiCommunicator::iall_gather(TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_usable("all_gather"));
  VLPAR_RETURN_IF_ERROR(detail::check_all_gather(*this, out, in, Device::cpu()));
  auto w = new_work("all_gather", state_, options_);
  const int n = int(in.numel());
  const MPI_Datatype t = wire_type(in.dtype);
  const std::string site = state_->site("all_gather");
  if (detail::all_gather_in_place(*this, out, in)) {
    VLPAR_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, n, t, comm_, w->request()), site);
  } else {
    VLPAR_MPI_CHECK(MPI_Iallgather(in.data, n, t, out.data, n, t, comm_, w->request()), site);
  }
  return WorkHandle(std::move(w));
}

Result<WorkHandle> MpiCommunicator::ireduce_scatter(TensorView out, TensorView in, ReduceOp op) {
  VLPAR_RETURN_IF_ERROR(check_usable("reduce_scatter"));
  VLPAR_RETURN_IF_ERROR(detail::check_reduce_scatter(*this, out, in, Device::cpu()));
  auto w = new_work("reduce_scatter", state_, options_);
  const int n = int(out.numel());
  const std::string site = state_->site("reduce_scatter");
  if (is_16bit_float(in.dtype)) {
    auto& stage_in = w->buffers().stage_in;
    auto& stage_out = w->buffers().stage_out;
    stage_in.resize(size_t(in.numel()));
    stage_out.resize(size_t(n));
    widen(stage_in.data(), in);  // read now, so an in-place `out` may be written at completion
    VLPAR_MPI_CHECK(MPI_Ireduce_scatter_block(stage_in.data(), stage_out.data(), n, MPI_FLOAT, mpi_op(op), comm_,
                                              w->request()),
                    site);
    w->set_on_complete([out, &stage_out] { narrow(out, stage_out.data()); });
  } else if (detail::reduce_scatter_in_place(*this, out, in)) {
    // MPI's in-place form leaves the result at the start of `in`; move it to this rank's block afterwards.
    VLPAR_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, in.data, n, wire_type(in.dtype), mpi_op(op), comm_,
                                              w->request()),
                    site);
    if (rank_ != 0) w->set_on_complete([out, in] { std::memmove(out.data, in.data, out.nbytes()); });
  } else {
    VLPAR_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, n, wire_type(in.dtype), mpi_op(op), comm_,
                                              w->request()),
                    site);
  }
  return WorkHandle(std::move(w));
}

Result<WorkHandle> MpiCommunicator::ibroadcast(TensorView inout, int root) {
  VLPAR_RETURN_IF_ERROR(check_usable("broadcast"));
  VLPAR_RETURN_IF_ERROR(detail::check_broadcast(*this, inout, root, Device::cpu()));
  auto w = new_work("broadcast", state_, options_);
  VLPAR_MPI_CHECK(MPI_Ibcast(inout.data, int(inout.numel()), wire_type(inout.dtype), root, comm_, w->request()),
                  state_->site("broadcast"));
  return WorkHandle(std::move(w));
}

namespace {

/// One row of `in` (numel / size(0) elements) as an MPI datatype, so that counts and displacements are in rows:
/// a committed contiguous byte type (the caller frees it), or MPI_BYTE for rows of at most one byte.
Result<MPI_Datatype> row_datatype(const TensorView& in, const std::string& site) {
  const size_t row_bytes = size_t(detail::row_elems(in)) * dtype_size(in.dtype);
  VLPAR_CHECK(row_bytes <= size_t(INT_MAX), "{}: one row is {} bytes, beyond the int range of MPI", site, row_bytes);
  MPI_Datatype row = MPI_BYTE;
  if (row_bytes > 1) {
    VLPAR_MPI_CHECK(MPI_Type_contiguous(int(row_bytes), MPI_BYTE, &row), site);
    VLPAR_MPI_CHECK(MPI_Type_commit(&row), site);
  }
  return row;
}

/// The rows [first, first + count) of an index list (or, without one, rows first … first + count − 1) as one
/// MPI datatype over `row` (displacements in rows from the buffer's start); committed. MPI_BYTE for no rows.
int indexed_rows(MPI_Datatype row, std::span<const int32_t> index, int first, int count, MPI_Datatype* type) {
  *type = MPI_BYTE;
  if (count == 0) return MPI_SUCCESS;
  int err = index.empty() ? MPI_Type_indexed(1, &count, &first, row, type)
                          : MPI_Type_create_indexed_block(count, 1, index.data() + first, row, type);
  if (err == MPI_SUCCESS) err = MPI_Type_commit(type);
  return err;
}

}  // namespace

Result<WorkHandle> MpiCommunicator::iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                                std::span<const int64_t> send_rows) {
  VLPAR_RETURN_IF_ERROR(check_usable("all_to_all"));
  VLPAR_RETURN_IF_ERROR(detail::check_all_to_all(*this, out, recv_rows, in, send_rows, Device::cpu()));
  const std::string site = state_->site("all_to_all");
  VLPAR_ASSIGN_OR_RETURN(MPI_Datatype row, row_datatype(in, site));
  auto w = new_work("all_to_all", state_, options_);
  PendingBuffers& b = w->buffers();
  const auto n = size_t(size_);
  b.send_counts.resize(n);
  b.send_displs.resize(n);
  b.recv_counts.resize(n);
  b.recv_displs.resize(n);
  int sd = 0, rd = 0;  // displacements in rows; check_all_to_all proved every prefix sum fits an int
  for (size_t p = 0; p < n; ++p) {
    b.send_counts[p] = int(send_rows[p]);
    b.recv_counts[p] = int(recv_rows[p]);
    b.send_displs[p] = sd;
    b.recv_displs[p] = rd;
    sd += b.send_counts[p];
    rd += b.recv_counts[p];
  }
  const int err = MPI_Ialltoallv(in.data, b.send_counts.data(), b.send_displs.data(), row, out.data,
                                 b.recv_counts.data(), b.recv_displs.data(), row, comm_, w->request());
  if (row != MPI_BYTE) MPI_Type_free(&row);  // allowed while the op is pending: freed when it completes
  VLPAR_MPI_CHECK(err, site);
  return WorkHandle(std::move(w));
}

Status MpiCommunicator::all_to_all_rows(TensorView out, std::span<const int64_t> recv_rows,
                                        std::span<const int32_t> recv_index, TensorView in,
                                        std::span<const int64_t> send_rows, std::span<const int32_t> send_index) {
  VLPAR_RETURN_IF_ERROR(check_usable("all_to_all_rows"));
  VLPAR_RETURN_IF_ERROR(detail::check_all_to_all_rows(*this, out, recv_rows, recv_index, in, send_rows, send_index,
                                                      Device::cpu()));
  const std::string site = state_->site("all_to_all_rows");
  VLPAR_ASSIGN_OR_RETURN(MPI_Datatype row, row_datatype(in, site));
  auto w = new_work("all_to_all_rows", state_, options_);
  PendingBuffers& b = w->buffers();
  const auto n = size_t(size_);
  b.send_counts.assign(n, 0), b.recv_counts.assign(n, 0), b.send_displs.assign(n, 0), b.recv_displs.assign(n, 0);
  b.send_types.assign(n, MPI_BYTE), b.recv_types.assign(n, MPI_BYTE);
  int err = MPI_SUCCESS, sd = 0, rd = 0;  // first row of each peer in the index lists (check_all_to_all_rows: ints)
  int self_sd = 0, self_rd = 0;           // this rank's rows to itself: copied here while MPI moves the others
  for (size_t p = 0; p < n && err == MPI_SUCCESS; ++p) {
    if (int(p) == rank_) {
      self_sd = sd, self_rd = rd;
    } else {
      err = indexed_rows(row, send_index, sd, int(send_rows[p]), &b.send_types[p]);
      if (err == MPI_SUCCESS) err = indexed_rows(row, recv_index, rd, int(recv_rows[p]), &b.recv_types[p]);
      b.send_counts[p] = send_rows[p] > 0 ? 1 : 0;
      b.recv_counts[p] = recv_rows[p] > 0 ? 1 : 0;
    }
    sd += int(send_rows[p]), rd += int(recv_rows[p]);
  }
  if (err == MPI_SUCCESS)  // byte displacements 0: the types carry the rows' places
    err = MPI_Ialltoallw(in.data, b.send_counts.data(), b.send_displs.data(), b.send_types.data(), out.data,
                         b.recv_counts.data(), b.recv_displs.data(), b.recv_types.data(), comm_, w->request());
  const auto free_types = [&] {
    for (size_t p = 0; p < n; ++p) {
      if (b.send_types[p] != MPI_BYTE) MPI_Type_free(&b.send_types[p]);
      if (b.recv_types[p] != MPI_BYTE) MPI_Type_free(&b.recv_types[p]);
    }
    if (row != MPI_BYTE) MPI_Type_free(&row);
  };
  if (err != MPI_SUCCESS) free_types();
  VLPAR_MPI_CHECK(err, site);
  const WorkHandle h(std::move(w));  // owns b: the type array must stay untouched until the op completed
  // The rows to itself (check_all_to_all_rows: send_rows[rank] == recv_rows[rank]) overlap the exchange: MPI's
  // shared-memory transport moves data only inside MPI calls, so the copy polls the request every 64 KiB.
  const size_t row_bytes = in.ndim() == 0 ? 0 : size_t(in.numel() / std::max<int64_t>(1, in.size(0))) *
                                                   dtype_size(in.dtype);
  const auto* src = static_cast<const char*>(in.data);
  auto* dst = static_cast<char*>(out.data);
  size_t polled = 0;
  for (int64_t k = 0; k < send_rows[size_t(rank_)]; ++k) {
    const int64_t from = send_index.empty() ? self_sd + k : send_index[size_t(self_sd + k)];
    const int64_t to = recv_index.empty() ? self_rd + k : recv_index[size_t(self_rd + k)];
    std::memcpy(dst + size_t(to) * row_bytes, src + size_t(from) * row_bytes, row_bytes);
    polled += row_bytes;
    if (polled >= (size_t(64) << 10)) {
      polled = 0;
      h->test();
    }
  }
  VLPAR_RETURN_IF_ERROR(h->wait());  // (after a timeout the group is unusable: the types are left to it)
  free_types();
  return Status::Ok();
}

Result<WorkHandle> MpiCommunicator::isend(TensorView t, int peer, int tag) {
  VLPAR_RETURN_IF_ERROR(check_usable("send"));
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("send", *this, t, peer, tag, Device::cpu()));
  auto w = new_work("send", state_, options_, WaitKind::kSend, peer, tag);
  VLPAR_MPI_CHECK(MPI_Isend(t.data, int(t.numel()), wire_type(t.dtype), peer, tag, comm_, w->request()),
                  state_->site("send"));
  return WorkHandle(std::move(w));
}

Result<WorkHandle> MpiCommunicator::irecv(TensorView t, int peer, int tag) {
  VLPAR_RETURN_IF_ERROR(check_usable("recv"));
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("recv", *this, t, peer, tag, Device::cpu()));
  auto w = new_work("recv", state_, options_, WaitKind::kRecv, peer, tag);
  w->expect_count(wire_type(t.dtype), int(t.numel()));
  VLPAR_MPI_CHECK(MPI_Irecv(t.data, int(t.numel()), wire_type(t.dtype), peer, tag, comm_, w->request()),
                  state_->site("recv"));
  return WorkHandle(std::move(w));
}

Status MpiCommunicator::barrier() {
  VLPAR_RETURN_IF_ERROR(check_usable("barrier"));
  auto w = new_work("barrier", state_, options_);
  VLPAR_MPI_CHECK(MPI_Ibarrier(comm_, w->request()), state_->site("barrier"));
  return w->wait();
}

Result<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key, CommOptions options) {
  VLPAR_RETURN_IF_ERROR(check_usable("split"));
  const std::string site = state_->site("split");
  VLPAR_CHECK(color >= 0, "{}: color {} must be >= 0 (every rank joins one sub-group)", site, color);
  VLPAR_CHECK(options.timeout.count() > 0, "{}: timeout of new group '{}' must be positive", site, options.name);
  MPI_Comm sub = MPI_COMM_NULL;
  VLPAR_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub), site);
  return std::unique_ptr<Communicator>(new MpiCommunicator(sub, std::move(options)));
}

}  // namespace vlpar::comm
