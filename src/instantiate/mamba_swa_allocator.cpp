// The tri-pool (Mamba, full and SWA), compiled once for each enabled backend
// (detail/library_spaces.hpp).
#include <kvpool/mamba_swa_allocator.hpp>

namespace kvpool {

KVPOOL_DEFINE_LIBRARY_INSTANCES(UnifiedMambaSWAAllocator)

} // namespace kvpool
