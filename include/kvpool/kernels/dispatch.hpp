// The device ops with a native version, as the allocator calls them: the one
// place that chooses between the native kernels (Kokkos::Cuda, Kokkos::HIP:
// launched on the instance's stream) and the portable Kokkos ones (every other
// execution space, and Views the native kernels cannot index). Every View of
// an op must be accessible from the execution space (checked at compile time).
// Ops that have only a portable version are called in kernels::portable.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kernels/native_kernels.hpp>
#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kernels/portable/alloc_bind.hpp>
#include <kvpool/kernels/portable/page_moves.hpp>
#include <kvpool/kernels/portable/table_kernels.hpp>
#include <kvpool/kernels/tools_region.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>
#include <tuple>
#include <type_traits>

namespace kvpool::kernels {

namespace dispatch_detail {

template <class ExecutionSpace, class ViewRefs> struct accessible;
template <class ExecutionSpace, class... Views>
struct accessible<ExecutionSpace, std::tuple<Views...>>
    : std::bool_constant<(
          Kokkos::SpaceAccessibility<ExecutionSpace,
                                     typename std::decay_t<Views>::memory_space>::accessible &&
          ...)> {};

// The native kernels index raw pointers with stride 1.
template <class Op> bool contiguous(const Op& op) {
    return std::apply(
        [](const auto&... view) {
            return ((view.size() == 0 || view.span_is_contiguous()) && ...);
        },
        op.views());
}

// Inside a Kokkos Tools region named name: one launch fault point, then launch_native(kernels,
// stream) where ExecutionSpace has native kernels that take op (Supported: the native kernel takes
// its types) and its Views are contiguous; launch_portable() otherwise.
template <bool Supported = true, class ExecutionSpace, class Op, class Native, class Portable>
void launch(const ExecutionSpace& space, const char* name, const Op& op,
            const Native& launch_native, const Portable& launch_portable) {
    static_assert(accessible<ExecutionSpace, decltype(op.views())>::value,
                  "kvpool: every View of a device op must be accessible from its execution space");
    const ToolsRegion region(name);
    launch_fault_point<ExecutionSpace>(name);
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available && Supported) {
        if (contiguous(op))
            return launch_native(NativeKernels<typename backend::runtime>(),
                                 backend::stream(space));
    }
    launch_portable();
}

} // namespace dispatch_detail

template <class ExecutionSpace, class BytesView, class PageView>
void move_pages(const ExecutionSpace& space, const PageMoves<BytesView, PageView>& op) {
    dispatch_detail::launch(
        space, "kvpool::move_pages", op,
        [&](auto native, auto stream) { native.move_pages(stream, op.raw()); },
        [&] { portable::move_pages(space, op); });
}

template <class ExecutionSpace, class TableView, class IndexView>
void apply_table_writes(const ExecutionSpace& space, const TableWrites<TableView, IndexView>& op) {
    dispatch_detail::launch(
        space, "kvpool::apply_table_writes", op,
        [&](auto native, auto stream) { native.apply_table_writes(stream, op.raw()); },
        [&] { portable::apply_table_writes(space, op); });
}

// Natively one launch for the moves and the writes; portably the moves, then the writes.
template <class ExecutionSpace, class Moves, class Writes>
void apply_plan(const ExecutionSpace& space, const CompactionPlan<Moves, Writes>& op) {
    dispatch_detail::launch(
        space, "kvpool::apply_plan", op,
        [&](auto native, auto stream) {
            native.apply_plan(stream, op.moves.raw(), op.writes.raw());
        },
        [&] {
            portable::move_pages(space, op.moves);
            portable::apply_table_writes(space, op.writes);
        });
}

// Natively for int64 and int32 output ids.
template <class ExecutionSpace, class TableView, class InView, class OutView>
void translate_tokens(const ExecutionSpace& space,
                      const Translation<TableView, InView, OutView>& op) {
    using out_type = typename Translation<TableView, InView, OutView>::out_type;
    constexpr bool native_out =
        std::is_same_v<out_type, index_t> || std::is_same_v<out_type, std::int32_t>;
    dispatch_detail::launch<native_out>(
        space, "kvpool::translate_tokens", op,
        [&](auto native, auto stream) { native.translate_tokens(stream, op.raw()); },
        [&] { portable::translate_tokens(space, op); });
}

template <class ExecutionSpace, class Pages, class OutView>
void bind_pages_emit_tokens(const ExecutionSpace& space, const AllocTokens<Pages, OutView>& op) {
    dispatch_detail::launch(
        space, "kvpool::bind_pages_emit_tokens", op,
        [&](auto native, auto stream) { native.bind_pages_emit_tokens(stream, op.raw()); },
        [&] { portable::bind_pages_emit_tokens(space, op); });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_extend_bind(const ExecutionSpace& space,
                       const AllocExtend<Pages, IndexView, LastLocView, OutView>& op) {
    dispatch_detail::launch(
        space, "kvpool::alloc_extend_bind", op,
        [&](auto native, auto stream) { native.alloc_extend_bind(stream, op.raw()); },
        [&] { portable::alloc_extend_bind(space, op); });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_decode_bind(const ExecutionSpace& space,
                       const AllocDecode<Pages, IndexView, LastLocView, OutView>& op) {
    dispatch_detail::launch(
        space, "kvpool::alloc_decode_bind", op,
        [&](auto native, auto stream) { native.alloc_decode_bind(stream, op.raw()); },
        [&] { portable::alloc_decode_bind(space, op); });
}

} // namespace kvpool::kernels
