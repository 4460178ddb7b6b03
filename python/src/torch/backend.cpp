// BackendHcomm's life: joining hcomm, the worker that posts and polls the
// operations, coalescing onto hcomm groups, split, abort and shutdown
// (backend.hpp says how it fits together; ops.cpp has the operations).
#include "backend.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <set>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace hcomm_torch {

const hcpy_capi_t* capi;

std::string hcomm_message(hcomm_status_t st) {
  const char* m = hcomm_last_error();
  return std::string(m && *m ? m : hcomm_strerror(st)) + " [" + hcpy_status_name(st) + "]";
}

std::exception_ptr dist_error(const std::string& msg) {
  return std::make_exception_ptr(c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg));
}

// ---- Work ------------------------------------------------------------------

WorkHcomm::WorkHcomm(int rank, OpType type, const char* name, std::vector<at::Tensor> outputs, ms timeout)
    : Work(rank, type),
      name(name),
      timeout(timeout),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
  deadline = Clock::now() + timeout;
}

int WorkHcomm::sourceRank() const {
  TORCH_CHECK(src_rank >= 0, "hcomm ", name, ": sourceRank() is for a completed receive only");
  return src_rank;
}

bool WorkHcomm::wait(ms t) {
  std::unique_lock<std::mutex> lk(mutex_);
  if (t <= kNoTimeout) {
    cv_.wait(lk, [&] { return completed_; });
  } else if (!cv_.wait_for(lk, t, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str("hcomm ", name, ": not complete within wait(timeout=", t.count(),
                             " ms); it stays in flight, its tensors in use, until it completes or the group's "
                             "timeout (",
                             timeout.count(), " ms) aborts the group"));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkHcomm::fail(hcomm_status_t st, const std::string& msg) {
  if (error) return;
  status = st;
  message = msg;
  error = dist_error(std::string("hcomm ") + name + ": " + msg);
}

void WorkHcomm::complete(std::exception_ptr e) {
  if (!e && after) {
    try {
      after();
    } catch (const std::exception& x) {
      e = dist_error(std::string("hcomm ") + name + ": " + x.what());
    }
  }
  parts.clear();
  before = nullptr;
  after = nullptr;
  control = nullptr;
  keep.clear();
  Work::finish(e);
  if (e)
    future_->setError(e);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

c10::intrusive_ptr<c10d::Backend::Options> Options::clone() const {
  return c10::make_intrusive<hcomm_torch::Options>(*this);
}

// ---- the registry of live groups ---------------------------------------------

static std::mutex g_groups_mu;
static std::set<BackendHcomm*> g_groups;

void BackendHcomm::post_all_queued() {
  std::vector<BackendHcomm*> gs;
  {
    std::lock_guard<std::mutex> lk(g_groups_mu);
    gs.assign(g_groups.begin(), g_groups.end());
  }
  for (auto* g : gs) g->wait_posted();
}

// Waits until the worker has posted everything queued before this call.
void BackendHcomm::wait_posted() {
  std::unique_lock<std::mutex> lk(qmu_);
  size_t want = queue_.empty() ? taken_ : taken_ + 1;
  posted_.wait(lk, [&] { return stop_ || posted_n_ >= want; });
}

// ---- making a group ------------------------------------------------------------

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

// A tag no other group creation shares: group rank 0 draws it from a counter
// of the store under the group's prefixes (torch's default store, common to
// every group) and hands it to the other members.
static int creation_tag(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  if (rank == 0) {
    c10::intrusive_ptr<c10d::Store> common = store;
    while (auto* ps = dynamic_cast<c10d::PrefixStore*>(common.get())) common = ps->getUnderlyingStore();
    int64_t n = common->add("hcomm/group_tag", 1);
    std::string t = std::to_string(n & 0x3fffffff);
    store->set("hcomm/tag", std::vector<uint8_t>(t.begin(), t.end()));
    return (int)(n & 0x3fffffff);
  }
  auto v = store->get("hcomm/tag");
  return std::stoi(std::string(v.begin(), v.end()));
}

// Joins hcomm through the store (rank 0 publishes hcomm_bootstrap_address()),
// or takes a hold on the world made already. Returns the world's size.
static int join_world(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  char msg[1024] = "";
  hcomm_status_t st;
  // Every rank must agree on making a world or using the one it has: rank 0
  // says which, a rank that differs fails here rather than in a rendezvous
  // that never completes (a group of an earlier init_process_group still
  // alive in some processes, not others).
  bool have = capi->initialized();
  if (rank == 0) {
    std::string m = have ? "reuse" : "fresh";
    store->set("hcomm/init", std::vector<uint8_t>(m.begin(), m.end()));
  } else {
    auto v = store->get("hcomm/init");
    bool rank0_has = std::string(v.begin(), v.end()) == "reuse";
    TORCH_CHECK(rank0_has == have, "hcomm: rank ", rank, (have ? " still has" : " has no"),
                " hcomm world while rank 0 ", (rank0_has ? "has one" : "makes a new one"),
                ": every process must drop its groups of an earlier job (destroy_process_group() and no "
                "references left to them) before a new init_process_group, or keep them all");
  }
  if (have) {
    st = capi->world_acquire(nullptr, msg, sizeof(msg));
    TORCH_CHECK(st == HCOMM_OK, "hcomm: ", msg);
    int wsize;
    {
      LibLock l;
      wsize = hcomm_comm_size(hcomm_comm_world());
    }
    return wsize;
  }
  std::string url, key;
  if (rank == 0) {
    char u[256], k[64];
    st = hcomm_bootstrap_address(u, sizeof(u), k, sizeof(k));
    TORCH_CHECK(st == HCOMM_OK, "hcomm: hcomm_bootstrap_address: ", hcomm_message(st));
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
  TORCH_CHECK(st == HCOMM_OK, "hcomm: hcomm_init_rank(rank ", rank, " of ", size, ", ", url, "): ", msg, " [",
              hcpy_status_name(st), "]");
  return size;
}

BackendHcomm::BackendHcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, ms timeout,
                           const std::string& name)
    : Backend(rank, size), timeout_(timeout), store_(store) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "hcomm: rank ", rank, " of a group of ", size);
  int wsize = join_world(store, rank, size);
  held_ = true;
  try {
    TORCH_CHECK(size <= wsize, "hcomm: a process group of ", size, " ranks over a world of ", wsize);
    std::vector<int> members;
    int tag = -1;
    if (size < wsize) {
      // A group of some of the world's ranks: torch makes it on the members
      // alone, so hcomm_comm_split (every world rank) cannot. The members
      // learn one another's world ranks through the group's store.
      members = member_ranks(store, rank, size);
      tag = creation_tag(store, rank);
    }
    post_all_queued();
    hcomm_status_t st;
    std::string err;
    {
      LibLock l;
      if (size < wsize)
        st = hcomm_comm_create_group(hcomm_comm_world(), members.data(), size, tag, &comm_);
      else  // the group's own communicator, ordered by torch's rank
        st = hcomm_comm_split(hcomm_comm_world(), 0, rank, &comm_);
      if (st != HCOMM_OK) err = hcomm_message(st);
    }
    TORCH_CHECK(st == HCOMM_OK, "hcomm: making the group's communicator (", size, " of ", wsize,
                " ranks): ", err);
  } catch (...) {
    capi->world_release();
    held_ = false;
    throw;
  }
  start(name);
}

BackendHcomm::BackendHcomm(hcomm_comm_t comm, int rank, int size, ms timeout, const std::string& name,
                           c10::intrusive_ptr<c10d::Store> store)
    : Backend(rank, size), comm_(comm), timeout_(timeout), store_(std::move(store)) {
  char msg[1024] = "";
  hcomm_status_t st = capi->world_acquire(nullptr, msg, sizeof(msg));
  if (st != HCOMM_OK) {
    LibLock l;
    hcomm_comm_free(comm_);
  }
  TORCH_CHECK(st == HCOMM_OK, "hcomm: ", msg);
  held_ = true;
  start(name);
}

void BackendHcomm::start(const std::string& name) {
  name_ = name;
  worker_ = std::thread(&BackendHcomm::loop, this);
  std::lock_guard<std::mutex> lk(g_groups_mu);
  g_groups.insert(this);
}

BackendHcomm::~BackendHcomm() { shutdown(); }

c10::intrusive_ptr<c10d::Backend::Options> BackendHcomm::getBackendOptions() {
  auto o = c10::make_intrusive<hcomm_torch::Options>(timeout_);
  o->group_name = name_;
  return o;
}

// Ends the group: the worker finishes what is queued and in flight (each
// bounded by its timeout), then the communicator is freed and the hold on
// hcomm's world dropped (the last one finalizes libhcomm). Idempotent.
void BackendHcomm::shutdown() {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (shut_) return;
    shut_ = true;
    stop_ = true;
  }
  {
    std::lock_guard<std::mutex> lk(g_groups_mu);
    g_groups.erase(this);
  }
  qcv_.notify_all();
  posted_.notify_all();
  if (worker_.joinable()) {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;  // a future's callback may need the GIL
      worker_.join();
    } else {
      worker_.join();
    }
  }
  {
    std::lock_guard<std::mutex> ck(comm_mu_);  // abort() reads comm_ from any thread
    LibLock l;
    if (comm_) hcomm_comm_free(comm_);
    comm_ = nullptr;
    if (agreed_.comm) hcomm_comm_free(agreed_.comm);  // agree_shrink()'s, not taken
    agreed_.comm = nullptr;
  }
  if (held_) capi->world_release();
  held_ = false;
}

