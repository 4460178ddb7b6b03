// hcomm._torch_backend: a c10d::ProcessGroup (torch 1.13) on libhcomm, the
// backend "hcomm" of torch.distributed (registered by `import hcomm.torch`).
//
// Every operation becomes a WorkHcomm queued to the group's one worker
// thread, which posts it with hcomm's non-blocking call (in the order the
// caller issued them: the order every rank issues them) and polls all
// in-flight requests with hcomm_test. Polling, not hcomm_wait: a blocking
// wait would hold libhcomm's lock, and a send queued behind it could be the
// very message a peer needs first. Every hcomm call takes the process-wide
// lock of hcomm._hcomm (hcomm_capi.h), so the Python module and any number
// of groups share libhcomm safely. Tensors are used where they lie (CPU,
// contiguous); only the list forms whose tensors are not adjacent in memory
// go through a flat staging tensor.
#include <torch/extension.h>

#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <sched.h>
#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <hcomm.h>

#include "hcomm_capi.h"

namespace hcomm_torch {

namespace py = pybind11;
using c10d::OpType;
using Clock = std::chrono::steady_clock;

static const hcpy_capi_t* capi;

struct LibLock {
  LibLock() { capi->lock(); }
  ~LibLock() { capi->unlock(); }
};

// The failure of an hcomm call, read on the thread that made it.
static std::string hcomm_message(hcomm_status_t st) {
  const char* m = hcomm_last_error();
  return std::string(m && *m ? m : hcomm_strerror(st)) + " [" + hcpy_status_name(st) + "]";
}

static int hdtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return HCOMM_INT8;
    case at::kByte: return HCOMM_UINT8;
    case at::kInt: return HCOMM_INT32;
    case at::kLong: return HCOMM_INT64;
    case at::kHalf: return HCOMM_FLOAT16;
    case at::kBFloat16: return HCOMM_BFLOAT16;
    case at::kFloat: return HCOMM_FLOAT32;
    case at::kDouble: return HCOMM_FLOAT64;
    default: return -1;
  }
}

static void check_tensor(const at::Tensor& t, const char* fn) {
  TORCH_CHECK(t.defined(), "hcomm ", fn, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "hcomm ", fn, ": tensors must be on the CPU, not ", t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "hcomm ", fn, ": tensors must be dense (strided)");
  TORCH_CHECK(t.is_contiguous(), "hcomm ", fn, ": tensors must be contiguous (hcomm does not copy)");
}

// root_tensor: the options' rootTensor, where they have one.
static void check_single(const std::vector<at::Tensor>& ts, const char* fn, int64_t root_tensor = 0) {
  TORCH_CHECK(ts.size() == 1, "hcomm ", fn, ": takes exactly one tensor (one CPU device per process), got ",
              ts.size());
  check_tensor(ts[0], fn);
  TORCH_CHECK(root_tensor == 0, "hcomm ", fn, ": rootTensor must be 0");
}

// The input and the output of a call on two tensors.
static void check_io(const at::Tensor& input, const at::Tensor& output, const char* fn) {
  check_tensor(input, fn);
  check_tensor(output, fn);
}

// whole (the input or output: what) holds size blocks of part's elements.
static void check_whole(const at::Tensor& whole, const at::Tensor& part, int64_t size, const char* fn,
                        const char* what) {
  TORCH_CHECK(whole.numel() == part.numel() * size && whole.scalar_type() == part.scalar_type(), "hcomm ", fn,
              ": the ", what, " must hold ", size, " x ", part.numel(), " elements of ", part.scalar_type());
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
              " (int8, uint8, int32, int64, float16, bfloat16, float32, float64)");
  return (hcomm_dtype_t)d;
}

// The reduction asked for: one hcomm does itself, a bitwise one (done as an
// allgather and a local reduction in rank order), or PREMUL_SUM (scale, then SUM).
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
      r.op = HCOMM_SUM;
      auto* s = static_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "hcomm ", fn, ": PREMUL_SUM without its factor");
      if (!s->tensor_factors.empty())
        r.factor_t = s->tensor_factors[0];
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

static void check_list(const std::vector<at::Tensor>& ts, const at::Tensor& like, size_t n,
                       const char* fn, const char* what) {
  TORCH_CHECK(ts.size() == n, "hcomm ", fn, ": ", what, " has ", ts.size(), " tensors for ", n, " ranks");
  for (const auto& t : ts) {
    check_tensor(t, fn);
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), "hcomm ", fn,
                ": every tensor of ", what, " must have ", like.numel(), " elements of ",
                like.scalar_type());
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

