// A fixed set of threads running jobs from a bounded queue: where the HTTP server answers the
// routes marked `offload` (reads that are slow on a big experiment) and, in a pool of their own,
// those marked `writes` (the workers' reports), so that they never hold an io thread and a burst of
// them is refused (503) instead of queued without end.
// Thread-safety: try_post and queued from any thread; stop from the owner only.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace precon::orch {

class WorkPool {
 public:
  // threads >= 1; queue_limit: jobs that may wait for a thread (running ones not counted).
  WorkPool(size_t threads, size_t queue_limit) : queue_limit_(queue_limit) {
    for (size_t i = 0; i < (threads == 0 ? 1 : threads); ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkPool() { stop(); }
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // False, the job dropped, when queue_limit jobs are waiting already or the pool has stopped.
  // A job must not throw.
  bool try_post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      if (stopped_ || queue_.size() >= queue_limit_) return false;
      queue_.push_back(std::move(job));
    }
    wake_.notify_one();
    return true;
  }

  size_t queued() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

  // Lets running jobs finish, drops the waiting ones (destroying them here) and joins. Idempotent.
  void stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      dropped.swap(queue_);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
        if (stopped_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  const size_t queue_limit_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace precon::orch
