"""Checks both engines run before serving anything, so a bad request fails up front with a clear message
instead of mid-run inside torch (an index out of range) or the scheduler (an empty free list)."""

from __future__ import annotations

from collections.abc import Iterable

from stage5 import inputs
from stage5.calibration import machine_memory_bytes
from stage5.engine.sequence import Request
from stage5.inputs import MAX_COUNT, InputError
from stage5.models import ModelConfig

GiB = 2**30
BYTES_PER_BLOCK_BOOKKEEPING = 64  # a free-list entry, a reference count and a Python int per block, generously


def unique_ids(requests: Iterable[Request]) -> None:
    """Request ids key the outputs and the per-request state; a repeated id would mix two requests."""
    seen: set[int] = set()
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"expected Request objects, got {type(r).__name__}")
        if r.id in seen:
            raise ValueError(f"request id {r.id} appears more than once; accepted: unique ids")
        seen.add(r.id)


def fits_model(request: Request, cfg: ModelConfig, what: str = "the model") -> None:
    """Token ids inside the vocabulary, and every position the request can reach inside the model's range.

    A request of ``max_len`` tokens feeds positions 0 .. max_len - 2 (its last token is sampled, never fed),
    so it needs ``max_len - 1`` positions.
    """
    bad = [t for t in request.prompt if not 0 <= t < cfg.vocab_size]
    if bad:
        raise ValueError(f"request {request.id}: token id {bad[0]} is outside {what}'s vocabulary "
                         f"(accepted: 0 .. {cfg.vocab_size - 1})")
    if request.max_len - 1 > cfg.max_position_embeddings:
        raise ValueError(f"request {request.id} may reach {request.max_len} tokens ({len(request.prompt)} prompt + "
                         f"{request.max_tokens} max_tokens), needing {request.max_len - 1} positions; {what}'s "
                         f"max_position_embeddings is {cfg.max_position_embeddings}")


def positive_ints(**values: object) -> None:
    """Engine sizes (blocks, block size, batch) are whole numbers in [1, 2**53]; ``True`` or 2.5 is refused."""
    import numbers

    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        if value > MAX_COUNT:
            raise InputError(f"{name} must be an integer >= 1 and at most 2**53, got {value!r}")


def _memory_note(nbytes: int, what: str) -> None:
    memory = machine_memory_bytes()
    if nbytes > memory:
        raise InputError(f"{what} would take {nbytes / GiB:,.1f} GiB but this machine has {memory / GiB:,.1f} GiB "
                         "of memory; accepted: a size that fits in memory")


def allocator_fits(num_blocks: int, block_size: int = 1, per_block: bool = True) -> None:
    """Blocks and block size are counts, and (``per_block``) the allocator's bookkeeping, an entry a block, fits."""
    positive_ints(num_blocks=num_blocks, block_size=block_size)
    if num_blocks * block_size > MAX_COUNT:
        raise InputError(f"num_blocks x block_size is {num_blocks * block_size:,} slots, past 2**53 (beyond that "
                         "a count is not exact); accepted: fewer or smaller blocks")
    if not per_block:
        return
    _memory_note(int(num_blocks) * BYTES_PER_BLOCK_BOOKKEEPING,
                 f"an allocator of {num_blocks:,} blocks ({BYTES_PER_BLOCK_BOOKKEEPING} bytes of bookkeeping each)")


def pool_fits(cfg: ModelConfig, num_slots: int, itemsize: int, blocks: tuple[int, int] | None = None) -> None:
    """The K/V pool (every layer's key and value for ``num_slots`` tokens) fits in this machine's memory.

    Checked before anything is allocated, so a typo'd size is refused with the size it would take instead of
    torch trying (and the machine swapping or the process being killed).
    """
    positive_ints(num_slots=num_slots, itemsize=itemsize)
    if itemsize > 8:
        raise InputError(f"itemsize must be the bytes of one K/V element, 1 to 8, got {itemsize!r}")
    per_slot = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * int(itemsize)  # Python ints: no overflow
    shape = f" ({blocks[0]:,} blocks of {blocks[1]:,})" if blocks else ""
    _memory_note(int(num_slots) * per_slot, f"a K/V pool of {num_slots:,} token slots{shape} at {per_slot:,} bytes "
                 f"a slot ({cfg.num_layers} layers x K and V x {cfg.num_kv_heads} heads x {cfg.head_dim} x "
                 f"{itemsize} bytes)")


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
