// The test seam: breaks one piece of a core's bookkeeping and mends it again,
// so that the internal checks can be forced. One definition, shared by the
// tests that use it.
#pragma once

#include <kvpool/detail/allocator_core.hpp>

namespace kvpool::detail {

struct AllocatorCoreTestAccess {
    static void set_live(const AllocatorCore& core, index_t page, bool live) {
        mutable_core(core).tables_.page_state.set(static_cast<std::size_t>(page),
                                                  live ? PageState::live : PageState::outside);
    }
    static void move_watermark(const AllocatorCore& core, index_t by) {
        mutable_core(core).tables_.watermark += by;
    }
    // Moves the whole band (anchor and watermark) by this many pages.
    static void move_band(const AllocatorCore& core, index_t by) {
        mutable_core(core).tables_.anchor += by;
        mutable_core(core).tables_.watermark += by;
    }

private:
    static AllocatorCore& mutable_core(const AllocatorCore& core) {
        return const_cast<AllocatorCore&>(core);
    }
};

} // namespace kvpool::detail