using PostFn = std::function<hcomm_status_t(hcomm_comm_t, hcomm_request_t*)>;

class WorkHcomm : public c10d::Work {
 public:
  WorkHcomm(int rank, OpType type, const char* name, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        name(name),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override {
    TORCH_CHECK(src_rank >= 0, "sourceRank() is only for recv work");
    return src_rank;
  }

  // Worker thread, without the hcomm lock.
  void complete(std::exception_ptr e) {
    if (!e && after) {
      try {
        after();
      } catch (...) {
        e = std::current_exception();
      }
    }
    post = nullptr;
    after = nullptr;
    keep.clear();
    finish(e);
    if (e)
      future_->setError(e);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

  const char* name;
  PostFn post;                  // posts the request (worker thread, under the hcomm lock)
  std::function<void()> after;  // on success: copies out of staging (worker thread, no lock)
  std::vector<at::Tensor> keep; // what the request reads or writes, alive until done
  hcomm_request_t req = nullptr;
  Clock::time_point deadline;
  bool timed_out = false;
  int src_rank = -1;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

using WorkPtr = c10::intrusive_ptr<WorkHcomm>;

class ProcessGroupHcomm : public c10d::ProcessGroup {
 public:
  ProcessGroupHcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size), timeout_(timeout) {
    char msg[1024] = "";
    hcomm_status_t st;
    bool subset = false;
    if (capi->initialized()) {
      // hcomm.init() (or another group) made the world already: take a hold.
      st = capi->world_acquire(nullptr, msg, sizeof(msg));
      TORCH_CHECK(st == HCOMM_OK, "hcomm: ", msg);
      int wsize = hcomm_comm_size(hcomm_comm_world());
      if (size > wsize) {
        capi->world_release();
        TORCH_CHECK(false, "hcomm: a process group of ", size, " ranks over a world of ", wsize);
      }
      subset = size < wsize;
    } else {
      std::string url, key;
      if (rank == 0) {
        char u[256], k[64];
        st = hcomm_bootstrap_address(u, sizeof(u), k, sizeof(k));
        TORCH_CHECK(st == HCOMM_OK, "hcomm: ", hcomm_message(st));
        url = u;
        key = k;
        store->set("hcomm/bootstrap", std::vector<uint8_t>(url.begin(), url.end()));
        store->set("hcomm/key", std::vector<uint8_t>(key.begin(), key.end()));
      } else {
        auto u = store->get("hcomm/bootstrap");
        auto k = store->get("hcomm/key");
        url.assign(u.begin(), u.end());
        key.assign(k.begin(), k.end());
      }
      hcomm_init_params_t p = {rank, size, -1, -1, url.c_str(), key.c_str()};
      st = capi->world_acquire(&p, msg, sizeof(msg));
      TORCH_CHECK(st == HCOMM_OK, "hcomm: hcomm_init_rank(rank ", rank, " of ", size, ", ", url,
                  "): ", msg, " [", hcpy_status_name(st), "]");
    }
    if (subset) {
      // A group of some of the world's ranks: torch constructs it on the
      // members alone, so hcomm_comm_split (every world rank) cannot make
      // it. The members learn one another's world ranks through the group's
      // store (prefixed per group) and make it with hcomm_comm_create_group.
      std::vector<int> members;
      int tag = -1;
      try {
        members = member_ranks(store, rank, size);
        tag = creation_tag(store, rank);
      } catch (...) {
        capi->world_release();
        throw;
      }
      {
        LibLock l;
        st = hcomm_comm_create_group(hcomm_comm_world(), members.data(), size, tag, &comm_);
        if (st != HCOMM_OK) snprintf(msg, sizeof(msg), "%s", hcomm_message(st).c_str());
      }
      if (st != HCOMM_OK) {
        capi->world_release();
        TORCH_CHECK(false, "hcomm: hcomm_comm_create_group (", size, " ranks, tag ", tag, "): ", msg);
      }
    } else {
      {
        // The group's own communicator (ordered by torch's rank), apart from
        // the world the Python module uses.
        LibLock l;
        st = hcomm_comm_split(hcomm_comm_world(), 0, rank, &comm_);
        if (st != HCOMM_OK) snprintf(msg, sizeof(msg), "%s", hcomm_message(st).c_str());
      }
      if (st != HCOMM_OK) {
        capi->world_release();
        TORCH_CHECK(false, "hcomm: hcomm_comm_split: ", msg);
      }
    }
    worker_ = std::thread(&ProcessGroupHcomm::loop, this);
    init();
  }

  ~ProcessGroupHcomm() override {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stop_ = true;
    }
    qcv_.notify_all();
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;  // a future's callback may need the GIL
      worker_.join();
    } else {
      worker_.join();
    }
    {
      LibLock l;
      hcomm_comm_free(comm_);
    }
    capi->world_release();
  }

