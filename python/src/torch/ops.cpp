// BackendHcomm's operations: each checks its tensors and options, then
// queues a WorkHcomm whose parts post hcomm's non-blocking calls. Tensors are
// used where they lie (CPU, contiguous); only the list forms whose tensors
// are not adjacent in memory go through a flat staging tensor.
#include "backend.hpp"

namespace hcomm_torch {

// ---- devices: the one place that decides how a tensor's device is served ----

// CPU tensors: the worker thread (host memory). CUDA tensors: libhcomm's
// stream-ordered calls once it has them; refused until then, before
// anything is queued, so that no rank computes a wrong result.
static void device_plan(const at::Tensor& t, const char* fn) {
  if (t.device().is_cpu()) return;
  TORCH_CHECK(!t.device().is_cuda(), "hcomm ", fn, ": ", t.device(),
              " tensors need libhcomm's GPU memory support (stream-ordered hcomm calls), which this build "
              "of hcomm does not have yet; use CPU tensors, or another backend for CUDA "
              "(init_process_group(\"cpu:hcomm,cuda:nccl\"))");
  TORCH_CHECK(false, "hcomm ", fn, ": tensors on ", t.device(), ": hcomm takes CPU tensors");
}

static int hdtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return HCOMM_INT8;
    case at::kByte: return HCOMM_UINT8;
    case at::kInt: return HCOMM_INT32;
    case at::kLong: return HCOMM_INT64;
    case at::kUInt32: return HCOMM_UINT32;
    case at::kUInt64: return HCOMM_UINT64;
    case at::kHalf: return HCOMM_FLOAT16;
    case at::kBFloat16: return HCOMM_BFLOAT16;
    case at::kFloat: return HCOMM_FLOAT32;
    case at::kDouble: return HCOMM_FLOAT64;
    default: return -1;
  }
}

static void check_tensor(const at::Tensor& t, const char* fn) {
  TORCH_CHECK(t.defined(), "hcomm ", fn, ": undefined tensor");
  device_plan(t, fn);
  TORCH_CHECK(t.layout() == c10::kStrided, "hcomm ", fn, ": tensors must be dense (strided), not ", t.layout());
  TORCH_CHECK(t.is_contiguous(), "hcomm ", fn, ": tensors must be contiguous (hcomm does not copy)");
}

// root_tensor: the options' rootTensor, where they have one.
static void check_single(const std::vector<at::Tensor>& ts, const char* fn, int64_t root_tensor = 0) {
  TORCH_CHECK(ts.size() == 1, "hcomm ", fn, ": takes exactly one tensor (one device per process), got ",
              ts.size());
  check_tensor(ts[0], fn);
  TORCH_CHECK(root_tensor == 0, "hcomm ", fn, ": rootTensor must be 0");
}

// whole (the input or output: what) holds size blocks of part's elements.
static void check_whole(const at::Tensor& whole, const at::Tensor& part, int64_t size, const char* fn,
                        const char* what) {
  check_tensor(whole, fn);
  check_tensor(part, fn);
  TORCH_CHECK(whole.numel() == part.numel() * size && whole.scalar_type() == part.scalar_type(), "hcomm ", fn,
              ": the ", what, " must hold ", size, " x ", part.numel(), " elements of ", part.scalar_type(),
              ", not ", whole.numel(), " of ", whole.scalar_type());
}

// How a tensor travels: its hcomm dtype, or bytes (bool, int16, complex...).
struct Xfer {
  hcomm_dtype_t dt;
  size_t scale;  // transfer units per element
};
static Xfer xfer(const at::Tensor& t) {
  int d = hdtype(t.scalar_type());
  if (d >= 0) return {(hcomm_dtype_t)d, 1};
  return {HCOMM_UINT8, (size_t)t.element_size()};
}

