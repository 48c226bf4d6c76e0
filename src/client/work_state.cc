#include "client/work_state.h"

namespace switchml {

void WorkState::PartDone(const Status& status) {
  std::function<void(const Status&)> callback;
  Status final_status;
  {
    std::lock_guard lock(mu_);
    if (!status.ok() && status_.ok()) status_ = status;
    if (--remaining_ != 0) return;
    cv_.notify_all();
    callback.swap(on_done_);
    final_status = status_;
  }
  if (callback) callback(final_status);
}

void WorkState::OnDone(std::function<void(const Status&)> callback) {
  Status final_status;
  {
    std::lock_guard lock(mu_);
    if (remaining_ > 0) {
      on_done_ = std::move(callback);
      return;
    }
    final_status = status_;
  }
  callback(final_status);
}

Status WorkState::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return remaining_ <= 0; });
  return status_;
}

bool WorkState::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return remaining_ <= 0; });
}

bool WorkState::done() const {
  std::lock_guard lock(mu_);
  return remaining_ <= 0;
}

Status WorkState::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

}  // namespace switchml
