"""Structural learner slips for exercises 2 and 3, written from the released exercise text alone.

The mutation tests (tests/ex02_mutants.py, tests/test_*_mutants.py) change the reference answer one line at a time.
Learners slip differently: they reverse a policy, skip a step when another event happened in the same step, or put
an index off by one in one branch of a function that has two. Each slip below is such a build, written as a
replacement in the reference solution's answer cell, and named by the sentence of the exercise text it breaks.

They were written from `exercises/ex02/ex02.ipynb`, `exercises/ex03/ex03.ipynb` and the reference answers in
`solutions/`, before the hidden checks in `stage5/grading/` were read (see /work/notes/issue-41.md for how), so the
list is not shaped by what the grader happens to test. tests/test_learner_slips.py grades every one and fails when a
slip gets full marks, unless it is listed in EQUIVALENT with the reason it cannot change what is graded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slip:
    exercise: str  # "ex02" or "ex03"
    cell: str  # the grade_id of the answer cell it changes
    name: str
    rule: str  # the exercise text's rule it breaks, in the text's words
    edits: tuple[tuple[str, str], ...]  # (old, new) replacements; each old occurs exactly once in the cell

    def apply(self, source: str) -> str:
        for old, new in self.edits:
            found = source.count(old)
            if found != 1:
                raise ValueError(f"slip {self.name}: {old!r} occurs {found} times in cell {self.cell}, not once")
            source = source.replace(old, new)
        return source


def _slip(exercise: str, cell: str, name: str, rule: str, *edits: tuple[str, str]) -> Slip:
    return Slip(exercise, cell, name, rule, tuple(edits))


# ---- exercise 2: the scheduler (serve) ----------------------------------------------------------------------------

_ROOM_START = "    while waiting or running:\n        for seq in list(running):\n"
_ADMIT = ("        admitted = False\n"
          "        if continuous or not running:\n"
          "            while waiting and len(running) < max_batch and cache.can_admit(waiting[0], len(running)):\n"
          "                seq = waiting.popleft()\n"
          "                cache.admit(seq)\n"
          "                running.append(seq)\n"
          "                admitted = True\n")
_RETIRE = ("            seq.tokens.append(token)\n"
           "            if seq.finished:\n"
           "                running.remove(seq)\n"
           "                cache.release(seq)\n"
           "                meter.finished(seq)\n")

SERVE = [
    _slip("ex02", "serve_answer", "preempt_oldest", "when one cannot grow, the newest running sequence is preempted",
          ("victim = running.pop()  # the newest", "victim = running.pop(0)  # the oldest")),
    _slip("ex02", "serve_answer", "preempt_newest_other",
          "the newest running sequence is preempted ... or until it was itself the victim",
          ("victim = running.pop()  # the newest",
           "victim = running.pop(-2) if len(running) > 1 and running[-1] is seq else running.pop()")),
    _slip("ex02", "serve_answer", "victims_newest_first",
          "each victim goes to the front of the queue as it is preempted, so the oldest of them ends up first",
          (_ROOM_START, "    while waiting or running:\n        victims = []\n        for seq in list(running):\n"),
          ("                waiting.appendleft(victim)\n", "                victims.append(victim)\n"),
          ("        admitted = False\n", "        waiting.extendleft(reversed(victims))  # in the order preempted\n"
                                       "        admitted = False\n")),
    _slip("ex02", "serve_answer", "victim_to_back", "a preempted sequence goes to the front of the waiting queue",
          ("waiting.appendleft(victim)", "waiting.append(victim)")),
    _slip("ex02", "serve_answer", "no_admission_after_preemption",
          "a sequence preempted in this very step is admitted again like any other head of the queue if it fits",
          (_ROOM_START, "    while waiting or running:\n        preempted_now = False\n        for seq in list(running):\n"),
          ("                meter.preempted()\n", "                meter.preempted()\n                preempted_now = True\n"),
          ("        if continuous or not running:\n", "        if (continuous or not running) and not preempted_now:\n")),
    _slip("ex02", "serve_answer", "readmitted_to_old_place",
          "a step runs every running sequence in the order they were admitted",
          ("                running.append(seq)\n",
           "                running.append(seq)\n                running.sort(key=lambda s: s.id)  # its old place\n")),
    _slip("ex02", "serve_answer", "readmitted_at_old_index",
          "a step runs every running sequence in the order they were admitted",
          ("                victim = running.pop()  # the newest\n",
           "                victim = running.pop()  # the newest\n                victim.old_index = len(running)\n"),
          ("                running.append(seq)\n",
           "                running.insert(min(getattr(seq, 'old_index', len(running)), len(running)), seq)\n")),
    _slip("ex02", "serve_answer", "meter_swap_as_decode",
          "meter.step(batch, cache, admitted), with whether this step admitted anyone",
          (_ROOM_START, "    while waiting or running:\n        before = len(running)\n        for seq in list(running):\n"),
          ("meter.step(batch, cache, admitted)", "meter.step(batch, cache, len(batch) > before)")),
    _slip("ex02", "serve_answer", "meter_fresh_admissions_only",
          "meter.step(batch, cache, admitted), with whether this step admitted anyone",
          ("                admitted = True\n",
           "                admitted = admitted or len(seq.tokens) == len(seq.request.prompt)\n")),
    _slip("ex02", "serve_answer", "no_stop_at_self_victim",
          "preempted again and again until it can (or until it was itself the victim)",
          ("                if victim is seq:\n                    break\n", "")),
    _slip("ex02", "serve_answer", "room_newest_first", "every running sequence, oldest first, gets room",
          ("        for seq in list(running):\n            if seq not in running:",
           "        for seq in list(reversed(running)):\n            if seq not in running:")),
    _slip("ex02", "serve_answer", "grow_preempted_sequence",
          "a preempted sequence gives its memory back (it is no longer running, so it gets no room)",
          ("            if seq not in running:\n                continue  # preempted to make room for an older sequence\n",
           "")),
    _slip("ex02", "serve_answer", "preempted_keeps_cache_count",
          "a preempted sequence has num_cached = 0 (its whole history is recomputed by one prefill)",
          ("                victim.num_cached = 0\n", "")),
    _slip("ex02", "serve_answer", "preemptions_counted_per_step",
          "a preempted sequence is counted once with meter.preempted()",
          (_ROOM_START, "    while waiting or running:\n        preempted_now = False\n        for seq in list(running):\n"),
          ("                meter.preempted()\n", "                preempted_now = True\n"),
          ("        admitted = False\n", "        if preempted_now:\n            meter.preempted()\n"
                                       "        admitted = False\n")),
    _slip("ex02", "serve_answer", "admission_skips_head", "admission takes the waiting queue in order and never skips its head",
          (_ADMIT, "        admitted = False\n"
                   "        if continuous or not running:\n"
                   "            for seq in list(waiting):\n"
                   "                if len(running) < max_batch and cache.can_admit(seq, len(running)):\n"
                   "                    waiting.remove(seq)\n"
                   "                    cache.admit(seq)\n"
                   "                    running.append(seq)\n"
                   "                    admitted = True\n")),
    _slip("ex02", "serve_answer", "headroom_stale_running_count",
          "admission while the cache can admit the head (cache.can_admit(head, len(running)))",
          ("        if continuous or not running:\n            while",
           "        if continuous or not running:\n            already = len(running)\n            while"),
          ("cache.can_admit(waiting[0], len(running))", "cache.can_admit(waiting[0], already)")),
    _slip("ex02", "serve_answer", "headroom_counts_newcomer",
          "admission while the cache can admit the head (cache.can_admit(head, len(running)))",
          ("cache.can_admit(waiting[0], len(running))", "cache.can_admit(waiting[0], len(running) + 1)")),
    _slip("ex02", "serve_answer", "max_batch_off_by_one", "admission while fewer than max_batch run",
          ("while waiting and len(running) < max_batch", "while waiting and len(running) <= max_batch")),
    _slip("ex02", "serve_answer", "admit_only_after_a_finish", "with continuous=True admission happens every step",
          ("    while waiting or running:\n", "    freed = True\n    while waiting or running:\n"),
          ("        if continuous or not running:\n", "        if (continuous and freed) or not running:\n"),
          ("        if not running:\n            raise", "        freed = False\n        if not running:\n            raise"),
          ("                meter.finished(seq)\n", "                meter.finished(seq)\n                freed = True\n")),
    _slip("ex02", "serve_answer", "meter_after_append",
          "the meter sees each step once, after the forward pass and before the new tokens are appended",
          ("        meter.step(batch, cache, admitted)\n", ""),
          ("        for seq, token in zip(batch, next_tokens, strict=True):\n",
           "        for seq, token in zip(batch, next_tokens, strict=True):\n            seq.tokens.append(token)\n"
           "        meter.step(batch, cache, admitted)\n"
           "        for seq in batch:\n"),
          ("            seq.tokens.append(token)\n            if seq.finished:", "            if seq.finished:")),
    _slip("ex02", "serve_answer", "retire_at_next_step", "a sequence that finishes leaves at once and gives its memory back",
          (_RETIRE, "            seq.tokens.append(token)\n"),
          ("        admitted = False\n",
           "        for seq in list(running):\n"
           "            if seq.finished:\n"
           "                running.remove(seq)\n"
           "                cache.release(seq)\n"
           "                meter.finished(seq)\n"
           "        if not running and not waiting:\n"
           "            break\n"
           "        admitted = False\n")),
    _slip("ex02", "serve_answer", "continuous_flag_ignored",
          "with continuous=False admission happens only when nothing is running",
          ("        if continuous or not running:\n", "        if waiting:\n")),
    _slip("ex02", "serve_answer", "no_grow_after_preempting",
          "when one cannot grow, the newest is preempted until it can (and then it gets its room)",
          ("            while not cache.can_grow(seq):\n", "            if not cache.can_grow(seq):\n"),
          ("                if victim is seq:\n                    break\n            else:\n                cache.grow(seq)\n",
           "            else:\n                cache.grow(seq)\n")),
    _slip("ex02", "serve_answer", "one_victim_per_sequence",
          "the newest running sequence is preempted, again and again until it can",
          ("            while not cache.can_grow(seq):\n", "            for _ in range(1):\n"
                                                         "                if cache.can_grow(seq):\n"
                                                         "                    break\n"),
          ("                if victim is seq:\n                    break\n            else:\n                cache.grow(seq)\n",
           "                if victim is seq:\n                    break\n            if seq in running:\n"
           "                cache.grow(seq)\n")),
    _slip("ex02", "serve_answer", "break_instead_of_error", "nothing running and nothing admissible is a RuntimeError",
          ("            raise RuntimeError(\"nothing running and nothing can be admitted\")\n", "            break\n")),
]

# ---- exercise 2: the static loop ----------------------------------------------------------------------------------

STATIC = [
    _slip("ex02", "static_answer", "static_admits_into_free_places",
          "static admission: waiting requests join only when nothing is running",
          ("        if not running:\n            while", "        if len(running) < max_batch:\n            while")),
    _slip("ex02", "static_answer", "static_meter_never_admits",
          "meter.step(batch, cache, admitted), with whether this step admitted anyone",
          ("meter.step(batch, cache, admitted)", "meter.step(batch, cache, False)")),
    _slip("ex02", "static_answer", "static_skips_head", "the queue is taken in order, never skipping its head",
          ("            while waiting and len(running) < max_batch and cache.can_admit(waiting[0], len(running)):\n"
           "                seq = waiting.popleft()\n"
           "                cache.admit(seq)\n"
           "                running.append(seq)\n"
           "                admitted = True\n",
           "            for seq in list(waiting):\n"
           "                if len(running) < max_batch and cache.can_admit(seq, len(running)):\n"
           "                    waiting.remove(seq)\n"
           "                    cache.admit(seq)\n"
           "                    running.append(seq)\n"
           "                    admitted = True\n")),
    _slip("ex02", "static_answer", "static_never_releases", "a sequence that finishes gives its memory back (cache.release)",
          ("                cache.release(seq)\n", "")),
    _slip("ex02", "static_answer", "static_no_room", "at the start of every step each running sequence is given room",
          ("        for seq in running:\n            cache.grow(seq)\n", "")),
]

# ---- exercise 2: the paged cache and the block allocator ----------------------------------------------------------

PAGED = [
    _slip("ex02", "paged_answer", "blocks_for_floor_plus_one", "a sequence of exactly B tokens needs one block",
          ("return -(-num_tokens // self.block_size)", "return num_tokens // self.block_size + 1")),
    _slip("ex02", "paged_answer", "no_headroom", "plus one spare block for each of the running sequences",
          ("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
           "return self.blocks_for(len(seq.tokens)) <= self.blocks.num_free")),
    _slip("ex02", "paged_answer", "headroom_strict", "can_admit is true exactly when the blocks ... are all free",
          ("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
           "return self.blocks_for(len(seq.tokens)) + running < self.blocks.num_free")),
    _slip("ex02", "paged_answer", "can_admit_prompt_only",
          "can_admit: the blocks seq.tokens need (the prompt, or a preempted sequence's whole history)",
          ("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
           "return self.blocks_for(len(seq.request.prompt)) + running <= self.blocks.num_free")),
    _slip("ex02", "paged_answer", "admit_prompt_only", "after admit(seq) the table covers every token of seq.tokens",
          ("range(self.blocks_for(len(seq.tokens)))", "range(self.blocks_for(len(seq.request.prompt)))")),
    _slip("ex02", "paged_answer", "admit_extra_block", "a table has no block beyond the one that holds the last token",
          ("range(self.blocks_for(len(seq.tokens)))", "range(self.blocks_for(len(seq.tokens) + 1))")),
    _slip("ex02", "paged_answer", "can_grow_wants_free_block",
          "can_grow is true exactly when grow can succeed: the table already covers seq.tokens, or a block is free",
          ("return self.blocks_for(len(seq.tokens)) <= len(seq.block_table) or self.blocks.num_free > 0",
           "return self.blocks.num_free > 0")),
    _slip("ex02", "paged_answer", "grow_one_token_early", "a table has no block beyond the one that holds the last token",
          ("if self.blocks_for(len(seq.tokens)) > len(seq.block_table):",
           "if self.blocks_for(len(seq.tokens) + 1) > len(seq.block_table):")),
    _slip("ex02", "paged_answer", "grow_at_front", "tables grow only at the end",
          ("seq.block_table.append(self.blocks.allocate())", "seq.block_table.insert(0, self.blocks.allocate())")),
    _slip("ex02", "paged_answer", "release_keeps_table", "after release(seq) the table is empty",
          ("            self.blocks.free(block)\n        seq.block_table = []\n", "            self.blocks.free(block)\n")),
    _slip("ex02", "paged_answer", "release_bypasses_owners",
          "after release(seq) each of its blocks has one owner fewer",
          ("            self.blocks.free(block)\n", "            self.blocks.free_list.append(block)\n")),
    _slip("ex02", "paged_answer", "slots_prefill_from_zero",
          "slots(seq, positions) answers one slot per position, through the table",
          ("        table = torch.tensor(seq.block_table, dtype=torch.long)\n",
           "        table = torch.tensor(seq.block_table, dtype=torch.long)\n"
           "        if len(positions) > 1:  # a prefill: the sequence's tokens from the start\n"
           "            positions = torch.arange(len(positions))\n")),
    _slip("ex02", "paged_answer", "slots_single_in_last_block",
          "slots(seq, positions): position p is slot block_table[p // block_size] * block_size + p % block_size",
          ("        table = torch.tensor(seq.block_table, dtype=torch.long)\n",
           "        if len(positions) == 1:  # a decode: the newest token, in the last block\n"
           "            return [seq.block_table[-1] * self.block_size + int(positions[0]) % self.block_size]\n"
           "        table = torch.tensor(seq.block_table, dtype=torch.long)\n")),
    _slip("ex02", "paged_answer", "slots_decode_from_length",
          "slots(seq, positions): one slot per position given",
          ("        table = torch.tensor(seq.block_table, dtype=torch.long)\n",
           "        if len(positions) == 1:  # a decode: the token after the ones held\n"
           "            positions = torch.tensor([len(seq.tokens) - 1 + (seq.num_cached == len(seq.tokens))])\n"
           "        table = torch.tensor(seq.block_table, dtype=torch.long)\n")),
]

CONTIGUOUS = [
    _slip("ex02", "contiguous_answer", "best_fit", "first fit: the lowest gap that is long enough, even when a tighter one lies further on",
          ("        cursor = 0\n        for start, used in sorted(self.runs.values()):\n"
           "            if start - cursor >= length:\n                return cursor\n            cursor = start + used\n"
           "        return cursor if self.num_slots - cursor >= length else None\n",
           "        cursor, gaps = 0, []\n        for start, used in sorted(self.runs.values()):\n"
           "            gaps.append((start - cursor, cursor))\n            cursor = start + used\n"
           "        gaps.append((self.num_slots - cursor, cursor))\n"
           "        fits = [(size, at) for size, at in gaps if size >= length]\n"
           "        return min(fits)[1] if fits else None\n")),
    _slip("ex02", "contiguous_answer", "gap_strict", "a gap of exactly length slots fits",
          ("if start - cursor >= length:", "if start - cursor > length:")),
    _slip("ex02", "contiguous_answer", "end_gap_strict", "a gap of exactly length slots fits, at the end of the pool too",
          ("self.num_slots - cursor >= length", "self.num_slots - cursor > length")),
    _slip("ex02", "contiguous_answer", "runs_unsorted", "first fit: the lowest free position where a long enough gap exists",
          ("for start, used in sorted(self.runs.values()):", "for start, used in self.runs.values():")),
    _slip("ex02", "contiguous_answer", "contiguous_slots_prefill_from_zero",
          "slots(seq, positions): seq.start + position, one per position",
          ("        return seq.start + positions\n",
           "        if len(positions) > 1:  # a prefill: from the start of the run\n"
           "            return seq.start + torch.arange(len(positions))\n"
           "        return seq.start + positions\n")),
    _slip("ex02", "contiguous_answer", "contiguous_reserves_tokens_only",
          "admitting a sequence reserves seq.request.max_len slots",
          ("        self.runs[seq.id] = (start, seq.request.max_len)\n",
           "        self.runs[seq.id] = (start, len(seq.tokens))\n")),
    _slip("ex02", "contiguous_answer", "release_keeps_start", "release gives the run back",
          ("        del self.runs[seq.id]\n        seq.start = None\n", "        del self.runs[seq.id]\n")),
]

ALLOCATOR = [
    _slip("ex02", "allocator_answer", "share_free_block", "sharing a free block raises ValueError",
          ("        if self.ref_count[block] < 1:\n            raise ValueError(f\"block {block} is not in use\")\n", "")),
    _slip("ex02", "allocator_answer", "double_free", "freeing a block that is already free raises ValueError",
          ("        if self.ref_count[block] < 1:\n            raise ValueError(f\"block {block} is already free\")\n", "")),
    _slip("ex02", "allocator_answer", "free_ignores_owners",
          "free removes one owner and puts the block back on the free list when none is left",
          ("        if self.ref_count[block] == 0:\n            self.free_list.append(block)\n",
           "        self.free_list.append(block)\n")),
    _slip("ex02", "allocator_answer", "allocate_empty_indexerror", "allocate() on an empty free list raises RuntimeError",
          ("        if not self.free_list:\n            raise RuntimeError(\"no free block\")\n", "")),
    _slip("ex02", "allocator_answer", "allocate_newest_freed", "which free block allocate() hands out is up to you",
          ("block = self.free_list.popleft()", "block = self.free_list.pop()")),
    _slip("ex02", "allocator_answer", "allocate_lowest_id", "which free block allocate() hands out is up to you",
          ("block = self.free_list.popleft()", "block = min(self.free_list)\n        self.free_list.remove(block)")),
]

ATTENTION = [
    _slip("ex02", "paged_kv_answer", "mask_from_zero", "a token at position p sees positions 0 .. p (causal)",
          ("            first = len(context) - n  # position of the first new token\n",
           "            first = 0 if n > 1 else len(context) - 1  # a prefill starts at 0, a decode sees everything\n")),
    _slip("ex02", "paged_kv_answer", "read_before_store", "it must store k and v at the new slots, then return ...",
          ("        store[0, written], store[1, written] = k, v\n", ""),
          ("        return torch.cat(out)\n", "        store[0, written], store[1, written] = k, v\n"
                                            "        return torch.cat(out)\n")),
    _slip("ex02", "paged_kv_answer", "heads_modulo", "query head h reads key-value head h // (heads // kv_heads)",
          ("            keys = store[0, context].repeat_interleave(group, dim=1)",
           "            keys = store[0, context].repeat(1, group, 1)"),
          ("            values = store[1, context].repeat_interleave(group, dim=1)",
           "            values = store[1, context].repeat(1, group, 1)")),
]

# ---- exercise 3: diagnose -----------------------------------------------------------------------------------------

DIAGNOSE = [
    _slip("ex03", "diagnose_answer", "latency_divides_by_concurrency",
          "latency: one request's end-to-end time, prefill + output x step (the step is shared, the wait is not)",
          ("        return pre + output * t / speedup\n", "        return pre + output * t / (batch * speedup)\n")),
    _slip("ex03", "diagnose_answer", "prefix_shortens_decode",
          "prefix_caching: a prefix_hit share of each prompt is found in the cache (decode unchanged)",
          ("        t = step(batch, ctx, w, c)[0]\n", "        t = step(batch, ctx - prompt * hit, w, c)[0]\n")),
    _slip("ex03", "diagnose_answer", "phase_tie_prefill", "phase is whichever is larger (\"decode\" on a tie)",
          ("\"prefill\" if prefill_s > decode_share_s", "\"prefill\" if prefill_s >= decode_share_s")),
    _slip("ex03", "diagnose_answer", "fp8_peak_ignored", "peak is gpu.flops_fp8 when the weights are 1 byte and the chip has an FP8 rate",
          ("peak = g.flops_fp8 if (w == 1 and g.flops_fp8) else g.flops_bf16", "peak = g.flops_bf16")),
    _slip("ex03", "diagnose_answer", "fp8_peak_always", "peak is gpu.flops_fp8 when the weights are 1 byte and the chip has an FP8 rate",
          ("peak = g.flops_fp8 if (w == 1 and g.flops_fp8) else g.flops_bf16", "peak = g.flops_fp8 or g.flops_bf16")),
    _slip("ex03", "diagnose_answer", "quantized_keeps_bf16_peak",
          "quantization: FP8 weights (so the FP8 peak, where the chip has one) at the same concurrency",
          ("compute = 2 * N * batch * tokens_per_seq / achieved_flops(w)",
           "compute = 2 * N * batch * tokens_per_seq / achieved_flops(wb)"),
          ("2 * N * tokens / achieved_flops(w))", "2 * N * tokens / achieved_flops(wb))")),
    _slip("ex03", "diagnose_answer", "quantization_weights_only", "quantization: FP8 weights and FP8 KV cache",
          ("\"quantization\": base / metric(w=1, c=1)", "\"quantization\": base / metric(w=1)")),
    _slip("ex03", "diagnose_answer", "batching_ignores_slo", "batching: ... keeps the step within tpot_slo_s",
          ("        if step(batch, ctx)[0] <= dep[\"tpot_slo_s\"]:\n", "        if True:\n")),
    _slip("ex03", "diagnose_answer", "batching_mean_context_memory", "each sequence holds prompt + output tokens of KV",
          ("((prompt + output) * kv(kb))", "(ctx * kv(kb))")),
    _slip("ex03", "diagnose_answer", "reserve_in_gb", "memory for KV is num_gpus x (memory - 8 GiB) - weights",
          ("RESERVE_GIB_PER_GPU * GiB", "RESERVE_GIB_PER_GPU * 1e9")),
    _slip("ex03", "diagnose_answer", "reserve_once", "memory for KV is num_gpus x (memory - 8 GiB) - weights",
          ("n * (g.memory_bytes - RESERVE_GIB_PER_GPU * GiB) - wbytes(wb)",
           "n * g.memory_bytes - RESERVE_GIB_PER_GPU * GiB - wbytes(wb)")),
    _slip("ex03", "diagnose_answer", "batching_below_stated", "batching: never below the stated concurrency",
          ("for batch in range(fit, conc, -1):", "for batch in range(fit, 0, -1):")),
    _slip("ex03", "diagnose_answer", "verify_as_plain_step",
          "the target verifies k + 1 positions per sequence in one pass (same bytes, k + 1 times the FLOPs)",
          ("verify = step(conc, ctx, tokens_per_seq=dep[\"k\"] + 1)[0]", "verify = plain")),
    _slip("ex03", "diagnose_answer", "round_tokens_alpha_k", "a round yields (1 - alpha^(k+1)) / (1 - alpha) tokens",
          ("tokens = (1 - a ** (k + 1)) / (1 - a)", "tokens = (1 - a ** k) / (1 - a)")),
    _slip("ex03", "diagnose_answer", "speculative_never_slows", "a value below 1 slows you down",
          ("    gains = {", "    speedup = max(1.0, speedup)\n    gains = {")),
    _slip("ex03", "diagnose_answer", "attention_inside_max", "attention's time adds: B x S x kv / bandwidth plus the larger of ...",
          ("return attention + max(weights, compute),", "return max(attention, weights, compute),")),
    _slip("ex03", "diagnose_answer", "full_context", "use the mean context S = prompt + output / 2",
          ("ctx = prompt + output / 2", "ctx = prompt + output")),
    _slip("ex03", "diagnose_answer", "prefill_without_kv_write", "prefill: the larger of (weights + T x kv) / bandwidth and ...",
          ("(wbytes(w) + tokens * kv(c))", "(wbytes(w))")),
    _slip("ex03", "diagnose_answer", "prefix_tokens_floor", "only max(1, round(prompt x (1 - prefix_hit))) tokens are computed",
          ("max(1, round(prompt * (1 - hit)))", "max(1, int(prompt * (1 - hit)))")),
    _slip("ex03", "diagnose_answer", "cost_divides_by_stated_concurrency",
          "cost: deployment-seconds, output x step / concurrency (the concurrency batching raised)",
          ("return pre + output * t / (batch * speedup)", "return pre + output * t / (conc * speedup)")),
    _slip("ex03", "diagnose_answer", "phase_undivided_decode", "phase: prefill against its share of decode, output x step / concurrency",
          ("decode_share_s = prefill(prompt), output * plain / conc", "decode_share_s = prefill(prompt), output * plain")),
    _slip("ex03", "diagnose_answer", "bound_at_batched_target", "decode_bound: a decode step at this (the stated) concurrency",
          ("\"decode_bound\": step(conc, ctx)[1]", "\"decode_bound\": step(target, ctx)[1]")),
    _slip("ex03", "diagnose_answer", "bandwidth_one_gpu", "bandwidth is gpu.bandwidth x num_gpus",
          ("        attention = batch * context * kv(c) / (g.bandwidth * n)\n        weights = wbytes(w) / (g.bandwidth * n)\n",
           "        attention = batch * context * kv(c) / g.bandwidth\n        weights = wbytes(w) / g.bandwidth\n"),
          ("/ (g.bandwidth * n), 2 * N * tokens", "/ g.bandwidth, 2 * N * tokens")),
    _slip("ex03", "diagnose_answer", "kv_without_values", "kv(b): KV bytes per token (keys and values)",
          ("return 2 * m.num_layers * m.num_kv_heads * m.head_dim * b", "return m.num_layers * m.num_kv_heads * m.head_dim * b")),
    _slip("ex03", "diagnose_answer", "flops_without_batch", "the matmuls do 2 x N x B FLOPs",
          ("compute = 2 * N * batch * tokens_per_seq /", "compute = 2 * N * tokens_per_seq /")),
    _slip("ex03", "diagnose_answer", "mfu_ignored", "achieved FLOP/s are peak x MFU x num_gpus",
          ("return peak * MFU * n", "return peak * n")),
    _slip("ex03", "diagnose_answer", "smallest_gain_wins", "best_lever has the largest gain",
          ("best = max(LEVERS,", "best = min(LEVERS,")),
]

# Added after the hidden checks were read, while building the cache that says no (stage5.grading.ex02.refusing):
# correct builds that such a cache could have marked down if its answers depended on how often it is asked.
LATER = [
    _slip("ex02", "serve_answer", "asks_everyone_first", "(a correct build) every running sequence gets room, oldest first",
          (_ROOM_START, "    while waiting or running:\n        short = [s for s in running if not cache.can_grow(s)]\n"
                        "        for seq in list(running):\n")),
    _slip("ex02", "serve_answer", "asks_twice", "(a correct build) when one cannot grow, the newest is preempted",
          ("            while not cache.can_grow(seq):\n",
           "            while not cache.can_grow(seq) and not cache.can_grow(seq):\n")),
]

# The wrong builds issue 41 found at full marks that the list above did not already hold, in the words.
LATER += [
    _slip("ex02", "serve_answer", "victim_highest_id",
          "the newest running sequence (the one admitted last: request ids are labels, not ages) is preempted",
          ("                victim = running.pop()  # the newest\n",
           "                victim = max(running, key=lambda s: s.id)  # the newest request\n"
           "                running.remove(victim)\n")),
    _slip("ex03", "diagnose_answer", "phase_latency_undivided",
          "phase is whichever is larger, under either objective: the decode share is divided by the concurrency",
          ("decode_share_s = prefill(prompt), output * plain / conc",
           "decode_share_s = prefill(prompt), output * plain / (conc if dep[\"objective\"] == \"cost\" else 1)")),
]

SLIPS: list[Slip] = SERVE + STATIC + PAGED + CONTIGUOUS + ALLOCATOR + ATTENTION + DIAGNOSE + LATER

#: Issue 41's classes of wrong builds at full marks, each with the slip that builds it (tests/test_found_at_full_marks.py).
FOUND_AT_FULL_MARKS: dict[str, str] = {
    "makes room newest first rather than oldest first": "room_newest_first",
    "preempts the newest request (highest id) rather than the newest running sequence": "victim_highest_id",
    "admits nobody in a step that preempted": "no_admission_after_preemption",
    "gives a readmitted request its old place in the running batch (by id)": "readmitted_to_old_place",
    "meters a step that preempts and readmits as a plain decode": "meter_swap_as_decode",
    "slots() maps positions 5, 6, 7 to the slots of 0, 1, 2": "slots_prefill_from_zero",
    "under the latency objective, phase does not divide the decode term by the concurrency": "phase_latency_undivided",
    "prefix caching shortens the decode context as well as the prefill": "prefix_shortens_decode",
}

# Slips that cannot change anything graded, with the reason: these are alternative-correct builds, and the suite
# fails if one of them loses marks (a grader that marked them down would fail a correct learner).
EQUIVALENT: dict[str, str] = {
    "allocate_newest_freed": "the text leaves the reuse order to the learner ('any one'): no token depends on it",
    "allocate_lowest_id": "the text leaves the reuse order to the learner ('any one'): no token depends on it",
    "readmitted_at_old_index": "the victim is always the newest, so the index it left is the end of `running`; "
                               "until it is readmitted nobody else can be (it heads the queue), so `running` only "
                               "shrinks and the clamped index is the end again: the same place as append",
    "one_victim_per_sequence": "a victim always holds at least one block and a sequence needs at most one more "
                               "block per step, so one victim always makes room: `if` and `while` do the same",
    "release_keeps_start": "nothing reads seq.start of a released run (admit sets it again), and the text asks "
                           "only that the slots be free",
    "asks_everyone_first": "a cache's answers do not depend on how often or how early it is asked, the course's "
                           "cache that says no included",
    "asks_twice": "a cache's answers do not depend on how often it is asked",
    "break_instead_of_error": "meter.result raises RuntimeError for the requests that never finished, which is the "
                              "error the rule asks for",
    "phase_tie_prefill": "an exact tie of two float times is not a deployment anyone grades (measure zero)",
    "speculative_never_slows": "the best gain is at least prefix caching's, which is at least 1 (it only removes "
                               "prefill tokens), and max() keeps the earlier lever on a tie: a speculative gain "
                               "raised to 1 never wins",
    "prefill_without_kv_write": "a prefill is bounded by its bytes only for prompts of a few hundred tokens, whose KV "
                                "writes are a rounding error beside the weights; longer ones are bounded by FLOPs",
    "prefix_tokens_floor": "int and round differ by one prompt token; a prefill of a few tokens is bounded by reading "
                           "the weights, so the metric moves far less than the 5% a gain may be off",
}