static hcomm_dtype_t reducible(const at::Tensor& t, const char* fn) {
  int d = hdtype(t.scalar_type());
  TORCH_CHECK(d >= 0, "hcomm ", fn, ": hcomm does not reduce ", t.scalar_type(),
              " (int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64)");
  return (hcomm_dtype_t)d;
}

// The reduction asked for: one hcomm does itself, a bitwise one (an allgather
// and a local reduction in rank order), or PREMUL_SUM (scale, then SUM).
struct Red {
  enum Kind { NATIVE, BITWISE, PREMUL } kind;
  hcomm_op_t op;
  c10d::ReduceOp::RedOpType bit;
  double factor = 1.0;
  at::Tensor factor_t;
};
static Red map_op(const c10d::ReduceOp& op, const char* fn) {
  Red r{Red::NATIVE, HCOMM_SUM, op.op_};
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = HCOMM_SUM; break;
    case c10d::ReduceOp::AVG: r.op = HCOMM_AVG; break;
    case c10d::ReduceOp::PRODUCT: r.op = HCOMM_PROD; break;
    case c10d::ReduceOp::MIN: r.op = HCOMM_MIN; break;
    case c10d::ReduceOp::MAX: r.op = HCOMM_MAX; break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: r.kind = Red::BITWISE; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.kind = Red::PREMUL;
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "hcomm ", fn, ": PREMUL_SUM without its factor (make it with dist._make_nccl_premul_sum)");
      if (s->tensor_factor.defined())
        r.factor_t = s->tensor_factor;
      else
        r.factor = s->double_factor;
      break;
    }
    default: TORCH_CHECK(false, "hcomm ", fn, ": unknown ReduceOp ", (int)op.op_);
  }
  return r;
}

static void premultiply(at::Tensor& t, const Red& r) {
  if (r.factor_t.defined())
    t.mul_(r.factor_t.to(t.device()));
  else
    t.mul_(r.factor);
}

// rows [size, n] reduced bitwise over dim 0 in rank order.
static at::Tensor reduce_rows(const at::Tensor& rows, c10d::ReduceOp::RedOpType bit) {
  at::Tensor acc = rows[0].clone();
  for (int64_t j = 1; j < rows.size(0); j++) {
    if (bit == c10d::ReduceOp::BAND)
      acc.bitwise_and_(rows[j]);
    else if (bit == c10d::ReduceOp::BOR)
      acc.bitwise_or_(rows[j]);
    else
      acc.bitwise_xor_(rows[j]);
  }
  return acc;
}

static void check_bitwise(const at::Tensor& t, const char* fn) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/true), "hcomm ", fn,
              ": BAND/BOR/BXOR need an integer or bool tensor, not ", t.scalar_type());
}

// Are ts (same numel each) laid out back to back from ts[0]?
static bool adjacent(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return true;
  const char* base = (const char*)ts[0].data_ptr();
  size_t nb = ts[0].numel() * ts[0].element_size();
  for (size_t j = 0; j < ts.size(); j++)
    if ((const char*)ts[j].data_ptr() != base + j * nb) return false;
  return true;
}

static void check_list(const std::vector<at::Tensor>& ts, const at::Tensor& like, size_t n, const char* fn,
                       const char* what) {
  TORCH_CHECK(ts.size() == n, "hcomm ", fn, ": ", what, " has ", ts.size(), " tensors for ", n, " ranks");
  for (const auto& t : ts) {
    check_tensor(t, fn);
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), "hcomm ", fn,
                ": every tensor of ", what, " must have ", like.numel(), " elements of ", like.scalar_type());
  }
}

// flat <- ts back to back (flat holds their elements in a row).
static void pack(at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t off = 0;
  for (const auto& t : ts) {
    flat.narrow(0, off, t.numel()).copy_(t.view({-1}));
    off += t.numel();
  }
}

// ts <- flat, the inverse of pack.
static void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t off = 0;
  for (const auto& t : ts) {
    t.view({-1}).copy_(flat.narrow(0, off, t.numel()));
    off += t.numel();
  }
}

// ---- helpers of the class -------------------------------------------------------

