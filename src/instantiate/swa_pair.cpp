// The SWA pair, compiled once for each enabled backend (detail/library_spaces.hpp).
#include <kvpool/swa_pair.hpp>

namespace kvpool {

KVPOOL_DEFINE_LIBRARY_INSTANCES(UnifiedSWAAllocator)

} // namespace kvpool
