// BackendHcomm when a member fails (docs/python.md "When a rank fails",
// docs/faults.md): the group's first failure, the revoke that makes every
// other member's operations on the group end with ERR_REVOKED instead of
// waiting for the timeout, the cause of a peer's revoke, abort(), getError(),
// the abort hooks and shrink (torch.distributed.shrink_group and
// hcomm.torch.shrink_group).
//
// The causes: hcomm's ERR_REVOKED names the rank that revoked, not why. The
// rank that revokes first leaves its reason in the group's store under
// "hcomm/fault/<group>/<its group rank>" (a set that completes before its
// REVOKE frames go out), and a member whose operation fails with ERR_REVOKED
// from that rank reads it there and adds it to its error, so every member's
// exception names the rank that failed first. The store is best effort: one
// that cannot be reached leaves the message as hcomm gave it.
#include "backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace hcomm_torch {

// The group's first failure: later operations are refused with it, and the
// worker is asked to revoke the communicator. Worker thread, abort()'s or
// shrink's, no hcomm lock. (The abort hooks run in the worker, after.) True
// when this call recorded the first failure.
bool BackendHcomm::failed(hcomm_status_t st, const std::string& cause, c10d::ErrorType type) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (!failure_.empty()) return false;
    failure_ = "group rank " + std::to_string(rank_) + ": " + cause;
    if (st == HCOMM_OK) type = c10d::ErrorType::COMM_ERROR;
    error_type_ = (int)type;
    revoke_asked_ = true;
    revoke_cause_ = failure_;
  }
  qcv_.notify_all();
  return true;
}

std::string BackendHcomm::failure() {
  std::lock_guard<std::mutex> lk(qmu_);
  return failure_;
}

c10d::ErrorType BackendHcomm::getError() { return (c10d::ErrorType)error_type_.load(); }

// Worker thread: the revoke that failed() asked for, once. The cause goes to
// the store first (no hcomm lock: a store call may wait on the network).
void BackendHcomm::revoke_if_asked() {
  std::string cause;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (!revoke_asked_ || revoked_) return;
    revoked_ = true;
    cause = revoke_cause_;
  }
  if (store_) {
    try {
      store_->set(fault_key(rank_), std::vector<uint8_t>(cause.begin(), cause.end()));
    } catch (const std::exception& e) {
      TORCH_WARN("hcomm: could not leave the cause of the revoke in the store: ", e.what());
    }
  }
  LibLock l;
  hcomm_status_t st = hcomm_comm_revoke(comm_);
  if (st != HCOMM_OK) TORCH_WARN("hcomm: hcomm_comm_revoke: ", hcomm_message(st));
}

// Why group rank grank revoked the group (its store key), "" if unknown.
// Worker thread, no hcomm lock.
std::string BackendHcomm::peer_cause(int grank) {
  auto it = peer_causes_.find(grank);
  if (it != peer_causes_.end()) return it->second;
  std::string cause;
  if (store_) {
    try {
      std::string key = fault_key(grank);
      if (store_->check({key})) {
        auto v = store_->get(key);
        cause.assign(v.begin(), v.end());
      }
    } catch (const std::exception&) {
      cause.clear();  // the store is gone with its host: hcomm's words only
    }
  }
  if (!cause.empty()) peer_causes_[grank] = cause;
  return cause;
}

// Works that failed because of a revoke or an abort get the reason: a peer's
// from the store, this rank's own first failure (abort() records it before
// it aborts). Worker thread, no hcomm lock.
void BackendHcomm::explain_revoked(std::vector<std::pair<WorkPtr, std::exception_ptr>>& done) {
  static const char kBy[] = "communicator rank ";
  for (auto& d : done) {
    WorkHcomm& w = *d.first;
    // The status may be ERR_PEER_FAILED with the revoke's text: a
    // collective that a member's revoke ended (what libhcomm returns today).
    bool aborted = w.message.find("communicator was aborted") != std::string::npos;
    if (!d.second || (!aborted && w.message.find("revoked the communicator") == std::string::npos)) continue;
    std::string why;
    size_t at = aborted ? std::string::npos : w.message.find(kBy);
    if (at != std::string::npos) {
      int by = std::atoi(w.message.c_str() + at + sizeof(kBy) - 1);
      std::string c = peer_cause(by);
      if (!c.empty()) why = " (it revoked the group after: " + c + ")";
    } else {
      std::string f = failure();
      if (!f.empty()) why = " (after: " + f + ")";
    }
    if (why.empty()) continue;
    w.message += why;
    w.error = dist_error(std::string("hcomm ") + w.name + ": " + w.message);
    d.second = w.error;
  }
}

// Any thread (torch's abort, a watchdog): hcomm_comm_abort fails this rank's
// pending operations now; the worker then revokes, which reaches the others.
// The cause is recorded first, so that an operation the worker sees fail
// from the abort already names it (explain_revoked).
void BackendHcomm::abort() {
  std::lock_guard<std::mutex> ck(comm_mu_);
  if (!comm_) return;  // shut down already
  failed(HCOMM_ERR_ABORTED, "abort() was called on this rank [ERR_ABORTED]", c10d::ErrorType::COMM_ERROR);
  hcomm_comm_abort(comm_);
}

