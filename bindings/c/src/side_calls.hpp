// The arguments of the paged allocation calls as the C API receives them, for
// a side, the SWA pair and the tri-pool alike. Device arrays become Views in
// the memory of the target's space when the call runs on it.
#pragma once

#include "handles.hpp"

namespace kvpool::capi {

// need_size virtual ids (a multiple of the target's page size) into out.
struct AllocCall {
    AllocCall(std::int64_t need_size, std::int64_t* out) : need_size(need_size), out(out) {}

    template <class Target, class Space> bool run(Target& target, const Space& space) const {
        return target.alloc(space, need_size, out_view<Space>());
    }
    template <class Space> IdsOn<Space> out_view() const {
        return device_ids<Space>(out, std::max<std::int64_t>(need_size, 0));
    }

    index_t need_size;
    std::int64_t* out;
};

// Prefill: request i grows from prefix_lens[i] to seq_lens[i] tokens.
struct ExtendCall {
    ExtendCall(const std::int64_t* prefix_lens_host, const std::int64_t* seq_lens_host,
               std::int64_t batch, const std::int64_t* last_loc, std::int64_t* out,
               std::int64_t out_length)
        : prefix_lens(host_ids(prefix_lens_host, batch)), seq_lens(host_ids(seq_lens_host, batch)),
          batch(batch), last_loc(last_loc), out(out), out_length(out_length) {}

    template <class Target, class Space> bool run(Target& target, const Space& space) const {
        return target.alloc_extend(space, prefix_lens, seq_lens, device_ids<Space>(last_loc, batch),
                                   device_ids<Space>(out, std::max<std::int64_t>(out_length, 0)));
    }

    std::vector<index_t> prefix_lens;
    std::vector<index_t> seq_lens;
    std::int64_t batch;
    const std::int64_t* last_loc;
    std::int64_t* out;
    std::int64_t out_length;
};

// Decode: one new token per request; seq_lens count it already.
struct DecodeCall {
    DecodeCall(const std::int64_t* seq_lens_host, std::int64_t batch, const std::int64_t* last_loc,
               std::int64_t* out)
        : seq_lens(host_ids(seq_lens_host, batch)), batch(batch), last_loc(last_loc), out(out) {}

    template <class Target, class Space> bool run(Target& target, const Space& space) const {
        return target.alloc_decode(space, seq_lens, device_ids<Space>(last_loc, batch),
                                   device_ids<Space>(out, batch));
    }

    std::vector<index_t> seq_lens;
    std::int64_t batch;
    const std::int64_t* last_loc;
    std::int64_t* out;
};

// count state slots into out, through the composite (the Mamba pair, the tri-pool).
struct StateSlotsCall : AllocCall {
    using AllocCall::AllocCall;
    template <class Composite, class Space> bool run(Composite& c, const Space& space) const {
        return c.alloc_state_slots(space, need_size, out_view<Space>());
    }
};

// Virtual -> physical token ids of side into out (n entries, int32 or int64;
// caller memory of the side's device), on space.
template <class Space>
void translate_into(const MultiEndedAllocator<Space>& side, const Space& space,
                    const std::int64_t* virtual_tokens, std::int64_t n, void* out, bool out_int32) {
    require(n >= 0, "translate: negative length");
    require_reachable<Space>(virtual_tokens, n);
    require_reachable<Space>(out, n);
    const typename MultiEndedAllocator<Space>::const_index_view in(virtual_tokens,
                                                                   static_cast<std::size_t>(n));
    if (out_int32)
        side.translate(
            space, in,
            Ids32On<Space>(static_cast<std::int32_t*>(out), static_cast<std::size_t>(n)));
    else
        side.translate(space, in,
                       IdsOn<Space>(static_cast<index_t*>(out), static_cast<std::size_t>(n)));
}

// Runs call on target on the space's instance: *allocated = 1, or 0 when
// there is no room (checked before anything runs).
template <class Call, class Target, class Space>
void run_alloc(const Call& call, Target& target, const Space& space, int* allocated) {
    int& ok = deref(allocated, "allocated");
    ok = call.run(target, space) ? 1 : 0;
}

} // namespace kvpool::capi
