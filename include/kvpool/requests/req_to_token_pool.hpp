// The request table (SGLang's ReqToTokenPool): row r of a device table holds
// the token ids of the request in slot r, one column per position. Row 0 is the
// padding row: padded batches point their request index at it, so it is never
// handed out. Which slots are free is decided on the host
// (detail::ReqSlotAllocator); device calls take the caller's execution-space
// instance first and never fence, except check_invariants(). Calls are
// serialised by contract, as for MultiEndedAllocator (the upload buffer is
// reused from call to call in stream order).
#pragma once

#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/req_slot_allocator.hpp>
#include <kvpool/detail/staging.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/portable/request_table.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvpool {

template <class ExecutionSpace> class ReqToTokenPool {
public:
    using execution_space = ExecutionSpace;
    using memory_space = typename ExecutionSpace::memory_space;
    // Row-major on every backend (Kokkos' default for Cuda/HIP is column-major),
    // so a request's token ids are contiguous, as attention kernels expect.
    using table_view = Kokkos::View<index_t**, Kokkos::LayoutRight, memory_space>;
    using index_view = kk::View<index_t*, memory_space>;
    using const_index_view = kk::View<const index_t*, memory_space>;

    ReqToTokenPool(index_t size, index_t max_context_len)
        : ReqToTokenPool(ExecutionSpace(), size, max_context_len) {}

    // size request slots (1..size) plus the padding row 0, max_context_len
    // positions each; the table starts zeroed, like the reference's.
    ReqToTokenPool(const ExecutionSpace& space, index_t size, index_t max_context_len)
        : slots_(size), max_context_len_(require_positive_context(max_context_len)),
          table_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kvpool::req_to_token"),
                 static_cast<std::size_t>(size) + 1, static_cast<std::size_t>(max_context_len)),
          host_rows_(static_cast<std::size_t>(size) + 1) {
        Kokkos::deep_copy(space, table_, index_t(0));
    }

    ReqToTokenPool(const ReqToTokenPool&) = delete;
    ReqToTokenPool& operator=(const ReqToTokenPool&) = delete;

    // ---------------------------------------------------------------- sizes
    index_t size() const { return slots_.size(); }
    index_t max_context_len() const { return max_context_len_; }
    index_t available_size() const { return slots_.available_size(); }
    bool is_allocated(index_t slot) const { return slots_.is_allocated(slot); }
    // Times the slot was handed out since construction or clear() (the
    // reference's req_generation): tells a reused slot from its last owner.
    std::uint64_t generation(index_t slot) const { return slots_.generation(slot); }
    std::string state_string() const { return slots_.state_string(); }

    // (size + 1) x max_context_len, row 0 the padding row.
    const table_view& req_to_token() const { return table_; }

    // ---------------------------------------------------------------- alloc / free
    // n request slots, or nullopt when fewer are free (nothing changed). Their
    // rows keep whatever the last owner wrote; row_length() starts at 0.
    std::optional<std::vector<index_t>> alloc(index_t n) { return slots_.alloc(n); }

    // Out of range, the padding row, a free slot or a slot named twice throws
    // kvpool::Error and frees nothing. The device rows are left as they are.
    void free(index_t slot) { free(std::vector<index_t>{slot}); }
    void free(const std::vector<index_t>& slots) {
        slots_.free(slots.data(), slots.size());
        for (const index_t s : slots)
            host_rows_[static_cast<std::size_t>(s)].clear();
    }

    // Every slot free again (the reference's clear: the device table is not touched).
    void clear() {
        slots_.clear();
        for (auto& row : host_rows_)
            row.clear();
    }

    // ---------------------------------------------------------------- write
    // Row slot, columns [start, start + ids.extent(0)) = ids (device), in one
    // launch on space. The host does not learn the ids (that would take a
    // fence): host_row() reads them as unbound.
    void write(const ExecutionSpace& space, index_t slot, index_t start,
               const const_index_view& ids) {
        const index_t n = static_cast<index_t>(ids.extent(0));
        require_segment("write", slot, start, n);
        kernels::portable::write_row(space, table_, slot, start, ids);
        record_host(slot, start, n, nullptr);
    }

    // The same from host ids (uploaded on space), which host_row() then returns.
    void write(const ExecutionSpace& space, index_t slot, index_t start,
               const std::vector<index_t>& ids) {
        const index_t n = static_cast<index_t>(ids.size());
        require_segment("write", slot, start, n);
        if (n == 0)
            return;
        const std::size_t at = staging_.add(ids);
        staging_.upload(space);
        kernels::portable::write_row(space, table_, slot, start, staging_.slice(at, ids.size()));
        record_host(slot, start, n, ids.data());
    }

    // Many rows in one launch (e.g. one new token per request in a decode
    // step): lengths[r] ids from ids, in order, go to row slots[r] from column
    // starts[r]. Segments of one row must not overlap; all checks run first.
    void write(const ExecutionSpace& space, const std::vector<index_t>& slots,
               const std::vector<index_t>& starts, const std::vector<index_t>& lengths,
               const const_index_view& ids) {
        if (starts.size() != slots.size() || lengths.size() != slots.size())
            throw Error(ErrorCode::invalid_argument,
                        "write: slots, starts and lengths have " + std::to_string(slots.size()) +
                            ", " + std::to_string(starts.size()) + " and " +
                            std::to_string(lengths.size()) + " entries");
        std::vector<index_t> offsets(slots.size() + 1, 0);
        for (std::size_t r = 0; r < slots.size(); ++r) {
            require_segment("write", slots[r], starts[r], lengths[r]);
            offsets[r + 1] = offsets[r] + lengths[r];
        }
        if (offsets.back() != static_cast<index_t>(ids.extent(0)))
            throw Error(ErrorCode::invalid_argument,
                        "write: lengths add up to " + std::to_string(offsets.back()) +
                            " ids, but ids has " + std::to_string(ids.extent(0)));
        require_disjoint(slots, starts, lengths);
        if (offsets.back() == 0)
            return;
        const std::size_t rows = staging_.add(slots);
        const std::size_t first = staging_.add(starts);
        const std::size_t offs = staging_.add(offsets);
        staging_.upload(space);
        kernels::portable::write_rows(space, table_, staging_.slice(rows, slots.size()),
                                      staging_.slice(first, slots.size()),
                                      staging_.slice(offs, offsets.size()), ids);
        // The host learns of a write once it is enqueued: a device failure
        // before leaves the mirror as it was.
        for (std::size_t r = 0; r < slots.size(); ++r)
            record_host(slots[r], starts[r], lengths[r], nullptr);
    }

    // ---------------------------------------------------------------- host mirror
    // One past the last column written since the slot was allocated.
    index_t row_length(index_t slot) const {
        slots_.require_allocated("row_length", slot);
        return static_cast<index_t>(host_rows_[static_cast<std::size_t>(slot)].size());
    }
    // Columns [0, row_length(slot)) as the host knows them: ids written from
    // host arrays; unbound where the ids came from the device or nothing was
    // written.
    const std::vector<index_t>& host_row(index_t slot) const {
        slots_.require_allocated("host_row", slot);
        return host_rows_[static_cast<std::size_t>(slot)];
    }

    // The device table against the host mirror, for every id the host knows. Fences.
    void check_invariants(const ExecutionSpace& space) const {
        space.fence();
        auto table = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table_);
        for (index_t s = 0; s <= size(); ++s) {
            const auto& row = host_rows_[static_cast<std::size_t>(s)];
            if (!is_allocated(s) && !row.empty())
                throw Error(ErrorCode::internal, "request slot " + std::to_string(s) +
                                                     " is free but has a host row. " +
                                                     state_string());
            for (std::size_t c = 0; c < row.size(); ++c)
                if (row[c] != unbound && table(s, c) != row[c])
                    throw Error(ErrorCode::internal, "req_to_token(" + std::to_string(s) + ", " +
                                                         std::to_string(c) +
                                                         ") = " + std::to_string(table(s, c)) +
                                                         ", host mirror " + std::to_string(row[c]));
        }
    }
    void check_invariants() const { check_invariants(ExecutionSpace()); }