  const std::string getBackendName() const override { return "hcomm"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const char* fn = "broadcast";
    check_single(tensors, fn, opts.rootTensor);
    at::Tensor t = tensors[0];
    auto w = make_work(OpType::BROADCAST, fn, tensors, opts.timeout);
    Xfer x = xfer(t);
    void* p = t.data_ptr();
    size_t n = t.numel() * x.scale;
    int root = (int)opts.rootRank;
    w->keep = {t};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ibroadcast(p, n, x.dt, root, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const char* fn = "allreduce";
    check_single(tensors, fn);
    at::Tensor t = tensors[0];
    Red red = map_op(opts.reduceOp, fn);
    auto w = make_work(OpType::ALLREDUCE, fn, tensors, opts.timeout);
    if (red.kind == Red::BITWISE) return enqueue_bitwise(w, t, red, fn, true);
    hcomm_dtype_t dt = reducible(t, fn);
    void* p = t.data_ptr();
    size_t n = t.numel();
    hcomm_op_t op = red.op;
    w->keep = {t};
    if (red.kind == Red::PREMUL)
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
        premultiply(t, red);
        return hcomm_iallreduce(p, p, n, dt, op, c, r);
      };
    else
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallreduce(p, p, n, dt, op, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    const char* fn = "allreduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "hcomm ", fn, ": no tensors");
    int64_t total = 0;
    for (const auto& t : tensors) {
      check_tensor(t, fn);
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "hcomm ", fn, ": tensors of one dtype only");
      total += t.numel();
    }
    Red red = map_op(opts.reduceOp, fn);
    TORCH_CHECK(red.kind != Red::BITWISE, "hcomm ", fn, ": BAND/BOR/BXOR: use allreduce per tensor");
    hcomm_dtype_t dt = reducible(tensors[0], fn);
    auto w = make_work(OpType::ALLREDUCE_COALESCED, fn, tensors, opts.timeout);
    at::Tensor flat = at::empty({total}, tensors[0].options());
    std::vector<at::Tensor> ts = tensors;
    w->keep = {flat};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
      pack(flat, ts);
      if (red.kind == Red::PREMUL) premultiply(flat, red);
      return hcomm_iallreduce(flat.data_ptr(), flat.data_ptr(), (size_t)total, dt, red.op, c, r);
    };
    w->after = [flat, ts]() mutable { unpack(flat, ts); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const char* fn = "reduce";
    check_single(tensors, fn, opts.rootTensor);
    at::Tensor t = tensors[0];
    int root = (int)opts.rootRank;
    check_root(root, fn);
    Red red = map_op(opts.reduceOp, fn);
    auto w = make_work(OpType::REDUCE, fn, tensors, opts.timeout);
    if (red.kind == Red::BITWISE) return enqueue_bitwise(w, t, red, fn, rank_ == root);
    hcomm_dtype_t dt = reducible(t, fn);
    void* p = t.data_ptr();
    void* rp = rank_ == root ? p : nullptr;
    size_t n = t.numel();
    w->keep = {t};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
      if (red.kind == Red::PREMUL) premultiply(t, red);
      return hcomm_ireduce(p, rp, n, dt, red.op, root, c, r);
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
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
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    const char* fn = "_allgather_base";
    check_io(input, output, fn);
    check_whole(output, input, size_, fn, "output");
    auto w = make_work(OpType::_ALLGATHER_BASE, fn, {output}, opts.timeout);
    Xfer x = xfer(input);
    size_t n = input.numel() * x.scale;
    const void* sp = input.data_ptr();
    void* rp = output.data_ptr();
    w->keep = {input, output};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
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
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_igather(sp, rp, n, x.dt, root, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
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
    if (rank_ == root && !adjacent(ins)) {
      at::Tensor flat = at::empty({(int64_t)size_ * out.numel()}, out.options());
      w->keep.push_back(flat);
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
        pack(flat, ins);
        return hcomm_iscatter(flat.data_ptr(), rp, n, x.dt, root, c, r);
      };
    } else {
      const void* sp = rank_ == root ? ins[0].data_ptr() : nullptr;
      w->keep.insert(w->keep.end(), ins.begin(), ins.end());
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iscatter(sp, rp, n, x.dt, root, c, r); };
    }
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
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
    auto stage = [flat, ins, red]() mutable {
      pack(flat, ins);
      if (red.kind == Red::PREMUL) premultiply(flat, red);
    };
    if (red.kind == Red::BITWISE) {
      check_bitwise(out, fn);
      at::Tensor rows = at::empty({(int64_t)size_, flat.numel()}, out.options());
      Xfer x = xfer(out);
      size_t n = flat.numel() * x.scale;
      w->keep = {out, flat, rows};
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
        stage();
        return hcomm_iallgather(flat.data_ptr(), rows.data_ptr(), n, x.dt, c, r);
      };
      auto bit = red.bit;
      int64_t rk = rank_, m = out.numel();
      w->after = [out, rows, bit, rk, m]() mutable {
        out.view({-1}).copy_(reduce_rows(rows, bit).narrow(0, rk * m, m));
      };
      return enqueue(w);
    }
    hcomm_dtype_t dt = reducible(out, fn);
    size_t n = out.numel();
    void* rp = out.data_ptr();
    if (direct) {
      const void* sp = ins[0].data_ptr();
      w->keep = ins;
      w->keep.push_back(out);
      hcomm_op_t op = red.op;
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ireduce_scatter(sp, rp, n, dt, op, c, r); };
    } else {
      w->keep = {out, flat};
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
        stage();
        return hcomm_ireduce_scatter(flat.data_ptr(), rp, n, dt, red.op, c, r);
      };
    }
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* fn = "_reduce_scatter_base";
    check_io(input, output, fn);
    check_whole(input, output, size_, fn, "input");
    std::vector<at::Tensor> outs{output};
    std::vector<std::vector<at::Tensor>> ins{input.view({-1}).chunk(size_)};
    if (output.numel() == 0) ins[0].assign(size_, output.view({-1}));
    return reduce_scatter(outs, ins, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override {
    const char* fn = "alltoall_base";
    check_io(input, output, fn);
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
      w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ialltoall(sp, rp, n, x.dt, c, r); };
      return enqueue(w);
    }
    std::vector<size_t> sc, sd, rc, rd;
    splits(input, inSplits, x.scale, fn, "input", sc, sd);
    splits(output, outSplits, x.scale, fn, "output", rc, rd);
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) {
      return hcomm_ialltoallv(sp, sc.data(), sd.data(), rp, rc.data(), rd.data(), x.dt, c, r);
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
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
    w->keep = {sflat, rflat};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) mutable {
      pack(sflat, ins);
      return hcomm_ialltoallv(sflat.data_ptr(), sc.data(), sd.data(), rflat.data_ptr(), rc.data(), rd.data(),
                              x.dt, c, r);
    };
    w->after = [rflat, outs]() mutable { unpack(rflat, outs); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    auto w = make_work(OpType::BARRIER, "barrier", {}, opts.timeout);
    w->post = [](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_ibarrier(c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const char* fn = "send";
    check_single(tensors, fn);
    at::Tensor t = tensors[0];
    auto w = make_work(OpType::SEND, fn, tensors, c10d::kUnsetTimeout);
    Xfer x = xfer(t);
    const void* p = t.data_ptr();
    size_t n = t.numel() * x.scale;
    w->keep = {t};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_isend(p, n, x.dt, dst, tag, c, r); };
    return enqueue(w);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const char* fn = "recv";
    check_single(tensors, fn);
    at::Tensor t = tensors[0];
    auto w = make_work(OpType::RECV, fn, tensors, c10d::kUnsetTimeout);
    w->src_rank = src;
    Xfer x = xfer(t);
    void* p = t.data_ptr();
    size_t n = t.numel() * x.scale;
    w->keep = {t};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_irecv(p, n, x.dt, src, tag, c, r); };
    return enqueue(w);
  }

  // dist.recv(t) without src: HCOMM_ANY_SOURCE; the work's sourceRank() is
  // the group rank of the sender once it is done.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
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
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) {
      return hcomm_irecv_any(p, n, x.dt, tag, c, srcp, r);
    };
    return enqueue(w);
  }

 private:
  // The members' hcomm world ranks in group-rank order: each publishes its
  // own under its group rank and reads the others'.
  static std::vector<int> member_ranks(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
    int me;
    {
      LibLock l;
      me = hcomm_comm_rank(hcomm_comm_world());
    }
    std::string mine = std::to_string(me);
    store->set("hcomm/member/" + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<int> members(size);
    for (int j = 0; j < size; j++) {
      auto v = store->get("hcomm/member/" + std::to_string(j));
      members[j] = std::stoi(std::string(v.begin(), v.end()));
    }
    return members;
  }

  // A tag no other group creation shares: group rank 0 draws it from a
  // counter of the store under the group's prefix (torch's default store,
  // common to all the groups), or of the store itself when it has no
  // prefix, and hands it to the other members.
  static int creation_tag(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
    if (rank == 0) {
      c10::intrusive_ptr<c10d::Store> common = store;
      if (auto* ps = dynamic_cast<c10d::PrefixStore*>(store.get())) common = ps->getUnderlyingStore();
      int64_t n = common->add("hcomm/group_tag", 1);
      std::string t = std::to_string(n & 0x3fffffff);
      store->set("hcomm/tag", std::vector<uint8_t>(t.begin(), t.end()));
      return (int)(n & 0x3fffffff);
    }
    auto v = store->get("hcomm/tag");
    return std::stoi(std::string(v.begin(), v.end()));
  }

  WorkPtr make_work(OpType type, const char* name, std::vector<at::Tensor> outputs,
                    std::chrono::milliseconds timeout) {
    auto w = c10::make_intrusive<WorkHcomm>(rank_, type, name, std::move(outputs));
    auto t = timeout == c10d::kUnsetTimeout ? timeout_ : timeout;
    w->deadline = Clock::now() + t;
    return w;
  }

  void check_root(int root, const char* fn) const {
    TORCH_CHECK(root >= 0 && root < size_, "hcomm ", fn, ": root ", root, " out of range for ", size_, " ranks");
  }

  // The root's list (what: "input" or "output") of one tensor like `like` per
  // rank; the other ranks take none (an empty list).
  std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                    int root, const char* fn, const std::string& what) const {
    if (rank_ != root) {
      TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "hcomm ", fn,
                  ": only the root takes an ", what, " list");
      return {};
    }
    TORCH_CHECK(lists.size() == 1, "hcomm ", fn, ": one ", what, " list on the root");
    check_list(lists[0], like, size_, fn, ("the " + what + " list").c_str());
    return lists[0];
  }

  // Where a gather of like's elements into outs lands: outs itself when its
  // tensors lie back to back, or a staging tensor copied out after.
  void* gather_target(const WorkPtr& w, const std::vector<at::Tensor>& outs, const at::Tensor& like) {
    if (adjacent(outs)) {
      w->keep.insert(w->keep.end(), outs.begin(), outs.end());
      return outs[0].data_ptr();
    }
    at::Tensor flat = at::empty({(int64_t)size_ * like.numel()}, like.options());
    w->keep.push_back(flat);
    w->after = [flat, outs]() mutable { unpack(flat, outs); };
    return flat.data_ptr();
  }

  // A bitwise reduction of t: an allgather of rows, reduced here in rank
  // order into t where write (every rank for allreduce, the root for reduce).
  c10::intrusive_ptr<c10d::Work> enqueue_bitwise(const WorkPtr& w, const at::Tensor& t, const Red& red,
                                                 const char* fn, bool write) {
    check_bitwise(t, fn);
    at::Tensor rows = at::empty({(int64_t)size_, t.numel()}, t.options());
    gather_rows(w, t, rows);
    auto bit = red.bit;
    w->after = [t, rows, bit, write]() mutable {
      if (write) t.view({-1}).copy_(reduce_rows(rows, bit));
    };
    return enqueue(w);
  }

  // allgather of t's elements into rows [size, numel] (for bitwise reductions).
  void gather_rows(const WorkPtr& w, const at::Tensor& t, const at::Tensor& rows) {
    Xfer x = xfer(t);
    const void* sp = t.data_ptr();
    void* rp = rows.data_ptr();
    size_t n = t.numel() * x.scale;
    w->keep = {t, rows};
    w->post = [=](hcomm_comm_t c, hcomm_request_t* r) { return hcomm_iallgather(sp, rp, n, x.dt, c, r); };
  }

  // Counts and displacements (transfer units) of alltoall_base's splits along dim 0.
  void splits(const at::Tensor& t, const std::vector<int64_t>& sp, size_t scale, const char* fn,
              const char* what, std::vector<size_t>& counts, std::vector<size_t>& displs) {
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

  c10::intrusive_ptr<c10d::Work> enqueue(WorkPtr w) {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      TORCH_CHECK(!stop_, "hcomm: the process group is shutting down");
      queue_.push_back(w);
    }
    qcv_.notify_one();
    return w;
  }

  static std::exception_ptr failure(const WorkPtr& w, hcomm_status_t st, const std::string& msg) {
    std::string m = std::string("hcomm ") + w->name + ": " + msg;
    return std::make_exception_ptr(std::runtime_error(m));
  }

  void loop() {
    std::vector<WorkPtr> inflight, fresh;
    std::vector<std::pair<WorkPtr, std::exception_ptr>> done;
    unsigned idle = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(qmu_);
        if (inflight.empty()) qcv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty() && inflight.empty() && stop_) return;
        fresh.swap(queue_);
      }
      bool posted = !fresh.empty();
      {
        LibLock l;
        for (auto& w : fresh) {
          hcomm_status_t st;
          std::string err;
          try {
            st = w->post(comm_, &w->req);
            if (st != HCOMM_OK) err = hcomm_message(st);
          } catch (const std::exception& e) {  // staging copies
            st = HCOMM_ERR_INTERNAL;
            err = e.what();
          }
          if (st != HCOMM_OK)
            done.emplace_back(w, failure(w, st, err));
          else
            inflight.push_back(w);
        }
        fresh.clear();
        auto now = Clock::now();
        for (size_t i = 0; i < inflight.size();) {
          WorkPtr& w = inflight[i];
          int fin = 0;
          hcomm_status_t st = hcomm_test(w->req, &fin);
          if (st != HCOMM_OK || fin) {
            std::exception_ptr e;
            if (st != HCOMM_OK)
              e = failure(w, st, w->timed_out ? "did not complete within the process group's timeout; the "
                                                "communicator was aborted (" + hcomm_message(st) + ")"
                                              : hcomm_message(st));
            done.emplace_back(w, e);
            inflight.erase(inflight.begin() + i);
            continue;
          }
          if (now > w->deadline && !w->timed_out) {
            // Like NCCL's watchdog: a timed-out operation aborts the
            // communicator, every pending one fails with ERR_ABORTED.
            w->timed_out = true;
            hcomm_comm_abort(comm_);
          }
          i++;
        }
      }
      for (auto& d : done) d.first->complete(d.second);
      if (!done.empty() || posted) {
        idle = 0;
      } else if (++idle > 64) {  // spin while young, then yield, then sleep (as hcomm's waits do)
        if (idle < 20000) {
          sched_yield();
        } else {
          struct timespec ts = {0, 50000};
          nanosleep(&ts, nullptr);
        }
      }
      done.clear();
    }
  }

  hcomm_comm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::vector<WorkPtr> queue_;
  bool stop_ = false;
  std::thread worker_;
};

static c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int size, const std::chrono::duration<float>& timeout) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return c10::make_intrusive<ProcessGroupHcomm>(store, rank, size, ms);
}

}  // namespace hcomm_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace hcomm_torch;
  capi = static_cast<const hcpy_capi_t*>(PyCapsule_Import(HCPY_CAPI_NAME, 0));
  if (!capi) throw py::error_already_set();
  if (capi->version != HCPY_CAPI_VERSION) throw std::runtime_error("hcomm._hcomm and hcomm._torch_backend differ");
  py::module::import("torch.distributed");
  py::class_<ProcessGroupHcomm, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupHcomm>>(m, "ProcessGroupHcomm")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const std::chrono::duration<float>& timeout) {
             auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
             return c10::make_intrusive<ProcessGroupHcomm>(store, rank, size, ms);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "the creator torch.distributed.Backend.register_backend takes");
}
