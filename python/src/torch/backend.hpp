// hcomm._torch_backend: a c10d::Backend (torch 2.11 to 2.15) on libhcomm,
// the backend "hcomm" of torch.distributed (registered by `import
// hcomm.torch` or torch's entry points, hcomm/torch.py).
//
// Every operation becomes a WorkHcomm queued to the group's one worker
// thread, which posts it with hcomm's non-blocking calls (in the order the
// caller issued them: the order every rank issues them) and polls all
// in-flight requests with hcomm_test. Polling, not hcomm_wait: a blocking
// wait would hold libhcomm's lock, and a send queued behind it could be the
// very message a peer needs first. Every hcomm call takes the process-wide
// lock of hcomm._hcomm (hcomm_capi.h), so the Python module and any number
// of groups share libhcomm safely.
//
// Devices: the one place that decides how a tensor's device is served is
// device_plan() (ops.cpp): CPU tensors go to the worker above. CUDA tensors
// will go through libhcomm's stream-ordered calls (hcomm_*_stream on the
// current stream, Work::wait making the current stream wait); until
// libhcomm has them, device_plan() refuses CUDA tensors with a message that
// says so, before anything is queued.
#pragma once

#include <ATen/ATen.h>
#include <torch/python.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <hcomm.h>

#include "../hcomm_capi.h"

#ifndef HCOMM_TORCH_MIN_MINOR
#error "build through python/setup.py (it passes the supported torch range, hcomm/_torch_range.py)"
#endif
#if TORCH_VERSION_MAJOR != 2 || TORCH_VERSION_MINOR < HCOMM_TORCH_MIN_MINOR || \
    TORCH_VERSION_MINOR > HCOMM_TORCH_MAX_MINOR
#error "hcomm's torch backend supports torch 2.HCOMM_TORCH_MIN_MINOR to 2.HCOMM_TORCH_MAX_MINOR only"
#endif

namespace hcomm_torch {

using c10d::OpType;
using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

extern const hcpy_capi_t* capi;

struct LibLock {
  LibLock() { capi->lock(); }
  ~LibLock() { capi->unlock(); }
  LibLock(const LibLock&) = delete;
  LibLock& operator=(const LibLock&) = delete;
};

// The failure of an hcomm call, read on the thread that made it:
// "<hcomm_last_error()> [ERR_...]".
std::string hcomm_message(hcomm_status_t st);

// The error torch raises ("DistBackendError: <msg>").
std::exception_ptr dist_error(const std::string& msg);

// Posts one hcomm request of an operation (worker thread, under the lock).
using PostFn = std::function<hcomm_status_t(hcomm_comm_t, hcomm_request_t*)>;

class WorkHcomm : public c10d::Work {
 public:
  WorkHcomm(int rank, OpType type, const char* name, std::vector<at::Tensor> outputs, ms timeout);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override;
  // timeout 0 (kNoTimeout): until done (the group's timeout bounds that).
  // Otherwise at most timeout: then raises, naming the operation; it stays
  // in flight (its tensors in use) until it completes or the group's
  // timeout aborts it.
  bool wait(ms timeout = kNoTimeout) override;

  // Worker thread, without the hcomm lock: runs `after` on success, then
  // completes the work and its future.
  void complete(std::exception_ptr e);
  void fail(hcomm_status_t st, const std::string& msg);

  const char* name;
  ms timeout;
  std::vector<PostFn> parts;    // one request each, posted in order
  bool grouped = false;         // parts posted between hcomm_group_start/end
  std::function<void()> before; // staging in: worker thread, before posting, no lock
  std::function<void()> after;  // staging out: worker thread, on success, no lock
  std::function<hcomm_status_t(std::string&)> control; // a blocking call run in order (split)
  std::vector<at::Tensor> keep; // what the requests read or write, alive until done
  std::vector<hcomm_request_t> reqs;
  std::exception_ptr error;     // the first failure
  hcomm_status_t status = HCOMM_OK; // its hcomm status (fail())
  std::string message;          // its text, without "hcomm <name>: "
  Clock::time_point deadline;
  bool timed_out = false;
  int src_rank = -1;
  // endCoalescing's work: its children are posted in one hcomm group; it
  // completes when they all have (with the first child's failure).
  std::vector<c10::intrusive_ptr<WorkHcomm>> children;
  c10::intrusive_ptr<WorkHcomm> parent; // until this child finishes (then reset: no cycle)
  size_t children_left = 0;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};
using WorkPtr = c10::intrusive_ptr<WorkHcomm>;

// Options of a group: the base's timeout (negative: torch's timeout of the
// group, init_process_group(timeout=)).
struct Options : c10d::Backend::Options {
  explicit Options(ms timeout = ms(-1)) : c10d::Backend::Options("hcomm", timeout) {}
  c10::intrusive_ptr<c10d::Backend::Options> clone() const;
};

class BackendHcomm : public c10d::Backend {
 public:
  // A group through torch's store: joins (or takes a hold on) hcomm's world,
  // then makes the group's communicator (hcomm_comm_split of the world when
  // the group is the whole world, else hcomm_comm_create_group).
  BackendHcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, ms timeout,
               const std::string& name);
  // A group on a communicator made already (split(), shrink()): takes it
  // and a hold; store (may be null): where it leaves the causes of its
  // revokes (fault.cpp).
  BackendHcomm(hcomm_comm_t comm, int rank, int size, ms timeout, const std::string& name,
               c10::intrusive_ptr<c10d::Store> store = nullptr);
  ~BackendHcomm() override;

