// How long one forward step takes in simulated time: a fixed cost plus a cost
// per prefilled token and per decoded token. Deliberately simple: the policies
// differ in how many requests run at once, and this turns that into completed
// requests per second.
#pragma once

#include <kvpool/types.hpp>

namespace kvpool::sim {

struct StepTimeModel {
    double overhead_s = 0.012;          // weights read, launches: paid by every step
    double per_prefill_token_s = 40e-6; // compute-bound prefill
    double per_decode_token_s = 60e-6;  // one new token of one running request

    double step_seconds(index_t prefill_tokens, index_t decode_tokens) const {
        return share_seconds(1.0, prefill_tokens, decode_tokens);
    }
    // The part of a step's time owed to some of its requests: their tokens and
    // their share of the overhead.
    double share_seconds(double overhead_share, index_t prefill_tokens,
                         index_t decode_tokens) const {
        return overhead_s * overhead_share +
               per_prefill_token_s * static_cast<double>(prefill_tokens) +
               per_decode_token_s * static_cast<double>(decode_tokens);
    }
};

} // namespace kvpool::sim
