"""Regenerate the ex02 (toy serving loop) fixture submissions from the committed release and the solution.

Run ``.venv/bin/python tests/submissions/make_fixtures_ex02.py`` after changing ``solutions/ex02`` (and
regenerating its release). Each wrong build carries one misconception from the exercise; ``EXPECTED`` in
tests/test_grading_ex02.py lists the score each earns and the words its feedback must contain.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from make_fixtures_ex03 import _gid, _src, fill, solved

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ex02_mutants import _ATTEND_LOOP as ATTEND_LOOP  # noqa: E402 - the mutation test's own texts
from ex02_mutants import _FLATTENED as FLATTENED  # noqa: E402
from ex02_mutants import _GROW_LOOP as GROW_LOOP  # noqa: E402
from learner_slips import SLIPS  # noqa: E402 - the structural slips (tests/learner_slips.py)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

WRITTEN = ("Paging gave most of the gain: the contiguous cache fits three requests in the pool because it holds "
           "room for the whole cap, the paged one fits sixteen.")


def answer_source(good, gid, *replacements):
    """The solution's answer cell ``gid`` with text replaced (each pair must match exactly once)."""
    src = next(_src(c) for c in good["cells"] if _gid(c) == gid)
    for old, new in replacements:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


def ex02():
    good = solved("ex02", {"p4_written": WRITTEN})
    blank = json.loads((REPO / "exercises" / "ex02" / "ex02.ipynb").read_text())
    leaked = answer_source(good, "paged_answer", (
        "        for block in seq.block_table:\n            self.blocks.free(block)\n", ""))
    off_by_one = answer_source(good, "paged_answer", (
        "return -(-num_tokens // self.block_size)", "return num_tokens // self.block_size + 1"))
    reserve_max = answer_source(good, "paged_answer", (
        "range(self.blocks_for(len(seq.tokens)))]", "range(self.blocks_for(seq.request.max_len))]"))
    waits = answer_source(good, "serve_answer", ("        if continuous or not running:\n",
                                                 "        if not running:  # admit a new batch\n"))
    delegates = ("from stage5.engine.kv import PagedAllocator\n\n\n"
                 "class PagedCache(PagedAllocator):\n"
                 "    \"\"\"The course's own allocator, renamed.\"\"\"\n")
    def variant(gid, *replacements):
        return {gid: answer_source(good, gid, *replacements)}

    def slip(name):
        found = next(s for s in SLIPS if s.name == name)
        return variant(found.cell, *found.edits)

    # the scheduling slips a held-out set of learners made, each alone; the hidden runs must name every one
    wrong_schedules = {
        "preempt_oldest": variant("serve_answer", ("victim = running.pop()  # the newest",
                                                   "victim = running.pop(0)  # the oldest")),
        "victim_at_back": variant("serve_answer", ("waiting.appendleft(victim)", "waiting.append(victim)")),
        "restart_from_scratch": variant("serve_answer", (
            "victim.num_cached = 0\n",
            "victim.num_cached = 0\n                victim.tokens = list(victim.request.prompt)  # start over\n")),
        "grow_while_free": variant("paged_answer", (
            "return self.blocks_for(len(seq.tokens)) <= len(seq.block_table) or self.blocks.num_free > 0",
            "return self.blocks.num_free > 0")),
        "admit_one_per_step": variant("serve_answer", (
            "                running.append(seq)\n                admitted = True\n",
            "                running.append(seq)\n                admitted = True\n                break  # one a step\n")),
        "meter_before_forward": variant("serve_answer", (
            "        next_tokens = forward_step(model, pool, batch, cache)\n        meter.step(batch, cache, admitted)\n",
            "        meter.step(batch, cache, admitted)\n        next_tokens = forward_step(model, pool, batch, cache)\n")),
        "memory_8x": variant("paged_answer", ("self.blocks = BlockAllocator(num_blocks)",
                                              "self.blocks = BlockAllocator(8 * num_blocks)  # plenty"),
                             ("self.num_slots = num_blocks * block_size", "self.num_slots = 8 * num_blocks * block_size")),
        # attention through the block table without the causal mask, or with the wrong query-to-KV head mapping
        "attention_not_causal": variant("paged_kv_answer", (
            'weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)', "weights = scores.softmax(dim=-1)")),
        "attention_head_mapping": variant("paged_kv_answer", (
            "keys = store[0, context].repeat_interleave(group, dim=1)", "keys = store[0, context].repeat(1, group, 1)"),
            ("values = store[1, context].repeat_interleave(group, dim=1)", "values = store[1, context].repeat(1, group, 1)")),
        # the attention slips named one by one: the mask off by one, dividing by head_dim, float32, one attention
        # over the whole step
        "attention_mask_off_by_one": variant("paged_kv_answer", (
            "<= first + torch.arange(n)[:, None]", "< first + torch.arange(n)[:, None]")),
        "attention_head_dim": variant("paged_kv_answer", ("/ q.shape[-1] ** 0.5", "/ q.shape[-1]")),
        "attention_float32": variant("paged_kv_answer", (
            "weights, values))", "weights.float(), values.float()).to(q.dtype))")),
        "attention_across_sequences": variant("paged_kv_answer", (ATTEND_LOOP.rstrip(), FLATTENED.rstrip())),
        # a loop that grows without asking can_grow: its own "no free block" exception, with the step and the rule
        "grows_without_room": variant("serve_answer", (GROW_LOOP, "        for seq in running:\n            cache.grow(seq)\n")),
        # the measurement cell stops with an error; the 2 x 2 built with blocks of 16 (same slots)
        "measure_crash": variant("measure_answer", ("serve(model, WORKLOAD, cache,", "serve(model, WORKLOAD, cache, block_size=BLOCK_SIZE,")),
        "block_size_16": variant("measure_answer", ("else PagedCache(NUM_BLOCKS, BLOCK_SIZE))",
                                                    "else PagedCache(NUM_BLOCKS * BLOCK_SIZE // 16, 16))")),
        # a loop that removes finished sequences from the list it iterates over skips the next one
        "mutates_while_iterating": variant("serve_answer", (
            "        for seq, token in zip(batch, next_tokens, strict=True):",
            "        for seq, token in zip(running, next_tokens):")),
        # the same slip in the static loop of Part 1
        "static_mutates_while_iterating": variant("static_answer", (
            "        for seq, token in zip(batch, next_tokens, strict=True):",
            "        for seq, token in zip(running, next_tokens):")),
        # builds an instructor found at full marks: a victim of this step left waiting although it fits again,
        # the "newest" read as the highest id, and slots() that maps a run of positions to 0, 1, 2, ...
        "readmit_next_step": slip("no_admission_after_preemption"),
        "victim_highest_id": slip("victim_highest_id"),
        "slots_from_zero": slip("slots_prefill_from_zero"),
    }
    # correct builds by another route: full marks
    right_alternatives = {
        "counter_refcount": variant("allocator_answer", ("self.ref_count = [0] * num_blocks", "self.ref_count = Counter()"),
                                    ("class BlockAllocator:", "from collections import Counter\n\n\nclass BlockAllocator:")),
        "slots_list": variant("paged_answer", (
            "        table = torch.tensor(seq.block_table, dtype=torch.long)\n"
            "        return table[positions // self.block_size] * self.block_size + positions % self.block_size\n",
            "        return [seq.block_table[p // self.block_size] * self.block_size + p % self.block_size\n"
            "                for p in positions.tolist()]\n")),
    }
    return {
        **{name: fill(good, **cells) for name, cells in {**wrong_schedules, **right_alternatives}.items()},
        "solved": good,
        "blank": blank,
        "leaked_block": fill(good, paged_answer=leaked),
        "off_by_one": fill(good, paged_answer=off_by_one),
        "reserves_max": fill(good, paged_answer=reserve_max),
        "waits_for_batch": fill(good, serve_answer=waits),
        "delegates": fill(good, paged_answer=delegates),
    }


def build():
    out = HERE / "ex02"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.ipynb"):
        old.unlink()
    for name, nb in ex02().items():
        (out / f"{name}_ex02.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build()
    print("\n".join(sorted(str(p.relative_to(HERE)) for p in (HERE / "ex02").glob("*.ipynb"))))
