"""stage5: the cost model, simulator and toy serving engine behind the course *Stage 5: Inference*.

Every number the book prints is computed here (see :mod:`stage5.figures`).

Who may import whom, bottom floor first: a module imports from its own floor and the floors below it, never from
one above, and never in a circle (``tests/test_imports.py`` reads this list and checks every import in the
package, those inside functions included):

1. ``inputs names hardware models calibration published fitted`` - the doors, the registries, the calibration record;
2. ``cost quantization routing levers scaling long_context drafters quant_numerics step_model deploy fleet
   kv_tiers expert_parallel disagg`` - the cost model (one replica, and the fleet's routing, KV tiers, experts and
   disaggregated pools);
3. ``svg_chart plots claims validate fit figures simulator_plots simulator bench_simulator cli`` - the book's
   figures and the simulator (its plots draw what it computes and never call it);
4. ``engine/`` - the toy engine (torch): it knows nothing of calibrating, exercises or grading;
5. ``calibrate`` - measures this machine by running the engine's hollow step and its roofline toy;
6. ``engine/bench*`` - the benchmarks: they time the engine and set it beside what the calibration predicts;
7. ``loop_kit`` - what a serving loop written outside the engine is built from and counted by;
8. ``grading/`` - the grader's probes and checks (in the order :mod:`stage5.grading` lists);
9. ``exercise_support`` - what exercise 2's notebook imports: the engine's parts, the loop kit, ex02's checks;
10. ``__main__`` - ``python -m stage5``, which dispatches to all of them.
"""

__version__ = "0.1.0"
