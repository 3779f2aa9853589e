// CUDA entry points behind the public ops (include/vlpar/kernels/cuda_ops.hpp). Each follows STYLE §3:
//   desc      : validated views → the family's params struct (include/vlpar/kernels/cuda/<k>_params.hpp)
//   check     : dtype compiled into this build (VLPAR_DTYPES), supported weight dtype / head_dim
//   workspace : sized by the family's heuristics, from ctx.allocator when set, else cudaMallocAsync on ctx.stream
//   run       : the dtype's launcher (generated src/kernels/cuda/<k>_<dtype>.cu) on ctx.stream, on the views' device
// The public ops check shapes, dtypes and devices before they call in here; this file re-derives only what the
// kernels index with. cmake/VlparCuda.cmake defines VLPAR_CUDA_DTYPE_<DT> for every dtype in VLPAR_DTYPES.
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "op_helpers.cuh"
#include "rmsnorm_heuristics.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/rows.hpp"
#include "vlpar/kernels/cuda/rmsnorm_params.hpp"
#include "vlpar/kernels/cuda/rotary_params.hpp"
#include "vlpar/kernels/cuda/swiglu_params.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar::cuda_impl {
namespace {

using namespace vlpar::cuda_kernels;  // NOLINT: the params structs and launchers of this file's families


Status rotary_apply(const char* op, const Context& ctx, TensorView y, TensorView x, TensorView pos,
                    const RotaryDesc& d, float sign) {
  VLPAR_CHECK(x.ndim() == 3 && y.ndim() == 3 && y.shape == x.shape && x.size(2) == d.head_dim,
              "{}: x {} and y {} must be [N_tok, H, {}]", op, x.to_string(), y.to_string(), d.head_dim);
  VLPAR_CHECK(x.stride(2) == 1 && y.stride(2) == 1, "{}: the head dim of x and y must be contiguous", op);
  VLPAR_CHECK((pos.dtype == DType::kI32 || pos.dtype == DType::kI64) && pos.stride(-1) == 1 &&
                  pos.size(-1) == x.size(0) && (pos.ndim() == 2 ? pos.size(0) : 1) == d.num_axes(),
              "{}: positions {} must be i32/i64 [{}, {}], contiguous along tokens", op, pos.to_string(),
              d.num_axes(), x.size(0));
  VLPAR_CHECK(d.head_dim > 0 && d.head_dim % 2 == 0, "{}: head_dim {} must be positive and even", op, d.head_dim);
  VLPAR_CHECK_CODE(d.head_dim / 2 <= kRotaryMaxPairs, StatusCode::kNotSupported,
                   "{}: head_dim {} exceeds the CUDA kernel's limit of {}", op, d.head_dim, 2 * kRotaryMaxPairs);
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"y", &y}, {"x", &x}, {"positions", &pos}}));
  RotaryParams p{};
  p.y = y.data;
  p.x = x.data;
  p.pos = pos.data;
  p.n_tok = x.size(0);
  p.n_heads = x.size(1);
  p.x_tok_stride = x.stride(0);
  p.x_head_stride = x.stride(1);
  p.y_tok_stride = y.stride(0);
  p.y_head_stride = y.stride(1);
  p.pos_axis_stride = pos.ndim() == 2 ? pos.stride(0) : 0;
  p.half = d.head_dim / 2;
  p.pos_is_i64 = pos.dtype == DType::kI64 ? 1 : 0;
  p.sign = sign;
  for (int j = 0; j < p.half; ++j) {  // the CPU kernel's table, evaluated by the same host code
    const RotaryFreq f = rotary_freq(d, j);
    p.inv_freq[j] = f.inv_freq;
    p.axis[j] = uint8_t(f.axis);
  }
  return on_device(op, device, [&]() -> Status {
    VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() { return rotary_run<U>(p, ctx.stream); });
    });
    return Status::Ok();
  });
}

}  // namespace

