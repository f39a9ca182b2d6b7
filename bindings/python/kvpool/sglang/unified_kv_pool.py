"""UnifiedKVPool: one uint8 buffer shared by two sub-pools growing toward each other, or by
three, the middle one floating between them (the tri-pool's).

The bytes are kvpool's: allocated by the C API (zeroed) and exported as the
tensor ``_raw``, or, with ``buffer=``, an engine's own uint8 tensor adopted
as it is. Per-layer views follow the reference's page-major layout, so the
allocators move whole pages as single contiguous copies; they are built from
the C API's view descriptors (``kvpool.layout``), the layout's one derivation. An MLA sub-pool's
views are dense (``page_major.build_dense_mla_views``) and need a tail pad of
one page past the buffer, ``view_tail_pad_bytes``: allocated with the buffer,
outside the sub-pools' bytes.

Page sizes, as in the reference: ``page_size`` shapes the views only; an
allocator's page size is its own. kvpool's native layout (which the
allocators share) starts with the views' page size and is fixed when the
first allocator binds a sub-pool of the buffer, its KV sub-pools then taking
that allocator's page size (Mamba sub-pools keep 1). An allocator page of
``n * page_size`` tokens is ``n`` whole view pages, contiguous in the buffer,
so a page move carries every view token in it; an allocator page size that
is not a multiple of the views' is refused, and so is, once the layout is
fixed, one that differs from it. An MLA sub-pool's allocator page size is
the views' (its dense ids count view pages).

A sub-pool's MHA views may be laid out at a divisor of ``page_size``
(``mha_views_for(name, page_size)``; the SWA side's own page size, issue
#30): its allocator's page size must be a multiple of every view page size
handed out for it (before any, a multiple or a divisor of ``page_size``),
views are refused at a page size its fixed allocator page is not a multiple
of, and the KV sub-pools' page sizes need only divide the largest of them.
"""

from typing import Dict, List, Optional, Tuple

import torch

from .. import native
from .._tensors import pool_device
from ..errors import InvalidArgumentError
from ..layout import views_from_descriptors
from .page_major import build_dense_mla_views, build_page_major_mamba_views
from .specs import (
    MambaSubPoolSpec,
    MHASubPoolSpec,
    MLASubPoolSpec,
    SubPoolSpec,
    _require,
)

GB = 1024 * 1024 * 1024


