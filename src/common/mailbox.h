// What other threads hand to one polling thread (a worker I/O thread, a
// switch data thread): a locked queue plus an eventfd that wakes the owner's
// poll(). Posting is the only locked step; the owner takes everything at
// once between its packet batches, so its packet path takes no lock.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace switchml {

template <typename T>
class Mailbox {
 public:
  Mailbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Mailbox() {
    if (fd_ >= 0) close(fd_);
  }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Readable when something was posted or Wake() was called: poll it.
  int fd() const { return fd_; }

  // Queues `item` and wakes the owner. After Close() nothing is queued:
  // returns false and the caller handles `item` itself.
  bool Post(T item) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(item));
      pending_.store(true, std::memory_order_release);
    }
    Wake();
    return true;
  }
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
  }
  // Cheap: whether Take() would return anything.
  bool pending() const { return pending_.load(std::memory_order_acquire); }

  // The owner: clears the wakeup and returns everything posted, in order.
  std::vector<T> Take() {
    uint64_t value;
    [[maybe_unused]] ssize_t n = read(fd_, &value, sizeof(value));
    std::vector<T> items;
    std::lock_guard lock(mu_);
    items.swap(items_);
    pending_.store(false, std::memory_order_relaxed);
    return items;
  }
  // Once the owner has stopped: refuses later posts and returns what is left.
  std::vector<T> Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    pending_.store(false, std::memory_order_relaxed);
    return std::exchange(items_, {});
  }

 private:
  int fd_;
  std::atomic<bool> pending_{false};
  std::mutex mu_;
  std::vector<T> items_;  // guarded by mu_
  bool closed_ = false;   // guarded by mu_
};

}  // namespace switchml
