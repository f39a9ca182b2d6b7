// The engine's "forward pass done" marker. Lazy compaction uses it to know when
// pages that a forward pass reads or writes may be moved or reused. On CUDA it
// wraps a cudaEvent_t; on the host backends work is complete when it returns.
#pragma once

#include <atomic>
#include <memory>

namespace kvpool {

class CompletionToken {
public:
    virtual ~CompletionToken() = default;
    // Non-blocking: has the marked work finished?
    virtual bool is_complete() const = 0;
};

// The token of the host backends: their kernels have finished when they return.
class CompletedToken final : public CompletionToken {
public:
    bool is_complete() const override { return true; }
};

// A marker its owner completes by hand: an engine on a host backend that finishes
// a step asynchronously, or a test that holds a forward pass open.
class ManualToken final : public CompletionToken {
public:
    bool is_complete() const override { return done_.load(); }
    void complete() { done_.store(true); }

private:
    std::atomic<bool> done_{false};
};

using CompletionTokenPtr = std::shared_ptr<const CompletionToken>;

} // namespace kvpool
