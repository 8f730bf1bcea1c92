"""The estimate's fitted constants, frozen: written by ``python -m stage5 validate --refit`` and checked by
tests/test_fit.py (a refit must reproduce them within rounding).

What is fitted: per GPU family, the achieved share of the datasheet's bandwidth, a scale on the benchmark GEMM
efficiency and a scale on the all-reduces' modelled speed; the launch cost of one kernel from Python; the fixed time
per step of each graphs-engine class. Fitted only on the published sources marked ``fit`` (:attr:`stage5.published.Source.split`): :data:`FITTED_ON`.
Every accuracy the course reports is measured on sources the fit did not see: leave-one-source-out (each fit
source scored by a refit without it) and the ``held_out`` sources (:func:`stage5.validate.fit_report`). Sources
added after :data:`FIT_DATE` are ``held_out`` until the next fit, which names the sources that joined.

The objective (:func:`stage5.validate.fit_constants`): minimise the source-balanced mean of
|log(measured / estimate)| over the fit sources' rows (each source weighs alike, whatever its row count),
by coordinate descent over fixed grids (:data:`stage5.validate.FIT_GRIDS`), starting from the priors in
:mod:`stage5.cost` and taking the first minimum in grid order: deterministic.

Physical constants (peaks, bandwidths, capacities) are not fitted: they cite datasheets in
:mod:`stage5.hardware`, and the floor uses nothing else.
"""

FIT_DATE = "2026-12-05"
FITTED_ON = ("dstack-mi300x", "ft-530b", "gpt-fast", "lmdeploy-a100", "nim", "tinychat-fp16")
JOINED = ()  # sources that joined the fit set at this fit (none: the first fit with a split)
# (qwen-hf, qwen-vllm, trtllm-h200-0.5, trtllm-h200-0.7a, gpt-fast-quant and mlc-llm were added after this fit: not
# fitted on until the next one.)

# Achieved share of the datasheet's memory bandwidth, by GPU family (stage5.cost.GPU_FAMILY).
BANDWIDTH_FRACTION = {"ada": 0.70, "ampere": 0.66, "cdna3": 0.37, "hopper": 0.59}
# Multiplier on the benchmark GEMM efficiency (stage5.cost.gemm_efficiency), by GPU family (capped at peak).
GEMM_SCALE = {"ada": 1.25, "ampere": 1.12, "cdna3": 0.17, "hopper": 0.83}
# Multiplier on the all-reduce's speed (stage5.cost.allreduce_s divides its time by it), by GPU family.
ALLREDUCE_SCALE = {"ampere": 0.36, "cdna3": 1.15, "hopper": 0.50}
# Host time to launch one kernel from Python (eager engines), seconds.
LAUNCH_S = 8e-06
# Fixed time per engine step the GPU waits for (scheduling, sampling, output), seconds, by step class.
STEP_S = {"cpp-runtime": 0.0005, "python-graphs": 0.0004}