class UnifiedKVPool:
    def __init__(
        self,
        *,
        total_bytes: int,
        sub_pool_specs: List[SubPoolSpec],
        device: str,
        enable_memory_saver: bool = False,
        page_size: int = 1,
        view_tail_pad_bytes: int = 0,
        buffer: torch.Tensor = None,
    ):
        _require(page_size >= 1, f"page_size must be >= 1; got {page_size}")
        _require(
            view_tail_pad_bytes >= 0,
            f"view_tail_pad_bytes must be >= 0; got {view_tail_pad_bytes}",
        )
        names = [s.name for s in sub_pool_specs]
        _require(
            len(sub_pool_specs) >= 2 and len(set(names)) == len(names),
            f"UnifiedKVPool needs two or more sub-pools with distinct names; got {names}",
        )
        # More sub-pools are listed from the low end up (up, floating..., down); kvpool's
        # layout checks that order and each float_at, naming the sub-pool.
        if len(sub_pool_specs) == 2:
            directions = sorted(s.grow_direction for s in sub_pool_specs)
            _require(
                directions == ["down", "up"],
                f"UnifiedKVPool needs one grow-up and one grow-down sub-pool; got {directions}",
            )
        self.total_bytes = int(total_bytes)
        self.view_tail_pad_bytes = int(view_tail_pad_bytes)
        self.sub_pool_specs = sub_pool_specs
        self.enable_memory_saver = enable_memory_saver
        self._page_size = page_size
        self._specs_by_name: Dict[str, SubPoolSpec] = {s.name: s for s in sub_pool_specs}
        # Mamba state is per request: its side always has page size 1.
        self._side_page_size = {
            s.name: 1 if isinstance(s, MambaSubPoolSpec) else page_size for s in sub_pool_specs
        }
        # The tail pad is allocated with the buffer but belongs to no sub-pool: kvpool's
        # layout sees total_bytes, the views see the pad too.
        allocation = self.total_bytes + self.view_tail_pad_bytes
        if buffer is not None:
            _require(
                isinstance(buffer, torch.Tensor) and buffer.numel() >= allocation,
                f"buffer must hold total_bytes + view_tail_pad_bytes = {allocation} bytes",
            )
        elif self.view_tail_pad_bytes:
            buffer = torch.zeros(allocation, dtype=torch.uint8, device=pool_device(device))
        self._native = native.UnifiedKVPool(
            self.total_bytes,
            [
                (
                    s.name,
                    s.entry_bytes(),
                    self._side_page_size[s.name],
                    s.grow_direction,
                    s.float_at,
                )
                for s in sub_pool_specs
            ],
            device,
            buffer,
        )
        self.device = self._native.device
        self._raw = buffer[:allocation] if self.view_tail_pad_bytes else self._native.bytes
        self._layout_fixed = False

        self._max_slots = {}
        # Views by (sub-pool, view page size); the page sizes handed out per sub-pool,
        # which its allocator's page size must be a multiple of.
        self._mha_views: Dict[Tuple[str, int], Tuple[List[torch.Tensor], List[torch.Tensor]]] = {}
        self._view_page_sizes: Dict[str, set] = {s.name: set() for s in sub_pool_specs}
        self._mla_views: Dict[str, List[torch.Tensor]] = {}
        self._mamba_views: Dict[str, Tuple[List[torch.Tensor], torch.Tensor]] = {}
        for spec in sub_pool_specs:
            entry = spec.entry_bytes()
            self._max_slots[spec.name] = self.total_bytes // entry
            if isinstance(spec, MHASubPoolSpec):
                self._mha_views[spec.name, page_size] = self._build_mha_views(spec, page_size)
            elif isinstance(spec, MLASubPoolSpec):
                self._mla_views[spec.name] = build_dense_mla_views(
                    self._raw,
                    layer_num=spec.layer_num,
                    kv_cache_dim=spec.kv_cache_dim,
                    store_dtype=spec.store_dtype,
                    page_size=page_size,
                    num_pages=self._max_slots[spec.name] // page_size,
                )
            elif isinstance(spec, MambaSubPoolSpec):
                self._mamba_views[spec.name] = self._build_mamba_views(spec)
            else:
                raise InvalidArgumentError(f"unsupported sub-pool spec type {type(spec).__name__}")

    # -- introspection --
    def spec(self, name: str) -> SubPoolSpec:
        return self._specs_by_name[name]

    def _spec_of_type(self, name: str, spec_type):
        s = self._specs_by_name[name]
        _require(
            isinstance(s, spec_type),
            f"sub-pool {name!r} is {type(s).__name__}, expected {spec_type.__name__}",
        )
        return s

    def mha_spec(self, name: str) -> MHASubPoolSpec:
        return self._spec_of_type(name, MHASubPoolSpec)

    def mla_spec(self, name: str) -> MLASubPoolSpec:
        return self._spec_of_type(name, MLASubPoolSpec)

    def mamba_spec(self, name: str) -> MambaSubPoolSpec:
        return self._spec_of_type(name, MambaSubPoolSpec)

    def max_slots(self, name: str) -> int:
        return self._max_slots[name]

    def min_slot_index(self, name: str, native_buffer=None) -> int:
        """The sub-pool's first slot past kvpool's padding sink, which covers page 0 of every
        sub-pool (slot 0's rows spread over its page): it follows the page sizes of the layout
        (native_buffer's, an allocator's before it is fixed; else the pool's)."""
        entry = self._specs_by_name[name].entry_bytes()
        sink = (native_buffer or self._native).sink_bytes
        return (sink + entry - 1) // entry

    def anchor_bytes(self, name: str) -> int:
        """Where the sub-pool's pages are counted from: byte 0 for every sub-pool."""
        _require(name in self._specs_by_name, f"no sub-pool named {name!r}")
        return 0

    def mha_views_for(
        self, name: str, page_size: Optional[int] = None
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Per layer, K and V views ``(num_pages, page_size, head_num, head_dim)``; page_size
        (None: the pool's) must divide the pool's and, once an allocator fixed the layout, the
        sub-pool's allocator page size, else ValueError. Its allocator's page size must then be
        a multiple of it."""
        spec = self.mha_spec(name)
        ps = self._page_size if page_size is None else page_size
        if ps < 1 or self._page_size % ps != 0:
            raise ValueError(
                f"sub-pool {name!r}: a view page size of {ps} does not divide the "
                f"UnifiedKVPool's page_size {self._page_size}"
            )
        if self._layout_fixed and self._side_page_size[name] % ps != 0:
            raise ValueError(
                f"sub-pool {name!r}: its allocator's page size {self._side_page_size[name]} "
                f"is not a multiple of the view page size {ps}"
            )
        if (name, ps) not in self._mha_views:
            self._mha_views[name, ps] = self._build_mha_views(spec, ps)
        self._view_page_sizes[name].add(ps)
        return self._mha_views[name, ps]

    def mla_views_for(self, name: str) -> List[torch.Tensor]:
        """Per layer, the dense view ``(num_pages * layer_num * page_size, 1, kv_cache_dim)``
        (see page_major.build_dense_mla_views), indexed by dense ids."""
        return self._mla_views[name]

    def mamba_views_for(self, name: str) -> Tuple[List[torch.Tensor], torch.Tensor]:
        """Per conv tensor a view ``(layers, max_slots, *shape)``, and the temporal view."""
        return self._mamba_views[name]

    def side_page_size(self, name: str) -> int:
        """The page size kvpool's allocators of this sub-pool use (until the first allocator
        binds, the views'; see the module's docstring)."""
        return self._side_page_size[name]

    # -- the native layout the allocators bind --
    def _native_for(self, page_sizes: Dict[str, int]):
        """The native buffer for allocators of these sub-pools ({name: page size}); nothing
        changes here until _fix_layout. Raises, naming the sub-pool, where a page size does
        not fit the views or the layout fixed already."""
        kv_page_sizes = set()
        for name, ps in page_sizes.items():
            _require(name in self._specs_by_name, f"no sub-pool named {name!r}")
            if isinstance(self._specs_by_name[name], MambaSubPoolSpec):
                if ps != 1:
                    raise InvalidArgumentError(
                        f"sub-pool {name!r} holds Mamba state, one slot per request: its page "
                        f"size is 1, the allocator asks for {ps}"
                    )
                continue
            view_sizes = self._view_page_sizes[name]
            if view_sizes and (ps < 1 or any(ps % v != 0 for v in view_sizes)):
                raise InvalidArgumentError(
                    f"sub-pool {name!r}: the allocator's page size {ps} is not a multiple of "
                    f"the page size of its views, {max(view_sizes)}"
                )
            # A divisor of the pool's page size too: views are then asked for at a divisor
            # of that page (mha_views_for checks it against the fixed layout).
            if ps < 1 or (ps % self._page_size != 0 and self._page_size % ps != 0):
                raise InvalidArgumentError(
                    f"sub-pool {name!r}: the allocator's page size {ps} is not a multiple "
                    f"(nor a divisor) of the UnifiedKVPool's page_size {self._page_size}, which "
                    f"shapes its views"
                )
            if isinstance(self._specs_by_name[name], MLASubPoolSpec) and ps != self._page_size:
                raise InvalidArgumentError(
                    f"sub-pool {name!r} holds MLA, whose dense views count the UnifiedKVPool's "
                    f"pages: its allocator's page size must be page_size {self._page_size}, "
                    f"not {ps}"
                )
            if self._layout_fixed and ps != self._side_page_size[name]:
                raise InvalidArgumentError(
                    f"sub-pool {name!r} has page size {self._side_page_size[name]} in its "
                    f"UnifiedKVPool, fixed when the first allocator bound it; the allocator "
                    f"asks for {ps}"
                )
            kv_page_sizes.add(ps)
        largest = max(kv_page_sizes, default=0)
        if any(largest % ps != 0 for ps in kv_page_sizes):
            raise InvalidArgumentError(
                f"the KV sub-pools' page sizes must divide the largest of them; got {page_sizes}"
            )
        if self._layout_fixed or not kv_page_sizes:
            return self._native
        # Sub-pools the allocators do not name take the largest page size.
        wanted = {n: page_sizes.get(n, largest) for n in self._kv_names()}
        if all(self._side_page_size[n] == ps for n, ps in wanted.items()):
            return self._native
        return native.UnifiedKVPool(
            self.total_bytes,
            [
                (
                    s.name,
                    s.entry_bytes(),
                    1 if isinstance(s, MambaSubPoolSpec) else wanted[s.name],
                    s.grow_direction,
                    s.float_at,
                )
                for s in self.sub_pool_specs
            ],
            self.device,
            self._raw,
        )

    def _fix_layout(self, native_buffer) -> None:
        """An allocator bound native_buffer (what _native_for returned): the layout is fixed.
        A rebuilt layout adopts the same bytes; ``_raw`` keeps the first one's alive."""
        if native_buffer is not self._native:
            self._native = native_buffer
            for name in self._kv_names():
                self._side_page_size[name] = native_buffer.page_sizes[name]
        self._layout_fixed = True

    def _kv_names(self):
        return [s.name for s in self.sub_pool_specs if not isinstance(s, MambaSubPoolSpec)]

    # -- views: built from kvpool.layout's descriptors, the layout's one derivation (C's) --
    def _build_mha_views(self, spec: MHASubPoolSpec, ps: int):
        descriptors = spec.view_descriptors(ps, self._max_slots[spec.name] // ps)
        views = views_from_descriptors(self._raw, descriptors, spec.store_dtype)
        return views[0::2], views[1::2]

    def _build_mamba_views(self, spec: MambaSubPoolSpec):
        return build_page_major_mamba_views(
            self._raw,
            layer_num=spec.layer_num,
            conv_state_shapes=spec.conv_state_shapes,
            conv_dtype=spec.conv_dtype,
            temporal_state_shape=spec.temporal_state_shape,
            temporal_dtype=spec.temporal_dtype,
            max_slots=self._max_slots[spec.name],
        )
