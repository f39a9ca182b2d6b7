// A forward-done marker for randomised runs without a model to say which
// waits happen: the test completes it when it likes, and it completes itself
// once polled often enough, so that a GPU backend's wait on it (which polls a
// token that is not one of its runtime's events) ends instead of hanging.
#pragma once

#include <kvpool/completion_token.hpp>

#include <atomic>

namespace kvpool::test {

class SelfCompletingToken final : public CompletionToken {
public:
    bool is_complete() const override {
        if (!done_.load() && ++polls_ > max_polls)
            done_.store(true);
        return done_.load();
    }
    void complete() { done_.store(true); }

private:
    static constexpr long max_polls = 1000;
    mutable std::atomic<bool> done_{false};
    mutable std::atomic<long> polls_{0};
};

} // namespace kvpool::test
