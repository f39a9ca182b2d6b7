"""One tensor-parallel rank of test_tp_ranks.py, in a process of its own: it builds an
SGLang-compatible allocator as SGLang's engine does (keyword arguments, defaults), drives
it with the call sequence its seed gives, and sends its state digest to the parent after
every step. Every rank draws the same sequence from the same seed; one told to deviate
makes one call more (an allocation) at a given step and stops there."""

import random
import traceback

import torch

MODELS = ("swa", "mamba")


def _specs(model):
    from kvpool.sglang import MambaSubPoolSpec, MHASubPoolSpec

    def mha(name, layers, grow):
        return MHASubPoolSpec(
            name=name,
            layer_num=layers,
            grow_direction=grow,
            head_num=2,
            head_dim=4,
            store_dtype=torch.bfloat16,
        )

    if model not in MODELS:
        raise ValueError(f"no model {model!r}: one of {MODELS}")
    if model == "swa":
        return [mha("full", 2, "up"), mha("swa", 3, "down")]
    mamba = MambaSubPoolSpec(
        name="mamba",
        layer_num=2,
        grow_direction="up",
        conv_state_shapes=((4, 3),),
        conv_dtype=torch.bfloat16,
        temporal_state_shape=(2, 4, 4),
        temporal_dtype=torch.float32,
    )
    return [mha("full", 2, "down"), mamba]


def build(model, device, page_size, lazy, total_bytes):
    """The pool, its KV cache and the allocator, made as SGLang's model runner makes them:
    the pool without a page size (the allocator fixes it), kvpool's page-major KV pools as
    the kvcache, the allocator's other keywords left at their defaults."""
    from kvpool.sglang import (
        UnifiedHybridLinearKVPool,
        UnifiedKVPool,
        UnifiedMambaPool,
        UnifiedMambaTokenToKVPoolAllocator,
        UnifiedMHATokenToKVPool,
        UnifiedSWAKVPool,
        UnifiedSWATokenToKVPoolAllocator,
    )

    pool = UnifiedKVPool(total_bytes=total_bytes, sub_pool_specs=_specs(model), device=device)
    if model == "swa":
        kvcache = UnifiedSWAKVPool(
            unified_buffer=pool,
            swa_attention_layer_ids=[1, 2, 3],
            full_attention_layer_ids=[0, 4],
            page_size=page_size,
        )
        return UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=kvcache,
            device=device,
            full_max_total_num_tokens=pool.max_slots("full") - 1,
            swa_max_total_num_tokens=pool.max_slots("swa") - 1,
            page_size=page_size,
            lazy_compaction=lazy,
        )
    kvcache = UnifiedHybridLinearKVPool(
        full_kv_pool=UnifiedMHATokenToKVPool(
            unified_buffer=pool, sub_pool_name="full", page_size=page_size
        ),
        mamba_pool=UnifiedMambaPool(unified_buffer=pool, sub_pool_name="mamba"),
    )
    return UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kvcache,
        device=device,
        page_size=page_size,
        lazy_compaction=lazy,
    )


class Event:
    """A forward-done marker completed by hand, at the same step on every rank. A GPU
    backend that must move a page the forward writes waits for it as for a real forward,
    which ends on its own: the marker completes itself when polled long enough."""

    MAX_POLLS = 1000

    def __init__(self):
        self.done = False
        self.polls = 0

    def query(self):
        self.polls += 1
        if self.polls > self.MAX_POLLS:
            self.done = True
        return self.done