  const std::string getBackendName() const override { return "hcomm"; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  // Fault tolerance (fault.cpp, docs/python.md "When a rank fails").
  // abort: any thread; pending work fails at once, later operations are
  // refused, the other members' operations on the group fail with
  // ERR_REVOKED naming this rank and why.
  void abort() override;
  void shutdown() override;
  c10d::ErrorType getError() override;
  bool supportsShrinking() const override { return true; }
  // torch.distributed.shrink_group: revokes this group, the survivors agree
  // (hcomm_comm_shrink) and get a group of themselves, which must be exactly
  // the ranks not in ranks_to_exclude.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& opts_override =
                                               nullptr) override;
  // hcomm.torch.shrink_group's first step: revoke, agree, keep the new
  // communicator for shrink(); returns the group ranks that are out.
  std::vector<int64_t> agree_shrink();
  // The first failure of the group ("" while none), as raised.
  std::string failure();
#ifdef C10D_BACKEND_HAS_HOOKS
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hook_id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hook_id) override;
#endif
  void setTimeout(ms timeout) override { timeout_ = timeout; }
  ms timeout() const { return timeout_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outSplits, std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Every live group: before a blocking call of the world (a new group's
  // split) each one's queued operations are posted first, so that no rank
  // blocks in it while a peer waits for an operation still in its queue.
  static void post_all_queued();

 private:
  void start(const std::string& name);
  WorkPtr make_work(OpType type, const char* name, std::vector<at::Tensor> outputs, ms timeout);
  // Refused once the group failed (failure_), unless despite_failure (shrink).
  c10::intrusive_ptr<c10d::Work> enqueue(WorkPtr w, bool despite_failure = false);
  void wait_posted();
  void loop();
  void post(const WorkPtr& w, std::vector<WorkPtr>& inflight,
            std::vector<std::pair<WorkPtr, std::exception_ptr>>& done);
  bool poll(std::vector<WorkPtr>& inflight, std::vector<std::pair<WorkPtr, std::exception_ptr>>& done);
  void finish(const WorkPtr& w, std::exception_ptr e);
  // fault.cpp
  bool failed(hcomm_status_t st, const std::string& cause, c10d::ErrorType type);
  void revoke_if_asked();
  void explain_revoked(std::vector<std::pair<WorkPtr, std::exception_ptr>>& done);
  std::string peer_cause(int grank);
  void run_abort_hooks();
  struct Agreed {
    hcomm_comm_t comm = nullptr;
    std::vector<int> members;  // their ranks in this group, in order
  };
  Agreed agree(const char* why);

  // ops.cpp helpers
  void check_root(int root, const char* fn) const;
  std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                    int root, const char* fn, const std::string& what) const;
  void* gather_target(const WorkPtr& w, const std::vector<at::Tensor>& outs, const at::Tensor& like);
  void gather_rows(const WorkPtr& w, const at::Tensor& t, const at::Tensor& rows);
  void splits(const at::Tensor& t, const std::vector<int64_t>& sp, size_t scale, const char* fn,
              const char* what, std::vector<size_t>& counts, std::vector<size_t>& displs) const;
  friend struct OpBuilder;

  hcomm_comm_t comm_ = nullptr;
  std::mutex comm_mu_;  // comm_ for abort() (any thread) against its free (shutdown)
  bool held_ = false; // a hold on hcomm's world (capi->world_acquire)
  ms timeout_;
  std::string name_;
  std::mutex qmu_;
  std::condition_variable qcv_;     // the worker: something queued, or stop
  std::condition_variable posted_;  // wait_posted(): the queue was emptied
  std::vector<WorkPtr> queue_;
  size_t taken_ = 0, posted_n_ = 0; // batches the worker took / finished posting
  bool stop_ = false, shut_ = false;
  bool coalescing_ = false;
  // fault.cpp: the first failure (under qmu_): later operations are refused
  // with it; the worker then revokes the communicator (revoke_asked_),
  // leaving the cause in the store under fault_key(rank) first.
  std::string failure_;
  std::atomic<int> error_type_{0};  // c10d::ErrorType of failure_
  bool revoke_asked_ = false, revoked_ = false;
  std::string revoke_cause_;
  std::map<int, std::string> peer_causes_;  // read from the store (worker)
  c10::intrusive_ptr<c10d::Store> store_;
  std::string fault_key(int grank) const { return "hcomm/fault/" + name_ + "/" + std::to_string(grank); }
  Agreed agreed_;  // agree_shrink()'s, until shrink() takes it
  bool shrunk_ = false;
  std::mutex hooks_mu_;
  std::map<int64_t, std::function<void()>> abort_hooks_;
  std::vector<WorkPtr> coalesced_;
  std::thread worker_;
  // the last split (torch calls split once per device type: see split())
  std::string last_split_name_;
  std::vector<int> last_split_ranks_;
  bool last_split_none_ = false;
  c10::weak_intrusive_ptr<c10d::Backend> last_split_{c10::intrusive_ptr<c10d::Backend>()};
};

// torch.distributed's creator (register_backend, extended API): the store,
// rank, size and timeout of DistributedBackendOptions.
c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         ms timeout, const std::string& name);

}  // namespace hcomm_torch