Status rmsnorm_forward(const Context& ctx, TensorView y, TensorView rstd, TensorView x, TensorView w, float eps) {
  const char* op = "rmsnorm_forward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, as_rows(x, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView yr, as_rows(y, op));
  VLPAR_CHECK(yr.rows == xr.rows && yr.cols == xr.cols && w.numel() == xr.cols && w.is_contiguous(),
              "{}: y {}, x {} and weight {} do not match", op, y.to_string(), x.to_string(), w.to_string());
  VLPAR_CHECK(rstd.empty() || (rstd.numel() == xr.rows && rstd.dtype == DType::kF32 && rstd.is_contiguous()),
              "{}: rstd {} must be f32 [{}]", op, rstd.to_string(), xr.rows);
  VLPAR_ASSIGN_OR_RETURN(const int device,
                         cuda_device_of(op, {{"y", &y}, {"rstd", &rstd}, {"x", &x}, {"weight", &w}}));
  const RmsNormForwardParams p{yr.data, optional_f32(rstd), xr.data, w.data, xr.rows, xr.cols,
                               xr.row_stride, yr.row_stride, eps};
  return on_device(op, device, [&]() -> Status {
    VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() {
        return with_weight_type<U>(op, w.dtype, [&]<class W>() { return rmsnorm_forward_run<U, W>(p, ctx.stream); });
      });
    });
    return Status::Ok();
  });
}

Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x, TensorView w,
                        TensorView rstd) {
  const char* op = "rmsnorm_backward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView xr, as_rows(x, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView dxr, as_rows(dx, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView dyr, as_rows(dy, op));
  VLPAR_CHECK(dxr.rows == xr.rows && dxr.cols == xr.cols && dyr.rows == xr.rows && dyr.cols == xr.cols &&
                  w.numel() == xr.cols && w.is_contiguous(),
              "{}: dx {}, dy {}, x {} and weight {} do not match", op, dx.to_string(), dy.to_string(), x.to_string(),
              w.to_string());
  VLPAR_CHECK(rstd.numel() == xr.rows && rstd.dtype == DType::kF32 && rstd.is_contiguous(),
              "{}: rstd {} must be f32 [{}]", op, rstd.to_string(), xr.rows);
  VLPAR_CHECK(dw.empty() || (dw.numel() == xr.cols && dw.dtype == DType::kF32 && dw.is_contiguous()),
              "{}: dw {} must be f32 [{}]", op, dw.to_string(), xr.cols);
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"x", &x},
                                                               {"weight", &w}, {"rstd", &rstd}}));
  const bool with_dw = !dw.empty();
  RmsNormBackwardParams p{dxr.data, optional_f32(dw), nullptr, dyr.data, xr.data, w.data, rstd.ptr<float>(),
                          xr.rows, xr.cols, dxr.row_stride, dyr.row_stride, xr.row_stride,
                          int(rmsnorm_backward_blocks(xr.rows, xr.cols))};
  return on_device(op, device, [&]() -> Status {
    VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() {
        return with_weight_type<U>(op, w.dtype, [&]<class W>() -> Status {
          Workspace ws(ctx, device);
          VLPAR_RETURN_IF_ERROR(ws.allocate(rmsnorm_backward_workspace_bytes(xr.rows, xr.cols, with_dw)));
          p.dw_partial = ws.ptr<float>();
          return rmsnorm_backward_run<U, W>(p, ctx.stream);
        });
      });
    });
    return Status::Ok();
  });
}

Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up) {
  const char* op = "swiglu_forward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView yr, as_rows(y, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView gr, as_rows(gate, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView ur, as_rows(up, op));
  VLPAR_CHECK(yr.rows == gr.rows && yr.cols == gr.cols && ur.rows == gr.rows && ur.cols == gr.cols &&
                  y.dtype == gate.dtype && up.dtype == gate.dtype,
              "{}: y {}, gate {} and up {} do not match", op, y.to_string(), gate.to_string(), up.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"y", &y}, {"gate", &gate}, {"up", &up}}));
  const SwigluForwardParams p{yr.data, gr.data, ur.data, gr.rows, gr.cols, yr.row_stride, gr.row_stride,
                              ur.row_stride};
  return on_device(op, device, [&]() -> Status {
    VLPAR_FLOAT_SWITCH(gate.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() { return swiglu_forward_run<U>(p, ctx.stream); });
    });
    return Status::Ok();
  });
}

Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up) {
  const char* op = "swiglu_backward";
  VLPAR_ASSIGN_OR_RETURN(const RowsView dgr, as_rows(dgate, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView dur, as_rows(dup, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView dyr, as_rows(dy, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView gr, as_rows(gate, op));
  VLPAR_ASSIGN_OR_RETURN(const RowsView ur, as_rows(up, op));
  bool same = true;
  for (const RowsView* r : {&dgr, &dur, &dyr, &ur}) same = same && r->rows == gr.rows && r->cols == gr.cols;
  for (const TensorView* v : {&dgate, &dup, &dy, &up}) same = same && v->dtype == gate.dtype;
  VLPAR_CHECK(same, "{}: dgate {}, dup {}, dy {}, gate {} and up {} do not match", op, dgate.to_string(),
              dup.to_string(), dy.to_string(), gate.to_string(), up.to_string());
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"dgate", &dgate}, {"dup", &dup}, {"dy", &dy},
                                                               {"gate", &gate}, {"up", &up}}));
  const SwigluBackwardParams p{dgr.data,       dur.data,       dyr.data,       gr.data,       ur.data,      gr.rows,
                               gr.cols,        dgr.row_stride, dur.row_stride, dyr.row_stride, gr.row_stride,
                               ur.row_stride};
  return on_device(op, device, [&]() -> Status {
    VLPAR_FLOAT_SWITCH(gate.dtype, T, op, {
      return if_compiled<T>(op, [&]<class U>() { return swiglu_backward_run<U>(p, ctx.stream); });
    });
    return Status::Ok();
  });
}

Status rotary_forward(const Context& ctx, TensorView y, TensorView x, TensorView positions, const RotaryDesc& desc) {
  return rotary_apply("rotary_forward", ctx, y, x, positions, desc, 1.f);
}

Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions,
                       const RotaryDesc& desc) {
  return rotary_apply("rotary_backward", ctx, dx, dy, positions, desc, -1.f);
}

}  // namespace vlpar::cuda_impl
