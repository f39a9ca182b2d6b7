// The request tables, plain and hybrid, compiled once for each enabled backend
// (detail/library_spaces.hpp).
#include <kvpool/requests/hybrid_req_to_token_pool.hpp>
#include <kvpool/requests/req_to_token_pool.hpp>

namespace kvpool {

KVPOOL_DEFINE_LIBRARY_INSTANCES(ReqToTokenPool)
KVPOOL_DEFINE_LIBRARY_INSTANCES(HybridReqToTokenPool)

} // namespace kvpool