// ---- queueing ------------------------------------------------------------------

WorkPtr BackendHcomm::make_work(OpType type, const char* name, std::vector<at::Tensor> outputs, ms timeout) {
  return c10::make_intrusive<WorkHcomm>(rank_, type, name, std::move(outputs),
                                        timeout == c10d::kUnsetTimeout ? timeout_ : timeout);
}

c10::intrusive_ptr<c10d::Work> BackendHcomm::enqueue(WorkPtr w, bool despite_failure) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    TORCH_CHECK(!stop_, "hcomm ", w->name, ": the process group was shut down");
    if (!failure_.empty() && !despite_failure)
      C10_THROW_ERROR(DistBackendError,
                      c10::str("hcomm ", w->name, ": the process group failed earlier and was revoked (",
                               failure_,
                               "); shrink it (hcomm.torch.shrink_group, torch.distributed.shrink_group) or "
                               "destroy it"));
    if (coalescing_) {
      coalesced_.push_back(w);
      return w;
    }
    queue_.push_back(w);
  }
  qcv_.notify_one();
  return w;
}

void BackendHcomm::startCoalescing() {
  std::lock_guard<std::mutex> lk(qmu_);
  TORCH_CHECK(!coalescing_, "hcomm: startCoalescing inside a coalescing block (they do not nest)");
  coalescing_ = true;
}

