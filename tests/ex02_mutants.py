"""One-line mutants of exercise 2's reference solution, one or more per rule the exercise states.

Each mutant is ``(name, answer cell, [(old, new), ...], rule)``: the solution's answer cell with each ``old`` (found
exactly once) replaced by ``new``. ``EQUIVALENT`` names the mutants that change nothing the exercise grades (the
rules leave that choice to the learner, and the docstrings say so); every other mutant must fail a hidden check
(tests/test_ex02_mutants.py).
"""

from __future__ import annotations

Mutant = tuple[str, str, list[tuple[str, str]], str]

_BEST_FIT = '''        best = None
        cursor = 0
        for start, used in sorted(self.runs.values()) + [(self.num_slots, 0)]:
            gap = start - cursor
            if gap >= length and (best is None or gap < best[1]):
                best = (cursor, gap)
            cursor = start + used
        return None if best is None else best[0]
'''
_FIRST_FIT = '''        cursor = 0
        for start, used in sorted(self.runs.values()):
            if start - cursor >= length:
                return cursor
            cursor = start + used
        return cursor if self.num_slots - cursor >= length else None
'''
_FLATTENED = '''        keys = store[0, torch.cat(self.context_slots)].repeat_interleave(group, dim=1)
        values = store[1, torch.cat(self.context_slots)].repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, keys) / q.shape[-1] ** 0.5
        n, first = q.shape[0], len(keys) - q.shape[0]  # the whole step read as one sequence
        visible = torch.arange(len(keys))[None, :] <= first + torch.arange(n)[:, None]
        return torch.einsum("hqk,khd->qhd", scores.masked_fill(~visible, float("-inf")).softmax(dim=-1), values)
'''
_ATTEND_LOOP = '''        out, start = [], 0
        for new, context in zip(self.new_slots, self.context_slots, strict=True):
            n = len(new)
            keys = store[0, context].repeat_interleave(group, dim=1)  # [context, heads, head_dim]
            values = store[1, context].repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[start:start + n], keys) / q.shape[-1] ** 0.5
            first = len(context) - n  # position of the first new token
            visible = torch.arange(len(context))[None, :] <= first + torch.arange(n)[:, None]
            weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
            out.append(torch.einsum("hqk,khd->qhd", weights, values))
            start += n
        return torch.cat(out)
'''
_GROW_LOOP = '''        for seq in list(running):
            if seq not in running:
                continue  # preempted to make room for an older sequence
            while not cache.can_grow(seq):
                victim = running.pop()  # the newest
                cache.release(victim)
                victim.num_cached = 0
                waiting.appendleft(victim)
                meter.preempted()
                if victim is seq:
                    break
            else:
                cache.grow(seq)
'''
_ADMIT_LOOP = '''        admitted = False
        if continuous or not running:
            while waiting and len(running) < max_batch and cache.can_admit(waiting[0], len(running)):
                seq = waiting.popleft()
                cache.admit(seq)
                running.append(seq)
                admitted = True
'''
_STATIC_ADMIT = '''            while waiting and len(running) < max_batch and cache.can_admit(waiting[0], len(running)):
                seq = waiting.popleft()
                cache.admit(seq)
                running.append(seq)
                admitted = True
'''
_SKIP_HEAD = '''            for seq in list(waiting):  # whoever fits, even past a head that does not
                if len(running) < max_batch and cache.can_admit(seq, len(running)):
                    waiting.remove(seq)
                    cache.admit(seq)
                    running.append(seq)
                    admitted = True
'''

