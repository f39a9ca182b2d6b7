// The host control plane of a request table: which request slots are free.
// Slot 0 is the padding row (padded batches point at it) and is never handed
// out; slots 1..size are. Like SGLang's ReqToTokenPool, allocation takes the
// front of the free list and a free appends to its back, so slot ids come out
// in the same order as the reference's. No Kokkos here.
#pragma once

#include <kvpool/types.hpp>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace kvpool::detail {

class ReqSlotAllocator {
public:
    explicit ReqSlotAllocator(index_t size);

    index_t size() const { return size_; }
    index_t available_size() const { return static_cast<index_t>(free_.size()); }
    bool is_allocated(index_t slot) const {
        return slot > 0 && slot <= size_ && allocated_[static_cast<std::size_t>(slot)] != 0;
    }
    // How many times the slot has been handed out since construction or clear().
    std::uint64_t generation(index_t slot) const;

    // n slots, or nullopt when fewer are free (nothing changed).
    std::optional<std::vector<index_t>> alloc(index_t n);
    // Takes back the slots the last alloc handed out, exactly (free list order
    // and generations as before it).
    void undo_alloc(const std::vector<index_t>& slots);
    // Every slot is checked before any is freed: a slot out of range, the
    // padding row, a free slot or one named twice throws and changes nothing.
    void free(const index_t* slots, std::size_t n);
    void clear();

    // Throws unless slot is handed out: out_of_range outside 1..size (naming
    // the padding row for 0), not_allocated for a free slot.
    void require_allocated(const char* what, index_t slot) const;
    std::string state_string() const;

private:
    index_t size_;
    std::deque<index_t> free_;
    std::vector<unsigned char> allocated_;
    std::vector<std::uint64_t> generation_;
};

} // namespace kvpool::detail
