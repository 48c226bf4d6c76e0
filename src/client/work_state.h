// The state behind a Work handle (include/switchml/context.h): an all-reduce
// of `parts` pieces, one per I/O thread, each of which ends once. The I/O
// threads hold it and report their piece; the user's Work waits on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "switchml/status.h"

namespace switchml {

class WorkState {
 public:
  explicit WorkState(int parts) : remaining_(parts) {}
  // One piece ended with `status`; the first failure is the work's status.
  // The last piece runs the OnDone callback, on the calling thread.
  void PartDone(const Status& status);

  Status Wait();
  bool WaitFor(std::chrono::milliseconds timeout);
  bool done() const;
  Status status() const;
  void OnDone(std::function<void(const Status&)> callback);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;  // guarded by mu_, as are the two below
  Status status_;
  std::function<void(const Status&)> on_done_;
};

}  // namespace switchml