// The operations issued since startCoalescing, posted together in one hcomm
// group (hcomm_group_start/end: small allreduces fused); the work completes
// when all of them have.
c10::intrusive_ptr<c10d::Work> BackendHcomm::endCoalescing() {
  std::vector<WorkPtr> kids;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    TORCH_CHECK(coalescing_, "hcomm: endCoalescing without startCoalescing");
    coalescing_ = false;
    kids.swap(coalesced_);
  }
  std::vector<at::Tensor> outs;
  for (auto& k : kids)
    for (auto& t : k->result()) outs.push_back(t);
  auto w = make_work(OpType::COALESCED, "coalesced", outs, c10d::kUnsetTimeout);
  if (kids.empty()) {
    w->complete(nullptr);
    return w;
  }
  w->children_left = kids.size();
  for (auto& k : kids) k->parent = w;
  w->children = std::move(kids);
  return enqueue(w);
}

// Every rank of this group calls split (torch's split_group); those in
// `ranks` (group ranks, in the new group's order) get the new group, the
// others nullptr. One hcomm_comm_split of this group's communicator, run by
// the worker in issue order.
c10::intrusive_ptr<c10d::Backend> BackendHcomm::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::vector<int>& ranks,
                                                      const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  // torch calls split once per device type of the group; "hcomm" serves
  // cpu and cuda with one backend, which must give one new group (one
  // communicator, one shutdown), not two.
  std::string want = opts ? opts->group_name : std::string();
  if (!want.empty() && want == last_split_name_ && last_split_ranks_ == ranks) {
    if (last_split_none_) return nullptr;
    if (auto b = last_split_.lock()) return b;
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  int color = HCOMM_UNDEFINED, key = 0;
  if (it != ranks.end()) {
    color = *std::min_element(ranks.begin(), ranks.end());  // the splits do not overlap
    key = (int)(it - ranks.begin());
  }
  ms t = opts && opts->timeout.count() >= 0 ? opts->timeout : timeout_;
  auto w = make_work(OpType::UNKNOWN, "split", {}, t);
  auto newcomm = std::make_shared<hcomm_comm_t>(nullptr);
  w->control = [this, color, key, newcomm](std::string& err) {
    hcomm_status_t st = hcomm_comm_split(comm_, color, key, newcomm.get());
    if (st != HCOMM_OK) err = hcomm_message(st);
    return st;
  };
  enqueue(w)->wait();
  last_split_name_ = want;
  last_split_ranks_ = ranks;
  last_split_none_ = it == ranks.end();
  last_split_.reset();
  if (it == ranks.end()) return nullptr;
  TORCH_CHECK(*newcomm, "hcomm split: no communicator");
  std::string name = want.empty() ? name_ + ":split" : want;
  auto b = c10::make_intrusive<BackendHcomm>(*newcomm, (int)(it - ranks.begin()), (int)ranks.size(), t, name,
                                            store);
  last_split_ = c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>(b));
  return b;
}

