"""The disaggregation (PD) transfer surface over kvpool's move gate.

SGLang's PD scheduler installs a *move gate*, a predicate that is True only when no KV
transfer can be in flight (``set_disagg_move_gate``), and hands the transfer engine physical
token ids (``translate_kv_indices_for_transfer``), whose pages it then reads (prefill) or
writes (decode) by address. kvpool gates exactly those pages: each translation for a
transfer puts the pages it names (and, on the Mamba pair, the live state slots, whose
envelopes travel with the request) under kvpool's move gate, completed by the engine's
predicate. Until the predicate next reports no transfer in flight, compaction neither moves
nor overwrites them (a flush packs the other pages around them; freed, they are not reused),
so the addresses the peer holds stay valid; the rest of the pool keeps compacting.
"""

from ..errors import KVPoolAssertionError


class TransferDone:
    """Completion of the transfers published by one translation, for kvpool's move gate.

    Done at the first query after the translation at which the engine's gate reports no
    transfer in flight. Not before the translation has returned: the scheduler records the
    transfer (closing its gate) only after it has the addresses, and a gate seen open then
    would let kvpool drop the pages' protection at once.
    """

    __slots__ = ("_gate", "_armed")

    def __init__(self, gate):
        self._gate = gate
        self._armed = False

    def arm(self):
        self._armed = True

    def query(self):
        return self._armed and bool(self._gate())


def check_gate(gate, lazy_compaction):
    """What set_disagg_move_gate accepts, as the reference asserts it."""
    if gate is not None and not callable(gate):
        raise KVPoolAssertionError(
            f"set_disagg_move_gate: the gate must be a callable returning bool, got "
            f"{type(gate).__name__}"
        )
    if not lazy_compaction:
        raise KVPoolAssertionError(
            "PD disaggregation with the unified memory pool requires lazy compaction (an eager "
            "free compacts at once, under the pages in flight)"
        )


def gated_translation(gate, gate_pages, translate, kv_indices):
    """translate(kv_indices) for a transfer; with a gate installed, gate_pages(marker) first
    puts the pages under kvpool's move gate until the gate next opens."""
    if gate is None:
        return translate(kv_indices)
    done = TransferDone(gate)
    gate_pages(done)
    done.arm()
    return translate(kv_indices)
