#include <kvpool/detail/req_slot_allocator.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

namespace kvpool::detail {

ReqSlotAllocator::ReqSlotAllocator(index_t size) : size_(size) {
    if (size <= 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("a request table needs at least one request slot, got size {}", size));
    clear();
}

std::uint64_t ReqSlotAllocator::generation(index_t slot) const {
    if (slot < 0 || slot > size_)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("generation: request slot {} is outside 0..{}", slot, size_));
    return generation_[static_cast<std::size_t>(slot)];
}

std::optional<std::vector<index_t>> ReqSlotAllocator::alloc(index_t n) {
    if (n < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("alloc of {} request slots. {}", n, state_string()));
    if (n > available_size())
        return std::nullopt;
    std::vector<index_t> slots(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
    for (const index_t s : slots) {
        allocated_[static_cast<std::size_t>(s)] = 1;
        ++generation_[static_cast<std::size_t>(s)];
    }
    return slots;
}

void ReqSlotAllocator::undo_alloc(const std::vector<index_t>& slots) {
    for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
        allocated_[static_cast<std::size_t>(*it)] = 0;
        --generation_[static_cast<std::size_t>(*it)];
        free_.push_front(*it);
    }
}

void ReqSlotAllocator::free(const index_t* slots, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        require_allocated("free", slots[i]);
    // A slot named twice: mark each one seen (2), and undo the marks before throwing.
    for (std::size_t i = 0; i < n; ++i) {
        auto& mark = allocated_[static_cast<std::size_t>(slots[i])];
        if (mark == 2) {
            for (std::size_t j = 0; j < i; ++j)
                allocated_[static_cast<std::size_t>(slots[j])] = 1;
            throw Error(ErrorCode::not_allocated,
                        fmt::format("free: request slot {} is named twice in one call. {}",
                                    slots[i], state_string()));
        }
        mark = 2;
    }
    for (std::size_t i = 0; i < n; ++i) {
        allocated_[static_cast<std::size_t>(slots[i])] = 0;
        free_.push_back(slots[i]);
    }
}

void ReqSlotAllocator::clear() {
    free_.clear();
    for (index_t s = 1; s <= size_; ++s)
        free_.push_back(s);
    allocated_.assign(static_cast<std::size_t>(size_) + 1, 0);
    generation_.assign(static_cast<std::size_t>(size_) + 1, 0);
}

void ReqSlotAllocator::require_allocated(const char* what, index_t slot) const {
    if (slot == 0)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: request slot 0 is the padding row, never handed out. {}", what,
                                state_string()));
    if (slot < 0 || slot > size_)
        throw Error(ErrorCode::out_of_range, fmt::format("{}: request slot {} is outside 1..{}. {}",
                                                         what, slot, size_, state_string()));
    if (!is_allocated(slot))
        throw Error(ErrorCode::not_allocated,
                    fmt::format("{}: request slot {} is not allocated (double free?). {}", what,
                                slot, state_string()));
}

std::string ReqSlotAllocator::state_string() const {
    return fmt::format("request slots: {} of {} free", available_size(), size_);
}

} // namespace kvpool::detail