// ---- the worker ------------------------------------------------------------------

using Done = std::vector<std::pair<WorkPtr, std::exception_ptr>>;

// Posts w's requests (a control call runs to its end here). Under the lock.
void BackendHcomm::post(const WorkPtr& w, std::vector<WorkPtr>& inflight, Done& done) {
  if (w->control) {
    std::string err;
    hcomm_status_t st = w->control(err);
    if (st != HCOMM_OK) w->fail(st, err);
    done.emplace_back(w, w->error);
    return;
  }
  bool group = w->grouped && w->parts.size() > 1;
  if (group) hcomm_group_start();
  for (auto& p : w->parts) {
    hcomm_request_t r = nullptr;
    hcomm_status_t st = p(comm_, &r);
    if (st != HCOMM_OK) {
      w->fail(st, hcomm_message(st));
      break;
    }
    w->reqs.push_back(r);
  }
  if (group) {
    hcomm_status_t st = hcomm_group_end();
    if (st != HCOMM_OK) w->fail(st, hcomm_message(st));
  }
  if (w->reqs.empty())
    done.emplace_back(w, w->error);
  else
    inflight.push_back(w);
}

// Tests every request in flight; moves finished works to done. Under the lock.
bool BackendHcomm::poll(std::vector<WorkPtr>& inflight, Done& done) {
  auto now = Clock::now();
  bool progressed = false;
  for (size_t i = 0; i < inflight.size();) {
    WorkPtr& w = inflight[i];
    for (size_t j = 0; j < w->reqs.size();) {
      int fin = 0;
      hcomm_status_t st = hcomm_test(w->reqs[j], &fin);
      if (st == HCOMM_OK && !fin) {
        j++;
        continue;
      }
      progressed = true;
      if (st != HCOMM_OK)
        w->fail(st, w->timed_out ? "did not complete within the process group's timeout (" +
                                       std::to_string(w->timeout.count()) +
                                       " ms); the group's communicator was aborted (" + hcomm_message(st) + ")"
                                 : hcomm_message(st));
      w->reqs.erase(w->reqs.begin() + j);  // hcomm_test freed it
    }
    if (w->reqs.empty()) {
      done.emplace_back(w, w->error);
      inflight.erase(inflight.begin() + i);
      continue;
    }
    if (now > w->deadline && !w->timed_out) {
      // Like NCCL's watchdog: a timed-out operation aborts the communicator,
      // and every pending one fails with ERR_ABORTED.
      w->timed_out = true;
      hcomm_comm_abort(comm_);
    }
    i++;
  }
  return progressed;
}