void BackendHcomm::check_root(int root, const char* fn) const {
  TORCH_CHECK(root >= 0 && root < size_, "hcomm ", fn, ": root ", root, " out of range for ", size_, " ranks");
}

// The root's list (what: "input" or "output") of one tensor like `like` per
// rank; the other ranks take none (an empty list).
std::vector<at::Tensor> BackendHcomm::root_list(const std::vector<std::vector<at::Tensor>>& lists,
                                                const at::Tensor& like, int root, const char* fn,
                                                const std::string& what) const {
  if (rank_ != root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "hcomm ", fn, ": only the root takes an ",
                what, " list");
    return {};
  }
  TORCH_CHECK(lists.size() == 1, "hcomm ", fn, ": one ", what, " list on the root");
  check_list(lists[0], like, size_, fn, ("the " + what + " list").c_str());
  return lists[0];
}

// Where a gather of like's elements into outs lands: outs itself when its
// tensors lie back to back, or a staging tensor copied out after.
void* BackendHcomm::gather_target(const WorkPtr& w, const std::vector<at::Tensor>& outs, const at::Tensor& like) {
  if (adjacent(outs)) {
    w->keep.insert(w->keep.end(), outs.begin(), outs.end());
    return outs[0].data_ptr();
  }
  at::Tensor flat = at::empty({(int64_t)size_ * like.numel()}, like.options());
  w->keep.push_back(flat);
  w->after = [flat, outs]() mutable { unpack(flat, outs); };
  return flat.data_ptr();
}

// allgather of t's elements into rows [size, numel] (bitwise reductions).
void BackendHcomm::gather_rows(const WorkPtr& w, const at::Tensor& t, const at::Tensor& rows) {
  Xfer x = xfer(t);
  const void* sp = t.data_ptr();
  void* rp = rows.data_ptr();
  size_t n = t.numel() * x.scale;
  w->keep = {t, rows};
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); }};
}

// Counts and displacements (transfer units) of alltoall_base's splits along dim 0.
void BackendHcomm::splits(const at::Tensor& t, const std::vector<int64_t>& sp, size_t scale, const char* fn,
                          const char* what, std::vector<size_t>& counts, std::vector<size_t>& displs) const {
  int64_t rows = t.dim() ? t.size(0) : t.numel();
  int64_t row = rows ? t.numel() / rows : 0;
  counts.assign(size_, 0);
  displs.assign(size_, 0);
  if (sp.empty()) {
    TORCH_CHECK(rows % size_ == 0, "hcomm ", fn, ": the ", what, "'s ", rows, " rows do not split evenly over ",
                size_, " ranks");
    for (int j = 0; j < size_; j++) counts[j] = rows / size_ * row * scale;
  } else {
    TORCH_CHECK(sp.size() == (size_t)size_, "hcomm ", fn, ": ", sp.size(), " ", what, " splits for ", size_,
                " ranks");
    int64_t sum = 0;
    for (int j = 0; j < size_; j++) {
      TORCH_CHECK(sp[j] >= 0, "hcomm ", fn, ": negative split");
      counts[j] = sp[j] * row * scale;
      sum += sp[j];
    }
    TORCH_CHECK(sum == rows, "hcomm ", fn, ": the ", what, " splits sum to ", sum, ", the tensor has ", rows,
                " rows");
  }
  size_t off = 0;
  for (int j = 0; j < size_; j++) {
    displs[j] = off;
    off += counts[j];
  }
}

// A bitwise reduction of t: an allgather of rows, reduced here in rank order
// into t where write (every rank for allreduce, the root for reduce).
static void bitwise_after(const WorkPtr& w, const at::Tensor& t, const at::Tensor& rows, const Red& red,
                          bool write) {
  auto bit = red.bit;
  w->after = [t, rows, bit, write]() mutable {
    if (write) t.view({-1}).copy_(reduce_rows(rows, bit));
  };
}

