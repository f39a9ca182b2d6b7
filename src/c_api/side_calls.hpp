// The arguments of the paged allocation calls as the C API receives them, for
// a side, the SWA pair and the tri-pool alike.
#pragma once

#include "handles.hpp"

namespace kvpool::capi {

// need_size virtual ids (a multiple of the target's page size) into out.
struct AllocCall {
    AllocCall(std::int64_t need_size, std::int64_t* out)
        : need_size(need_size), out(device_ids(out, std::max<std::int64_t>(need_size, 0))) {}

    template <class Target> bool run(Target& target, const Space& space) const {
        return target.alloc(space, need_size, out);
    }

    index_t need_size;
    Ids out;
};

// Prefill: request i grows from prefix_lens[i] to seq_lens[i] tokens.
struct ExtendCall {
    ExtendCall(const std::int64_t* prefix_lens_host, const std::int64_t* seq_lens_host,
               std::int64_t batch, const std::int64_t* last_loc, std::int64_t* out,
               std::int64_t out_length)
        : prefix_lens(host_ids(prefix_lens_host, batch)), seq_lens(host_ids(seq_lens_host, batch)),
          last_loc(device_ids(last_loc, batch)),
          out(device_ids(out, std::max<std::int64_t>(out_length, 0))) {}

    template <class Target> bool run(Target& target, const Space& space) const {
        return target.alloc_extend(space, prefix_lens, seq_lens, last_loc, out);
    }

    std::vector<index_t> prefix_lens;
    std::vector<index_t> seq_lens;
    Ids last_loc;
    Ids out;
};

// Decode: one new token per request; seq_lens count it already.
struct DecodeCall {
    DecodeCall(const std::int64_t* seq_lens_host, std::int64_t batch, const std::int64_t* last_loc,
               std::int64_t* out)
        : seq_lens(host_ids(seq_lens_host, batch)), last_loc(device_ids(last_loc, batch)),
          out(device_ids(out, batch)) {}

    template <class Target> bool run(Target& target, const Space& space) const {
        return target.alloc_decode(space, seq_lens, last_loc, out);
    }

    std::vector<index_t> seq_lens;
    Ids last_loc;
    Ids out;
};

// Runs call on target on the stream's instance: *allocated = 1, or 0 when
// there is no room (checked before anything runs).
template <class Call, class Target>
void run_alloc(const Call& call, Target& target, void* stream, int* allocated) {
    int& ok = deref(allocated, "allocated");
    ok = call.run(target, space_of(stream)) ? 1 : 0;
}

} // namespace kvpool::capi
