// What the composites with an id-following side (the SWA pair, the tri-pool)
// share: the sides' roles, the follower's page size, and the checks of a free
// over the id owner and its follower, made on both before either changes.
#pragma once

#include <kvpool/allocator_options.hpp>
#include <kvpool/detail/follower_pages.hpp>
#include <kvpool/error.hpp>

#include <string>
#include <vector>

namespace kvpool::detail {

inline AllocatorOptions with_role(AllocatorOptions options, bool id_owner) {
    options.is_id_owner = id_owner;
    return options;
}

// The follower (the SWA side) binds each owner page as owner page size /
// its page size pages of its own, so its page size must divide the owner's.
// what: the composite, to start the message.
template <class Side>
void check_follower_page_size(const Side& owner, const Side& follower, const std::string& what) {
    if (owner.page_size() % follower.page_size() != 0)
        throw Error(ErrorCode::invalid_argument,
                    what + ": the SWA side's page size " + std::to_string(follower.page_size()) +
                        " does not divide the full side's " + std::to_string(owner.page_size()));
}

// Throws what freeing these tokens on the owner and, where still bound, on its
// follower (follower_tokens: see follower_tokens()) would throw now (an open
// free group defers the follower's and the owner's refusals to its end).
template <class Side>
void check_follower_free(const Side& owner, const Side& follower,
                         const std::vector<index_t>& virtual_tokens,
                         const std::vector<index_t>& follower_tokens) {
    const auto count = static_cast<index_t>(virtual_tokens.size());
    if (!follower.core().in_free_group()) {
        follower.core().check_free_allowed();
        follower.core().check_free_gates(follower_tokens.data(),
                                         static_cast<index_t>(follower_tokens.size()));
    }
    owner.check_free(virtual_tokens); // the owner holds the ids
    if (!owner.core().in_free_group())
        owner.core().check_free_gates(virtual_tokens.data(), count);
}

// The follower's tokens to free with these owner tokens (follower_tokens():
// every follower page under the owner pages they lie on), checked on both
// sides as check_follower_free does; written to scratch where they differ.
template <class Side>
const std::vector<index_t>& checked_follower_free(const Side& owner, const Side& follower,
                                                  const std::vector<index_t>& virtual_tokens,
                                                  std::vector<index_t>& scratch) {
    const std::vector<index_t>& follower_free =
        follower_tokens(virtual_tokens, owner.page_size(), follower.page_size(), scratch);
    check_follower_free(owner, follower, virtual_tokens, follower_free);
    return follower_free;
}

// Throws what ending both sides' free groups would throw now.
template <class Side> void check_follower_free_group_end(const Side& owner, const Side& follower) {
    if (follower.core().in_free_group()) {
        follower.core().check_free_allowed();
        follower.core().check_free_gates(nullptr, 0);
    }
    owner.check_free_group_end();
    if (owner.core().in_free_group())
        owner.core().check_free_gates(nullptr, 0);
}

// free_swa names only ids the owner holds.
template <class Side>
void check_window_tokens_allocated(const Side& owner, const std::vector<index_t>& virtual_tokens) {
    for (index_t t : virtual_tokens)
        if (!owner.is_slot_allocated(t))
            throw Error(ErrorCode::not_allocated, "free_swa of id " + std::to_string(t) +
                                                      ", which is not allocated. " +
                                                      owner.state_string());
}

} // namespace kvpool::detail