// Completes w, and its parent when w was the parent's last child. No lock.
void BackendHcomm::finish(const WorkPtr& w, std::exception_ptr e) {
  WorkPtr parent = std::move(w->parent);
  w->parent.reset();
  w->complete(e);
  if (!parent) return;
  if (e && !parent->error) parent->error = e;
  if (--parent->children_left == 0) {
    parent->children.clear();
    parent->complete(parent->error);
  }
}

// The worker's idle polling (loop): yield for kYieldUs after the last
// completion or post, then poll every kSleepNs.
static constexpr long kYieldUs = 2000, kSleepNs = 20000;

void BackendHcomm::loop() {
  std::vector<WorkPtr> inflight, fresh;
  Done done;
  unsigned idle = 0;
  Clock::time_point active = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(qmu_);
      auto revoke = [&] { return revoke_asked_ && !revoked_; };
      if (inflight.empty()) qcv_.wait(lk, [&] { return stop_ || !queue_.empty() || revoke(); });
      if (queue_.empty() && inflight.empty() && stop_ && !revoke()) return;
      fresh.swap(queue_);
      if (!fresh.empty()) taken_++;
    }
    revoke_if_asked();  // before posting: an op after abort() is refused at once
    bool posted = !fresh.empty();
    for (auto& w : fresh) {  // staging copies, outside the lock
      for (auto& k : w->children)
        if (k->before) k->before();
      if (w->before) w->before();
    }
    {
      LibLock l;
      for (auto& w : fresh) {
        if (w->children.empty()) {
          post(w, inflight, done);
          continue;
        }
        hcomm_group_start();
        for (auto& k : w->children) post(k, inflight, done);
        hcomm_status_t st = hcomm_group_end();
        if (st != HCOMM_OK) w->fail(st, hcomm_message(st));
      }
      fresh.clear();
      if (posted) {
        std::lock_guard<std::mutex> lk(qmu_);
        posted_n_ = taken_;
      }
      if (poll(inflight, done)) posted = true;
    }
    if (posted) posted_.notify_all();
    explain_revoked(done);
    // The group's first failure, when a work found it here (not abort()'s or
    // shrink's, which are the caller's decision and run no hooks).
    bool found_first = false;
    for (auto& d : done)
      if (d.second)
        found_first |= failed(d.first->status, d.first->message,
                              d.first->timed_out ? c10d::ErrorType::TIMEOUT
                              : d.first->status == HCOMM_ERR_PEER_FAILED || d.first->status == HCOMM_ERR_REVOKED
                                  ? c10d::ErrorType::REMOTE_ERROR
                                  : c10d::ErrorType::COMM_ERROR);
    for (auto& d : done) finish(d.first, d.second);
    if (found_first) {
      revoke_if_asked();  // the others first, then this rank's hooks
      run_abort_hooks();
    }
    // Spin while the wait is young, then yield, then sleep between polls.
    // The phases go by time since the last completion or post, not by
    // count: under load a count of yields lasts long, and this thread then
    // takes CPU from the training it overlaps with (DDP's backward pass).
    auto now = Clock::now();
    if (!done.empty() || posted) {
      idle = 0;
      active = now;
    } else if (++idle > 64) {
      if (now - active < std::chrono::microseconds(kYieldUs)) {
        sched_yield();
      } else {
        struct timespec ts = {0, kSleepNs};
        nanosleep(&ts, nullptr);
      }
    }
    done.clear();
  }
}

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         ms timeout, const std::string& name) {
  return c10::make_intrusive<BackendHcomm>(store, rank, size, timeout, name);
}

}  // namespace hcomm_torch
