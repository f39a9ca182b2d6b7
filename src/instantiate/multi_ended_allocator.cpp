// The allocator, its device-table executor and their staging, compiled once
// for each enabled backend (detail/library_spaces.hpp).
#include <kvpool/multi_ended_allocator.hpp>

namespace kvpool {

namespace detail {
KVPOOL_DEFINE_LIBRARY_INSTANCES(Staging)
KVPOOL_DEFINE_LIBRARY_INSTANCES(TableExecutor)
} // namespace detail

KVPOOL_DEFINE_LIBRARY_INSTANCES(MultiEndedAllocator)

} // namespace kvpool
