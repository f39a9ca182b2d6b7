// The arguments of the paged allocation calls as the C API receives them, for
// a side and for the SWA pair alike.
#pragma once

#include "handles.hpp"

namespace kvpool::capi {

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

} // namespace kvpool::capi
