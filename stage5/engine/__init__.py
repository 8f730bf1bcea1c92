"""The toy serving engine, in the spirit of nano-vllm: flat, one idea per file.

* ``model.py``       - a Llama-style decoder built from a ``ModelConfig``, and the reference ``generate()``;
* ``sequence.py``    - ``Request`` (what a client sends) and ``Sequence`` (what the engine tracks);
* ``kv.py``          - the K/V pool tensor, the contiguous and the paged allocator;
* ``scheduler.py``   - ``Scheduler``: waiting/running queues, admission, preemption, retirement, token budget
  (chunked prefill); shared by both engines;
* ``batch.py``       - ``feed()``: one forward pass over a batch's uncached tokens (batch preparation, once);
* ``metrics.py``     - ``Recorder``, ``RunResult``, ``StepRecord`` (what ``on_step`` receives), latency percentiles;
* ``clock.py``       - ``WallClock``, ``CpuClock`` (waits for a core left out) and ``VirtualClock`` (steps
  timed by the calibrated step model);
* ``engine.py``      - ``Engine(model, cfg, allocator=..., scheduler=...).run(requests) -> RunResult``;
* ``prefix.py``      - ``PrefixCachingAllocator``: chained-hash full blocks, shared by reference count, LRU;
* ``speculative.py`` - ``accept_or_resample``, ``SpeculativeEngine``, the draft-model and prompt-lookup drafters;
* ``workload.py``    - ``make_workload(n, seed)``, seeded long-tailed traffic; ``make_arrivals`` sends it over time;
  ``small_workload()``, short requests sized for the tiny model;
* ``checkpoints.py`` - ``load_target()`` / ``load_draft()``, the trained byte-level models; ``tiny_model()``, a
  35k-parameter random one (exercise 2's loops and ``bench load --model tiny`` serve it);
* ``roofline_toy.py`` - ``load_roofline_toy()``: the same architecture with random weights of a few hundred MB,
  sized so a decode step streams them from memory (what the chapters time and predict);
* ``roofline_spec.py`` - speculative decoding on that toy at an acceptance rate the caller sets;
* ``overhead.py``    - ``measure_overhead()``: the fixed cost of a step, from a hollow run (what calibration records);
* ``fleet.py``       - several engines behind a router (round-robin, least-loaded, prefix-aware with a load bound)
  on one virtual clock, and ``bench fleet``;
* ``bench.py``       - ``python -m stage5 bench`` (``bench_prefix.py``, ``bench_spec.py``, ``bench_roofline.py``:
  ``bench prefix|spec|roofline``; ``bench_load.py``: ``bench load``, serving under load).

The benches are the one floor here above :mod:`stage5.calibrate`, which runs the engine to measure the machine:
they import it, and nothing else in this package does (see :mod:`stage5`'s floors). No module here imports
exercise or grading code.
"""

try:
    import torch  # noqa: F401  (every module here needs it; fail once, clearly, rather than deep in an import)
except ImportError as err:  # torch is the optional `engine` extra; the cost model and simulator work without it
    raise ImportError("stage5.engine needs torch, which is not installed. Install PyTorch's CPU build with "
                      "`pip install torch --index-url https://download.pytorch.org/whl/cpu` (or "
                      "`pip install 'stage5[engine]'` where torch's default build is the one you want).") from err
