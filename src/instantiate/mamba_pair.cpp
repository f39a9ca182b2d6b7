// The Mamba pair, compiled once for each enabled backend (detail/library_spaces.hpp).
#include <kvpool/mamba_pair.hpp>

namespace kvpool {

KVPOOL_DEFINE_LIBRARY_INSTANCES(UnifiedMambaAllocator)

} // namespace kvpool