// The abort hooks (torch 2.15's C10D_BACKEND_HAS_HOOKS: the flight
// recorder dumps its trace in one), on the worker thread once a failure it
// found has been delivered to the failed works and the revoke sent: a hook
// that takes seconds delays neither this rank's error nor the others'. Not
// for abort() and shrink: they are the caller's decision, not a failure.
void BackendHcomm::run_abort_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lk(hooks_mu_);
    for (auto& h : abort_hooks_) hooks.push_back(h.second);
  }
  for (auto& h : hooks) {
    try {
      h();
    } catch (const std::exception& e) {
      TORCH_WARN("hcomm: an abort hook raised: ", e.what());
    }
  }
}

#ifdef C10D_BACKEND_HAS_HOOKS
void BackendHcomm::registerAbortHook(int64_t hook_id, c10d::AbortHook hook) {
  std::lock_guard<std::mutex> lk(hooks_mu_);
  abort_hooks_[hook_id] = std::move(hook);
}

void BackendHcomm::unregisterAbortHook(int64_t hook_id) {
  std::lock_guard<std::mutex> lk(hooks_mu_);
  abort_hooks_.erase(hook_id);
}
#endif

// ---- shrink ------------------------------------------------------------------

// Revokes the group (if no failure has yet), then the survivors agree
// (hcomm_comm_shrink) and learn one another's ranks in this group (an
// allgather on the new communicator). Run by the worker in issue order.
BackendHcomm::Agreed BackendHcomm::agree(const char* why) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    TORCH_CHECK(!shrunk_, "hcomm ", why, ": this group was shrunk already; shrink the new group");
  }
  failed(HCOMM_ERR_REVOKED, std::string(why) + " was called on this rank", c10d::ErrorType::COMM_ERROR);
  auto w = make_work(OpType::UNKNOWN, "shrink", {}, c10d::kUnsetTimeout);
  auto out = std::make_shared<Agreed>();
  int me = rank_;
  w->control = [this, out, me](std::string& err) {
    hcomm_comm_t nc = nullptr;
    hcomm_status_t st = hcomm_comm_shrink(comm_, &nc);
    if (st != HCOMM_OK) {
      err = "hcomm_comm_shrink: " + hcomm_message(st);
      return st;
    }
    int n = hcomm_comm_size(nc);
    std::vector<int32_t> members((size_t)n);
    int32_t mine = me;
    st = hcomm_allgather(&mine, members.data(), 1, HCOMM_INT32, nc);
    if (st != HCOMM_OK) {
      err = "the new group's first allgather (another member failed: shrink the new group again): " +
            hcomm_message(st);
      hcomm_comm_free(nc);
      return st;
    }
    out->comm = nc;
    out->members.assign(members.begin(), members.end());
    return HCOMM_OK;
  };
  enqueue(w, true)->wait();
  std::lock_guard<std::mutex> lk(qmu_);
  shrunk_ = true;
  return *out;
}

static std::string list_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<int64_t> BackendHcomm::agree_shrink() {
  Agreed a = agree("hcomm.torch.shrink_group");
  std::vector<int64_t> out;
  for (int r = 0; r < size_; r++)
    if (std::find(a.members.begin(), a.members.end(), r) == a.members.end()) out.push_back(r);
  std::lock_guard<std::mutex> ck(comm_mu_);
  agreed_ = a;
  return out;
}

c10::intrusive_ptr<c10d::Backend> BackendHcomm::shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                                       const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  // shrink_flags: SHRINK_ABORT (ongoing operations end first) is what this
  // shrink always does: it revokes the group before the agreement.
  (void)shrink_flags;
  std::vector<int> want;
  for (int r = 0; r < size_; r++)
    if (std::find(ranks_to_exclude.begin(), ranks_to_exclude.end(), (int64_t)r) == ranks_to_exclude.end())
      want.push_back(r);
  for (int64_t r : ranks_to_exclude)
    TORCH_CHECK(r >= 0 && r < size_ && r != rank_, "hcomm shrink: ranks_to_exclude has ", r,
                " (a group of ", size_, " ranks, this is rank ", rank_, ")");
  Agreed a;
  {
    std::lock_guard<std::mutex> ck(comm_mu_);
    std::swap(a, agreed_);
  }
  if (!a.comm) a = agree("shrink");
  if (a.members != want) {
    {
      LibLock l;
      hcomm_comm_free(a.comm);
    }
    TORCH_CHECK(false, "hcomm shrink: the survivors agreed on group ranks ", list_text(a.members),
                " but ranks_to_exclude leaves ", list_text(want),
                ": exclude exactly the ranks that failed (hcomm.torch.shrink_group finds them)");
  }
  int nrank = (int)(std::find(a.members.begin(), a.members.end(), rank_) - a.members.begin());
  ms t = opts && opts->timeout.count() >= 0 ? opts->timeout : timeout_;
  std::string name = opts && !opts->group_name.empty() ? opts->group_name : name_ + ":shrunk";
  return c10::make_intrusive<BackendHcomm>(a.comm, nrank, (int)a.members.size(), t, name, store_);
}

}  // namespace hcomm_torch
