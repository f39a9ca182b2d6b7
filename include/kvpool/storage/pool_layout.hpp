// Host-side geometry of a unified buffer: which sub-pools share it, how large a
// page of each is, and where the reserved padding sink ends. No Kokkos here.
#pragma once

#include <kvpool/types.hpp>

#include <string>
#include <vector>

namespace kvpool {

// What the user says about one sub-pool.
struct SubPoolSpec {
    std::string name;
    // Bytes of one token slot across all layers (page-major: a page holds all
    // layers of its tokens contiguously, so a page is page_size * entry_bytes).
    index_t entry_bytes = 0;
    index_t page_size = 1;
    GrowDirection grow = GrowDirection::up;
    // Cap on live tokens (the size of the virtual id space); 0 means as many as
    // the whole buffer could hold. A fixed split is expressed with this cap.
    index_t max_tokens = 0;
    // A floating sub-pool only: where its empty band starts, as a fraction of
    // the buffer (it moves from there as it grows and shifts).
    double float_at = 0.5;
};

// What follows from a spec once the buffer size is known. Physical page p of a
// side covers bytes [p * page_bytes, (p + 1) * page_bytes) of the buffer, for
// both grow directions, so the two sides' frontiers compare directly in bytes.
struct SubPoolGeometry {
    SubPoolSpec spec;
    index_t page_bytes = 0;         // entry_bytes * page_size
    index_t num_physical_pages = 0; // pages of this size that fit in the buffer
    index_t num_virtual_pages = 0;  // size of the virtual page id space
    index_t min_page_index = 0;     // pages below this overlap the padding sink
    index_t sink_bytes = 0;         // the buffer's padding sink (PoolLayout::sink_bytes())
    // Where the band sits among the buffer's bands, 0 at the low end.
    std::size_t position = 0;
    // The first page of an empty band (a floating band's anchor; an up band's
    // first page past the sink; one past the last page for a down band).
    index_t start_page = 0;

    index_t page_size() const { return spec.page_size; }
    GrowDirection grow() const { return spec.grow; }
    // Pages that can ever be live at once.
    index_t page_capacity() const { return num_virtual_pages - min_page_index; }
};

// The geometry of one unified buffer shared by one or more sub-pools. Two grow
// toward each other (listed in either order); more are listed from the low end
// up: one growing up, any number floating, one growing down. Validates the
// specs and throws kvpool::Error with the offending value named.
class PoolLayout {
public:
    PoolLayout(index_t total_bytes, std::vector<SubPoolSpec> specs);

    // Splits total_bytes between two specs in the given ratio of bytes and caps
    // each side at its share: the fixed split engines use today.
    static PoolLayout fixed_split(index_t total_bytes, std::vector<SubPoolSpec> specs,
                                  double first_side_fraction);
    // Any number of specs (in the constructor's order), each side capped at
    // its fraction of the bytes (one per spec, each in (0, 1), adding up to
    // 1); a floating side's empty band starts at the low end of its share.
    static PoolLayout fixed_split(index_t total_bytes, std::vector<SubPoolSpec> specs,
                                  const std::vector<double>& fractions);

    index_t total_bytes() const { return total_bytes_; }
    // Bytes [0, sink_bytes) hold no data: page 0 of every side lies inside it,
    // so tombstoned reads and dummy writes of every side land there harmlessly.
    index_t sink_bytes() const { return sink_bytes_; }
    const std::vector<SubPoolGeometry>& sub_pools() const { return sub_pools_; }
    const SubPoolGeometry& sub_pool(std::size_t i) const;
    const SubPoolGeometry& sub_pool(const std::string& name) const;
    std::size_t sub_pool_index(const std::string& name) const;

private:
    void order_floating_starts();

    index_t total_bytes_;
    index_t sink_bytes_;
    std::vector<SubPoolGeometry> sub_pools_;
};

} // namespace kvpool