protected:
    static index_t require_positive_context(index_t max_context_len) {
        if (max_context_len <= 0)
            throw Error(ErrorCode::invalid_argument,
                        "max_context_len must be > 0, got " + std::to_string(max_context_len));
        return max_context_len;
    }

    void require_segment(const char* what, index_t slot, index_t start, index_t length) const {
        slots_.require_allocated(what, slot);
        if (start < 0 || length < 0 || start > max_context_len_ - length)
            throw Error(ErrorCode::out_of_range,
                        std::string(what) + ": columns [" + std::to_string(start) + ", " +
                            std::to_string(start + length) + ") of request slot " +
                            std::to_string(slot) + " are outside [0, max_context_len " +
                            std::to_string(max_context_len_) + ")");
    }

    // Overlapping segments of one row would race in the batched kernel.
    static void require_disjoint(const std::vector<index_t>& slots,
                                 const std::vector<index_t>& starts,
                                 const std::vector<index_t>& lengths) {
        std::vector<std::size_t> order(slots.size());
        for (std::size_t r = 0; r < slots.size(); ++r)
            order[r] = r;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return std::make_pair(slots[a], starts[a]) < std::make_pair(slots[b], starts[b]);
        });
        for (std::size_t k = 1; k < order.size(); ++k) {
            const std::size_t a = order[k - 1], b = order[k];
            if (slots[a] == slots[b] && lengths[a] > 0 && lengths[b] > 0 &&
                starts[a] + lengths[a] > starts[b])
                throw Error(ErrorCode::invalid_argument,
                            "write: segments [" + std::to_string(starts[a]) + ", " +
                                std::to_string(starts[a] + lengths[a]) + ") and [" +
                                std::to_string(starts[b]) + ", " +
                                std::to_string(starts[b] + lengths[b]) + ") of request slot " +
                                std::to_string(slots[a]) + " overlap");
        }
    }

    // ids == nullptr: written from the device, unknown here.
    void record_host(index_t slot, index_t start, index_t n, const index_t* ids) {
        if (n == 0)
            return;
        auto& row = host_rows_[static_cast<std::size_t>(slot)];
        if (static_cast<index_t>(row.size()) < start + n)
            row.resize(static_cast<std::size_t>(start + n), unbound);
        for (index_t i = 0; i < n; ++i)
            row[static_cast<std::size_t>(start + i)] = ids ? ids[i] : unbound;
    }

    detail::ReqSlotAllocator slots_;
    index_t max_context_len_;
    table_view table_;
    // Per slot, the ids written since it was allocated (capacity is kept for the next owner).
    std::vector<std::vector<index_t>> host_rows_;
    detail::Staging<ExecutionSpace> staging_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(ReqToTokenPool)

} // namespace kvpool