class Run:
    """One rank's run: the model, its configuration and its calls, all from the seed."""

    def __init__(self, model, device, seed):
        self.rng = random.Random(f"{model}:{seed}")
        self.model, self.device = model, device
        self.ps = self.rng.choice([1, 2, 4])
        self.lazy = self.rng.random() < 0.5
        # Small enough that allocations fall short now and then.
        total = ((40 if model == "swa" else 12) << 10) + self.rng.randrange(4096)
        self.alloc = build(model, device, self.ps, self.lazy, total)
        self.requests = []  # [tokens, tokens still in the window]
        self.slots = []
        self.forwards = []
        self.window = None  # (state, requests, slots) at backup_state
        self.stats = {"ok": 0, "short": 0}
        self.short = False  # the last allocation found no room

    def ids(self, values):
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def pick(self, items, most):
        return self.rng.sample(range(len(items)), min(len(items), most))

    def step(self):
        r = self.rng.random()
        # Short of room, the engine mostly finishes requests first.
        if self.short and self.window is None and r < 0.6:
            return self.free()
        if r < 0.3:
            return self.extend()
        if r < 0.5:
            return self.decode()
        if r < 0.62 and self.window is None:
            return self.free()
        if r < 0.68 and self.window is None:
            return self.free_swa() if self.model == "swa" else self.state_slots()
        if r < 0.78:
            return self.alloc.flush_opportunistic()
        if r < 0.9:
            return self.forward()
        return self.backup_window()

    def counted(self, out):
        self.short = out is None
        self.stats["short" if self.short else "ok"] += 1
        return out

    def extend(self):
        running = self.pick(self.requests, self.rng.randint(0, 2))
        new = self.rng.randint(0 if running else 1, 2)
        prefix = [len(self.requests[i][0]) for i in running] + [0] * new
        seq = [p + self.rng.randint(1, 2 * self.ps + 3) for p in prefix[: len(running)]]
        seq += [self.rng.randint(1, 4 * self.ps + 5) for _ in range(new)]
        last = [self.requests[i][0][-1] for i in running] + [-1] * new
        n = sum(seq) - sum(prefix)
        out = self.counted(
            self.alloc.alloc_extend(
                self.ids(prefix), torch.tensor(prefix), self.ids(seq), torch.tensor(seq),
                self.ids(last), n,
            )
        )
        if out is None:
            return
        out, at = out.tolist(), 0
        for b, (p, s) in enumerate(zip(prefix, seq)):
            got = out[at : at + s - p]
            at += s - p
            if b < len(running):
                req = self.requests[running[b]]
                req[0] += got
                req[1] += got
            else:
                self.requests.append([got, list(got)])

    def decode(self):
        chosen = self.pick(self.requests, self.rng.randint(1, 6))
        if not chosen:
            return self.extend()
        seq = [len(self.requests[i][0]) + 1 for i in chosen]
        last = [self.requests[i][0][-1] for i in chosen]
        out = self.counted(
            self.alloc.alloc_decode(self.ids(seq), torch.tensor(seq), self.ids(last))
        )
        if out is not None:
            for i, t in zip(chosen, out.tolist()):
                self.requests[i][0].append(t)
                self.requests[i][1].append(t)

    def free(self):
        self.short = False
        chosen = sorted(self.pick(self.requests, self.rng.randint(1, 3)), reverse=True)
        group = self.rng.random() < 0.25
        if group:
            self.alloc.free_group_begin()
        for i in chosen:
            self.alloc.free(torch.tensor(self.requests.pop(i)[0]))
        if group:
            self.alloc.free_group_end()

    def free_swa(self):
        """A request's oldest whole page leaves the window (never its last page)."""
        for i in self.pick(self.requests, 1):
            window = self.requests[i][1]
            if len(window) > self.ps:
                self.alloc.free_swa(torch.tensor(window[: self.ps]))
                del window[: self.ps]

    def state_slots(self):
        if self.slots and self.rng.random() < 0.45:
            freed = [self.slots.pop(i) for i in sorted(self.pick(self.slots, 2), reverse=True)]
            self.alloc.mamba_allocator.free(torch.tensor(freed))
            return
        out = self.counted(self.alloc.mamba_allocator.alloc(self.rng.randint(1, 2)))
        if out is not None:
            self.slots += out.tolist()

    def forward(self):
        if self.forwards and self.rng.random() < 0.5:
            self.forwards.pop(0).done = True
            return self.alloc.flush_opportunistic()
        event = Event()
        writes = [self.requests[i][0][-1] for i in self.pick(self.requests, 4)]
        self.alloc.set_latest_forward_done_event(event)
        self.alloc.set_inflight_forward(event, self.ids(writes))
        self.forwards.append(event)

    def backup_window(self):
        if self.window is None:
            state = self.alloc.backup_state()
            self.window = (state, [[list(a), list(b)] for a, b in self.requests], list(self.slots))
        elif self.rng.random() < 0.5:
            state, self.requests, self.slots = self.window
            self.alloc.restore_state(state)
            self.window = None
        else:
            self.alloc.commit_state(self.window[0])
            self.window = None

    def deviate(self):
        """The one different call: an allocation the other ranks do not make. False when
        there is no room for it now."""
        if self.alloc.available_size() < self.ps:
            return False
        assert self.alloc.alloc(self.ps) is not None
        return True


def serve(conn):
    """The rank's loop: ("run", model, device, seed, steps, deviate_at) runs one sequence,
    sending ("step", i, digest, deviated) after each step and ("end", stats) at its end;
    None ends the process. A failure is sent as ("error", traceback)."""
    while True:
        job = conn.recv()
        if job is None:
            return
        _, model, device, seed, steps, deviate_at = job
        try:
            run = Run(model, device, seed)
            for i in range(steps):
                run.step()
                deviated = deviate_at is not None and i >= deviate_at and run.deviate()
                conn.send(("step", i, run.alloc.state_digest(), deviated))
                if deviated:
                    break
            if run.window is not None:
                run.alloc.commit_state(run.window[0])
            run.alloc.check_invariants()
            conn.send(("end", run.stats))
        except Exception:
            conn.send(("error", traceback.format_exc()))