// ---- the operations ---------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendHcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  const char* fn = "broadcast";
  check_single(tensors, fn, opts.rootTensor);
  int root = (int)opts.rootRank;
  check_root(root, fn);
  at::Tensor t = tensors[0];
  auto w = make_work(OpType::BROADCAST, fn, tensors, opts.timeout);
  Xfer x = xfer(t);
  void* p = t.data_ptr();
  size_t n = t.numel() * x.scale;
  w->keep = {t};
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ibroadcast(p, n, x.dt, root, c, r); }};
  return enqueue(w);
}

// One in-place allreduce of t (a part; PREMUL's scaling in `stage`).
static PostFn allreduce_part(const at::Tensor& t, const Red& red, const char* fn) {
  hcomm_dtype_t dt = reducible(t, fn);
  void* p = t.data_ptr();
  size_t n = t.numel();
  hcomm_op_t op = red.op;
  return [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallreduce(p, p, n, dt, op, c, r); };
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  const char* fn = "allreduce";
  check_single(tensors, fn);
  TORCH_CHECK(!opts.sparseIndices.has_value(), "hcomm allreduce: sparse tensors are not supported");
  at::Tensor t = tensors[0];
  Red red = map_op(opts.reduceOp, fn);
  auto w = make_work(OpType::ALLREDUCE, fn, tensors, opts.timeout);
  if (red.kind == Red::BITWISE) {
    check_bitwise(t, fn);
    at::Tensor rows = at::empty({(int64_t)size_, t.numel()}, t.options());
    gather_rows(w, t, rows);
    bitwise_after(w, t, rows, red, true);
    return enqueue(w);
  }
  w->parts = {allreduce_part(t, red, fn)};
  w->keep = {t};
  if (red.kind == Red::PREMUL) w->before = [t, red]() mutable { premultiply(t, red); };
  return enqueue(w);
}

// One hcomm group of in-place allreduces (small ones fused by hcomm).
c10::intrusive_ptr<c10d::Work> BackendHcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceCoalescedOptions& opts) {
  const char* fn = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "hcomm ", fn, ": no tensors");
  Red red = map_op(opts.reduceOp, fn);
  TORCH_CHECK(red.kind != Red::BITWISE, "hcomm ", fn, ": BAND/BOR/BXOR: use allreduce per tensor");
  auto w = make_work(OpType::ALLREDUCE_COALESCED, fn, tensors, opts.timeout);
  for (const auto& t : tensors) {
    check_tensor(t, fn);
    w->parts.push_back(allreduce_part(t, red, fn));
  }
  w->grouped = true;
  w->keep = tensors;
  if (red.kind == Red::PREMUL) {
    std::vector<at::Tensor> ts = tensors;
    w->before = [ts, red]() mutable {
      for (auto& t : ts) premultiply(t, red);
    };
  }
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  const char* fn = "reduce";
  check_single(tensors, fn, opts.rootTensor);
  at::Tensor t = tensors[0];
  int root = (int)opts.rootRank;
  check_root(root, fn);
  Red red = map_op(opts.reduceOp, fn);
  auto w = make_work(OpType::REDUCE, fn, tensors, opts.timeout);
  if (red.kind == Red::BITWISE) {
    check_bitwise(t, fn);
    at::Tensor rows = at::empty({(int64_t)size_, t.numel()}, t.options());
    gather_rows(w, t, rows);
    bitwise_after(w, t, rows, red, rank_ == root);
    return enqueue(w);
  }
  hcomm_dtype_t dt = reducible(t, fn);
  void* p = t.data_ptr();
  void* rp = rank_ == root ? p : nullptr;
  size_t n = t.numel();
  hcomm_op_t op = red.op;
  w->keep = {t};
  if (red.kind == Red::PREMUL) w->before = [t, red]() mutable { premultiply(t, red); };
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ireduce(p, rp, n, dt, op, root, c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& opts) {
  const char* fn = "allgather";
  check_single(inputs, fn);
  TORCH_CHECK(outputs.size() == 1, "hcomm allgather: one output list (one device per process)");
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  check_list(outs, in, size_, fn, "the output list");
  auto w = make_work(OpType::ALLGATHER, fn, outs, opts.timeout);
  Xfer x = xfer(in);
  size_t n = in.numel() * x.scale;
  const void* sp = in.data_ptr();
  w->keep = {in};
  void* rp = gather_target(w, outs, in);
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); }};
  return enqueue(w);
}