MUTANTS: list[Mutant] = [
    # --- P1a: the contiguous cache
    ("contiguous best fit", "contiguous_answer", [(_FIRST_FIT, _BEST_FIT)], "first fit: the lowest gap that fits"),
    ("contiguous gap off by one", "contiguous_answer", [("if start - cursor >= length:", "if start - cursor > length:")],
     "a gap exactly as long as the run fits"),
    ("contiguous tail off by one", "contiguous_answer",
     [("return cursor if self.num_slots - cursor >= length else None",
       "return cursor if self.num_slots - cursor > length else None")], "a gap exactly as long as the run fits"),
    ("contiguous last fit", "contiguous_answer", [("                return cursor\n", "                pass\n")],
     "first fit: the lowest gap that fits"),
    ("contiguous reserves the prompt only", "contiguous_answer",
     [("self.runs[seq.id] = (start, seq.request.max_len)", "self.runs[seq.id] = (start, len(seq.tokens))")],
     "a run holds prompt + max_tokens slots"),
    ("contiguous release keeps the run", "contiguous_answer", [("del self.runs[seq.id]", "pass")],
     "release() gives the run back"),
    ("contiguous slots off by one", "contiguous_answer", [("return seq.start + positions", "return seq.start + positions + 1")],
     "slots() = the run's first slot + position"),
    # --- P1b: attention through the slots
    ("attention not causal", "paged_kv_answer",
     [('weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)', "weights = scores.softmax(dim=-1)")],
     "causal mask"),
    ("attention mask hides its own token", "paged_kv_answer",
     [("<= first + torch.arange(n)[:, None]", "< first + torch.arange(n)[:, None]")], "a token sees positions 0 .. p"),
    ("attention mask sees one ahead", "paged_kv_answer",
     [("<= first + torch.arange(n)[:, None]", "<= first + 1 + torch.arange(n)[:, None]")], "a token sees positions 0 .. p"),
    ("attention mask from position 0", "paged_kv_answer", [("first = len(context) - n", "first = 0")],
     "new tokens are the context's tail"),
    ("attention heads repeat", "paged_kv_answer",
     [("keys = store[0, context].repeat_interleave(group, dim=1)", "keys = store[0, context].repeat(1, group, 1)"),
      ("values = store[1, context].repeat_interleave(group, dim=1)", "values = store[1, context].repeat(1, group, 1)")],
     "query head h reads kv head h // (heads // kv_heads)"),
    ("attention heads h // kv_heads", "paged_kv_answer",
     [("keys = store[0, context].repeat_interleave(group, dim=1)",
       "keys = store[0, context][:, torch.arange(q.shape[1]) // k.shape[1]]"),
      ("values = store[1, context].repeat_interleave(group, dim=1)",
       "values = store[1, context][:, torch.arange(q.shape[1]) // k.shape[1]]")],
     "query head h reads kv head h // (heads // kv_heads)"),
    ("attention scaled by head_dim", "paged_kv_answer", [("/ q.shape[-1] ** 0.5", "/ q.shape[-1]")],
     "scores scaled by 1 / sqrt(head_dim)"),
    ("attention not scaled", "paged_kv_answer", [("/ q.shape[-1] ** 0.5", "")], "scores scaled by 1 / sqrt(head_dim)"),
    ("attention in float32", "paged_kv_answer",
     [("weights, values))", "weights.float(), values.float()).to(q.dtype))")], "in the dtype of q"),
    ("attention across sequences", "paged_kv_answer", [(_ATTEND_LOOP, _FLATTENED)], "its own sequence's context only"),
    ("attention scales q in place", "paged_kv_answer",
     [("        group = q.shape[1] // k.shape[1]\n", "        group = q.shape[1] // k.shape[1]\n        q *= q.shape[-1] ** -0.5\n"),
      ('q[start:start + n], keys) / q.shape[-1] ** 0.5', "q[start:start + n], keys)")],
     "attend may change q, k and v in place"),
    ("attention does not store", "paged_kv_answer", [("store[0, written], store[1, written] = k, v", "pass  # nothing stored")],
     "store k and v at the new slots"),
    # --- P1c: the static loop
    ("static admits while running", "static_answer", [("        if not running:\n            while", "        if True:\n            while")],
     "static admission: only when nothing runs"),
    ("static batch off by one", "static_answer",
     [("while waiting and len(running) < max_batch", "while waiting and len(running) <= max_batch")],
     "fewer than max_batch run"),
    ("static admission without headroom", "static_answer",
     [("cache.can_admit(waiting[0], len(running))", "cache.can_admit(waiting[0], 0)")],
     "can_admit(head, len(running))"),
    ("static skips the head", "static_answer", [(_STATIC_ADMIT, _SKIP_HEAD)], "never skipping its head"),
    ("static keeps finished memory", "static_answer",
     [("                running.remove(seq)\n                cache.release(seq)\n", "                running.remove(seq)\n")],
     "a finished sequence gives its memory back"),
    ("static never retires in an admission step", "static_answer",
     [("            if seq.finished:\n                running.remove(seq)", "            if seq.finished and not admitted:\n                running.remove(seq)")],
     "a sequence that is finished once its new token is appended leaves at once, in its admission step too"),
    ("static serves the notebook's model", "static_answer",
     [("next_tokens = forward_step(model, pool, batch, cache)", "next_tokens = forward_step(globals()['model'], pool, batch, cache)")],
     "a step is forward_step(model, ...) with the model the loop is given"),
    ("static spins when stuck", "static_answer",
     [('            raise RuntimeError("nothing running and nothing can be admitted")', "            continue")],
     "RuntimeError when stuck"),
    # --- P2a: the block allocator
    ("allocator double free allowed", "allocator_answer",
     [('        if self.ref_count[block] < 1:\n            raise ValueError(f"block {block} is already free")\n', "")],
     "freeing a free block raises ValueError"),
    ("allocator share of a free block allowed", "allocator_answer",
     [('        if self.ref_count[block] < 1:\n            raise ValueError(f"block {block} is not in use")\n', "")],
     "share() of a free block raises ValueError"),
    ("allocator frees at every owner", "allocator_answer",
     [("        if self.ref_count[block] == 0:\n            self.free_list.append(block)",
       "        self.free_list.append(block)")], "a block stays in use until its last owner frees it"),
    ("allocator empty raises IndexError", "allocator_answer",
     [('        if not self.free_list:\n            raise RuntimeError("no free block")\n', "")],
     "allocate() on an empty free list raises RuntimeError"),
    ("allocator share does not count", "allocator_answer", [("self.ref_count[block] += 1", "pass")],
     "share() adds an owner"),
    ("allocator takes the newest free block", "allocator_answer",
     [("block = self.free_list.popleft()", "block = self.free_list.pop()")], "any free block may be handed out"),
    ("allocator returns blocks to the front", "allocator_answer",
     [("self.free_list.append(block)", "self.free_list.appendleft(block)")], "any free block may be handed out"),
    # --- P2b: the paged cache
    ("paged blocks_for off by one", "paged_answer",
     [("return -(-num_tokens // self.block_size)", "return num_tokens // self.block_size + 1")], "ceil(tokens / B)"),
    ("paged admission without headroom", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
       "return self.blocks_for(len(seq.tokens)) <= self.blocks.num_free")], "one spare block per running sequence"),
    ("paged admission strict", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
       "return self.blocks_for(len(seq.tokens)) + running < self.blocks.num_free")], "all free, no more"),
    ("paged admission two spares", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
       "return self.blocks_for(len(seq.tokens)) + 2 * running <= self.blocks.num_free")],
     "one spare block per running sequence"),
    ("paged admission for the cap", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) + running <= self.blocks.num_free",
       "return self.blocks_for(seq.request.max_len) + running <= self.blocks.num_free")],
     "the blocks seq.tokens need"),
    ("paged can_grow only when blocks are free", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) <= len(seq.block_table) or self.blocks.num_free > 0",
       "return self.blocks.num_free > 0")], "a free block is needed only when the table does not cover the tokens"),
    ("paged can_grow asks a block when exactly full", "paged_answer",
     [("return self.blocks_for(len(seq.tokens)) <= len(seq.block_table) or self.blocks.num_free > 0",
       "return self.blocks_for(len(seq.tokens) + 1) <= len(seq.block_table) or self.blocks.num_free > 0")],
     "a free block is needed only when the table does not cover the tokens"),
    ("paged admit one block more", "paged_answer",
     [("range(self.blocks_for(len(seq.tokens)))]", "range(self.blocks_for(len(seq.tokens)) + 1)]")],
     "the table holds exactly the blocks its tokens need"),
    ("paged grow always", "paged_answer",
     [("        if self.blocks_for(len(seq.tokens)) > len(seq.block_table):\n            seq.block_table.append",
       "        if True:\n            seq.block_table.append")], "grow adds a block only when needed"),
    ("paged release keeps the blocks", "paged_answer",
     [("        for block in seq.block_table:\n            self.blocks.free(block)\n", "")], "release frees every block"),
    ("paged release keeps the table", "paged_answer", [("        seq.block_table = []\n", "")],
     "after release the table is empty"),
    ("paged slots ignore the table", "paged_answer",
     [("return table[positions // self.block_size] * self.block_size + positions % self.block_size",
       "return table[0] * self.block_size + positions")], "slots through the block table"),
    # --- P3: the continuous loop
    ("serve admits before making room", "serve_answer", [(_GROW_LOOP + _ADMIT_LOOP, _ADMIT_LOOP + _GROW_LOOP)],
     "room before admission"),
    ("serve makes room newest first", "serve_answer", [("for seq in list(running):", "for seq in reversed(list(running)):")],
     "room for running sequences, oldest first"),
    ("serve preempts the oldest", "serve_answer", [("victim = running.pop()  # the newest", "victim = running.pop(0)")],
     "the victim is the newest"),
    ("serve preempts the one that cannot grow", "serve_answer",
     [("victim = running.pop()  # the newest", "victim = seq\n                running.remove(seq)")],
     "the victim is the newest"),
    ("serve victim to the back", "serve_answer", [("waiting.appendleft(victim)", "waiting.append(victim)")],
     "a victim goes to the front of the queue"),
    ("serve victims in preemption order", "serve_answer",
     [("        for seq in list(running):\n", "        step_victims = []\n        for seq in list(running):\n"),
      ("waiting.appendleft(victim)", "waiting.insert(len(step_victims), victim)\n                step_victims.append(victim)")],
     "several victims in one step: each goes to the front, so the oldest victim leads"),
    ("serve one victim then grow", "serve_answer",
     [("            while not cache.can_grow(seq):", "            for _ in range(1 - cache.can_grow(seq)):")],
     "preempt again and again until it can grow"),
    ("serve keeps preempting past itself", "serve_answer",
     [("                if victim is seq:\n                    break\n", "")], "until it was itself the victim"),
    ("serve victim keeps its memory", "serve_answer", [("                cache.release(victim)\n", "")],
     "a preempted sequence gives its memory back"),
    ("serve victim keeps num_cached", "serve_answer", [("                victim.num_cached = 0\n", "")],
     "a preempted sequence has num_cached = 0"),
    ("serve victim not counted", "serve_answer", [("                meter.preempted()\n", "")],
     "counted once with meter.preempted()"),
    ("serve victim restarts", "serve_answer",
     [("victim.num_cached = 0\n", "victim.num_cached = 0\n                victim.tokens = list(victim.request.prompt)\n")],
     "a preempted sequence keeps its tokens"),
    ("serve waits for the batch", "serve_answer", [("        if continuous or not running:\n", "        if not running:\n")],
     "continuous admission every step"),
    ("serve batch off by one", "serve_answer",
     [("while waiting and len(running) < max_batch", "while waiting and len(running) <= max_batch")],
     "fewer than max_batch run"),
    ("serve admission without headroom", "serve_answer",
     [("cache.can_admit(waiting[0], len(running))", "cache.can_admit(waiting[0], 0)")], "can_admit(head, len(running))"),
    ("serve skips the head", "serve_answer", [(_STATIC_ADMIT, _SKIP_HEAD)], "never skipping its head"),
    ("serve admits one per step", "serve_answer",
     [("                running.append(seq)\n                admitted = True\n",
       "                running.append(seq)\n                admitted = True\n                break\n")],
     "admit while the head fits"),
    ("serve admitted flag always", "serve_answer", [("meter.step(batch, cache, admitted)", "meter.step(batch, cache, True)")],
     "admitted is true only in a step that admitted someone"),
    ("serve never retires in an admission step", "serve_answer",
     [("            if seq.finished:\n                running.remove(seq)", "            if seq.finished and seq not in admitted_now:\n                running.remove(seq)"),
      ("                running.append(seq)\n                admitted = True\n", "                running.append(seq)\n                admitted = True\n                admitted_now.append(seq)\n"),
      ("        admitted = False\n", "        admitted, admitted_now = False, []\n")],
     "a sequence that is finished once its new token is appended leaves at once, in its admission step too"),
    ("serve serves the notebook's model", "serve_answer",
     [("next_tokens = forward_step(model, pool, batch, cache)", "next_tokens = forward_step(globals()['model'], pool, batch, cache)")],
     "a step is forward_step(model, ...) with the model the loop is given"),
    ("serve keeps finished memory", "serve_answer",
     [("                running.remove(seq)\n                cache.release(seq)\n", "                running.remove(seq)\n")],
     "a finished sequence gives its memory back"),
    ("serve spins when stuck", "serve_answer",
     [('            raise RuntimeError("nothing running and nothing can be admitted")', "            continue")],
     "RuntimeError when stuck"),
    ("serve meters before the forward", "serve_answer",
     [("        next_tokens = forward_step(model, pool, batch, cache)\n        meter.step(batch, cache, admitted)\n",
       "        meter.step(batch, cache, admitted)\n        next_tokens = forward_step(model, pool, batch, cache)\n")],
     "meter.step after the forward pass"),
]

#: Mutants that change nothing graded: the text leaves the choice to the learner (which free block is reused).
#: Preempting at most one victim per growing sequence changes nothing either: a victim always frees at least one
#: block, and with the cache that says no (stage5.grading.ex02.refusing) each release ends one refusal. (Making room
#: newest first changes nothing with an honest cache, but the cache that says no shows it: the newest asks first.)
EQUIVALENT = {"allocator takes the newest free block", "allocator returns blocks to the front",
              "serve one victim then grow", "attention scales q in place"}
