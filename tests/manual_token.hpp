#pragma once

#include <kvpool/completion_token.hpp>

#include <atomic>

namespace kvpool::test {

// A forward-done marker the test completes by hand.
class ManualToken final : public CompletionToken {
public:
    bool is_complete() const override { return done_.load(); }
    void complete() { done_.store(true); }

private:
    std::atomic<bool> done_{false};
};

} // namespace kvpool::test