static PostFn allgather_part(const at::Tensor& output, const at::Tensor& input) {
  Xfer x = xfer(input);
  size_t n = input.numel() * x.scale;
  const void* sp = input.data_ptr();
  void* rp = output.data_ptr();
  return [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); };
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions& opts) {
  const char* fn = "_allgather_base";
  check_whole(output, input, size_, fn, "output");
  auto w = make_work(OpType::_ALLGATHER_BASE, fn, {output}, opts.timeout);
  w->keep = {input, output};
  w->parts = {allgather_part(output, input)};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& opts) {
  const char* fn = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "hcomm ", fn, ": ", outputs.size(), " outputs for ", inputs.size(),
              " inputs");
  auto w = make_work(OpType::ALLGATHER_COALESCED, fn, outputs, opts.timeout);
  for (size_t j = 0; j < inputs.size(); j++) {
    check_whole(outputs[j], inputs[j], size_, fn, "output");
    w->parts.push_back(allgather_part(outputs[j], inputs[j]));
    w->keep.push_back(inputs[j]);
    w->keep.push_back(outputs[j]);
  }
  w->grouped = true;
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  const char* fn = "gather";
  check_single(inputs, fn);
  at::Tensor in = inputs[0];
  int root = (int)opts.rootRank;
  check_root(root, fn);
  std::vector<at::Tensor> outs = root_list(outputs, in, root, fn, "output");
  auto w = make_work(OpType::GATHER, fn, outs, opts.timeout);
  Xfer x = xfer(in);
  size_t n = in.numel() * x.scale;
  const void* sp = in.data_ptr();
  w->keep = {in};
  void* rp = nullptr;
  if (rank_ == root) rp = gather_target(w, outs, in);
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_igather(sp, rp, n, x.dt, root, c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  const char* fn = "scatter";
  check_single(outputs, fn);
  at::Tensor out = outputs[0];
  int root = (int)opts.rootRank;
  check_root(root, fn);
  std::vector<at::Tensor> ins = root_list(inputs, out, root, fn, "input");
  auto w = make_work(OpType::SCATTER, fn, outputs, opts.timeout);
  Xfer x = xfer(out);
  size_t n = out.numel() * x.scale;
  void* rp = out.data_ptr();
  w->keep = {out};
  const void* sp = nullptr;
  if (rank_ == root && !adjacent(ins)) {
    at::Tensor flat = at::empty({(int64_t)size_ * out.numel()}, out.options());
    w->keep.push_back(flat);
    w->before = [flat, ins]() mutable { pack(flat, ins); };
    sp = flat.data_ptr();
  } else if (rank_ == root) {
    sp = ins[0].data_ptr();
    w->keep.insert(w->keep.end(), ins.begin(), ins.end());
  }
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iscatter(sp, rp, n, x.dt, root, c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ReduceScatterOptions& opts) {
  const char* fn = "reduce_scatter";
  check_single(outputs, fn);
  TORCH_CHECK(inputs.size() == 1, "hcomm reduce_scatter: one input list (one device per process)");
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  check_list(ins, out, size_, fn, "the input list");
  Red red = map_op(opts.reduceOp, fn);
  auto w = make_work(OpType::REDUCE_SCATTER, fn, outputs, opts.timeout);
  bool direct = adjacent(ins) && red.kind == Red::NATIVE;
  at::Tensor flat = direct ? at::Tensor() : at::empty({(int64_t)size_ * out.numel()}, out.options());
  if (!direct)
    w->before = [flat, ins, red]() mutable {
      pack(flat, ins);
      if (red.kind == Red::PREMUL) premultiply(flat, red);
    };
  if (red.kind == Red::BITWISE) {
    check_bitwise(out, fn);
    at::Tensor rows = at::empty({(int64_t)size_, flat.numel()}, out.options());
    gather_rows(w, flat, rows);
    w->keep.push_back(out);
    auto bit = red.bit;
    int64_t rk = rank_, m = out.numel();
    w->after = [out, rows, bit, rk, m]() mutable { out.view({-1}).copy_(reduce_rows(rows, bit).narrow(0, rk * m, m)); };
    return enqueue(w);
  }
  hcomm_dtype_t dt = reducible(out, fn);
  size_t n = out.numel();
  void* rp = out.data_ptr();
  const void* sp = direct ? ins[0].data_ptr() : flat.data_ptr();
  hcomm_op_t op = red.op;
  w->keep = direct ? ins : std::vector<at::Tensor>{flat};
  w->keep.push_back(out);
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ireduce_scatter(sp, rp, n, dt, op, c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const char* fn = "_reduce_scatter_base";
  check_whole(input, output, size_, fn, "input");
  std::vector<at::Tensor> outs{output};
  std::vector<std::vector<at::Tensor>> ins{input.view({-1}).chunk(size_)};
  if (output.numel() == 0) ins[0].assign(size_, output.view({-1}));
  return reduce_scatter(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  const char* fn = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "hcomm ", fn, ": ", outputs.size(), " outputs for ", inputs.size(),
              " inputs");
  Red red = map_op(opts.reduceOp, fn);
  TORCH_CHECK(red.kind != Red::BITWISE, "hcomm ", fn, ": BAND/BOR/BXOR: use reduce_scatter per tensor");
  auto w = make_work(OpType::COALESCED, fn, outputs, opts.timeout);
  std::vector<at::Tensor> staged;
  for (size_t j = 0; j < inputs.size(); j++) {
    check_whole(inputs[j], outputs[j], size_, fn, "input");
    hcomm_dtype_t dt = reducible(outputs[j], fn);
    at::Tensor in = inputs[j];
    if (red.kind == Red::PREMUL) {  // scale a copy: the input is not the caller's to change
      in = at::empty_like(inputs[j]);
      staged.push_back(inputs[j]);
      staged.push_back(in);
    }
    const void* sp = in.data_ptr();
    void* rp = outputs[j].data_ptr();
    size_t n = outputs[j].numel();
    hcomm_op_t op = red.op;
    w->parts.push_back([=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ireduce_scatter(sp, rp, n, dt, op, c, r); });
    w->keep.push_back(in);
    w->keep.push_back(outputs[j]);
  }
  if (!staged.empty())
    w->before = [staged, red]() mutable {
      for (size_t j = 0; j < staged.size(); j += 2) {
        staged[j + 1].copy_(staged[j]);
        premultiply(staged[j + 1], red);
      }
    };
  w->grouped = true;
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& outSplits,
                                                           std::vector<int64_t>& inSplits,
                                                           const c10d::AllToAllOptions& opts) {
  const char* fn = "alltoall_base";
  check_tensor(input, fn);
  check_tensor(output, fn);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "hcomm ", fn, ": input and output dtypes differ");
  auto w = make_work(OpType::ALLTOALL_BASE, fn, {output}, opts.timeout);
  Xfer x = xfer(input);
  const void* sp = input.data_ptr();
  void* rp = output.data_ptr();
  w->keep = {input, output};
  if (outSplits.empty() && inSplits.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0, "hcomm ", fn,
                ": input and output must hold the same number of elements, a multiple of ", size_);
    size_t n = input.numel() / size_ * x.scale;
    w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ialltoall(sp, rp, n, x.dt, c, r); }};
    return enqueue(w);
  }
  std::vector<size_t> sc, sd, rc, rd;
  splits(input, inSplits, x.scale, fn, "input", sc, sd);
  splits(output, outSplits, x.scale, fn, "output", rc, rd);
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) {
    return hcomm_ialltoallv(sp, sc.data(), sd.data(), rp, rc.data(), rd.data(), x.dt, c, r);
  }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  const char* fn = "alltoall";
  TORCH_CHECK(inputs.size() == (size_t)size_ && outputs.size() == (size_t)size_, "hcomm ", fn,
              ": one input and one output tensor per rank");
  for (size_t j = 0; j < inputs.size(); j++) {
    check_tensor(inputs[j], fn);
    check_tensor(outputs[j], fn);
    TORCH_CHECK(inputs[j].scalar_type() == inputs[0].scalar_type() &&
                    outputs[j].scalar_type() == inputs[0].scalar_type(),
                "hcomm ", fn, ": tensors of one dtype only");
  }
  auto w = make_work(OpType::ALLTOALL, fn, outputs, opts.timeout);
  Xfer x = xfer(inputs[0]);
  std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
  int64_t stot = 0, rtot = 0;
  for (int j = 0; j < size_; j++) {
    sd[j] = stot * x.scale;
    sc[j] = inputs[j].numel() * x.scale;
    stot += inputs[j].numel();
    rd[j] = rtot * x.scale;
    rc[j] = outputs[j].numel() * x.scale;
    rtot += outputs[j].numel();
  }
  at::Tensor sflat = at::empty({stot}, inputs[0].options());
  at::Tensor rflat = at::empty({rtot}, inputs[0].options());
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  void* sp = sflat.data_ptr();
  void* rp = rflat.data_ptr();
  w->keep = {sflat, rflat};
  w->before = [sflat, ins]() mutable { pack(sflat, ins); };
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) {
    return hcomm_ialltoallv(sp, sc.data(), sd.data(), rp, rc.data(), rd.data(), x.dt, c, r);
  }};
  w->after = [rflat, outs]() mutable { unpack(rflat, outs); };
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::barrier(const c10d::BarrierOptions& opts) {
  auto w = make_work(OpType::BARRIER, "barrier", {}, opts.timeout);
  w->parts = {[](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ibarrier(c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const char* fn = "send";
  check_single(tensors, fn);
  at::Tensor t = tensors[0];
  auto w = make_work(OpType::SEND, fn, tensors, c10d::kUnsetTimeout);
  Xfer x = xfer(t);
  const void* p = t.data_ptr();
  size_t n = t.numel() * x.scale;
  w->keep = {t};
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_isend(p, n, x.dt, dst, tag, c, r); }};
  return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const char* fn = "recv";
  check_single(tensors, fn);
  at::Tensor t = tensors[0];
  auto w = make_work(OpType::RECV, fn, tensors, c10d::kUnsetTimeout);
  w->src_rank = src;
  Xfer x = xfer(t);
  void* p = t.data_ptr();
  size_t n = t.numel() * x.scale;
  w->keep = {t};
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_irecv(p, n, x.dt, src, tag, c, r); }};
  return enqueue(w);
}

// dist.recv(t) without src: HCOMM_ANY_SOURCE; the work's sourceRank() is the
// group rank of the sender once it is done.
c10::intrusive_ptr<c10d::Work> BackendHcomm::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* fn = "recvAnysource";
  check_single(tensors, fn);
  at::Tensor t = tensors[0];
  auto w = make_work(OpType::RECVANYSOURCE, fn, tensors, c10d::kUnsetTimeout);
  w->src_rank = -1;
  int* srcp = &w->src_rank;  // the work outlives its request
  Xfer x = xfer(t);
  void* p = t.data_ptr();
  size_t n = t.numel() * x.scale;
  w->keep = {t};
  w->parts = {[=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_irecv_any(p, n, x.dt, tag, c, srcp, r); }};
  return enqueue(w);
}

}  // namespace hcomm_torch
