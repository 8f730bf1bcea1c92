"""Sizing a JupyterHub for the course: memory per learner and the CPU a class needs to autograde.

The inputs are measured, not assumed: hub/measure_class.py grades copies of the solved ex02 notebook with the
course's nbgrader workflow and writes data/class_capacity.json (CPU seconds per submission, peak memory of the
kernel). book/instructors.ipynb glues the figures below into its prose.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from stage5.hardware import GiB

MEASUREMENT_FILE = Path(__file__).resolve().parent / "data" / "class_capacity.json"
MiB = 2**20
# Headroom over the measured peak of one kernel: a learner also runs the JupyterLab server and may keep a
# second notebook open (a policy choice, not a measurement; the page says so).
MEMORY_HEADROOM = 2.0


@dataclass(frozen=True)
class GradingMeasurement:
    """What hub/measure_class.py recorded for one assignment on one machine."""

    assignment: str
    submissions: int
    cpu_s_per_submission: float
    wall_s_per_submission: float
    kernel_peak_rss_mib: float
    cpus: int
    load_average: float
    measured_utc: str

    @property
    def loaded(self) -> bool:
        """True when other work was running (load above the core count would make wall time misleading)."""
        return self.load_average >= 0.5 * self.cpus


def load_measurement(path: str | Path = MEASUREMENT_FILE) -> GradingMeasurement:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `.venv/bin/python hub/measure_class.py` to measure")
    raw = json.loads(path.read_text())
    return GradingMeasurement(
        assignment=raw["assignment"], submissions=int(raw["submissions"]),
        cpu_s_per_submission=float(raw["cpu_s_per_submission"]),
        wall_s_per_submission=float(raw["wall_s_per_submission"]),
        kernel_peak_rss_mib=float(raw["kernel_peak_rss_mib"]), cpus=int(raw["machine"]["cpus"]),
        load_average=float(raw["machine"]["load_average_1min_at_start"]), measured_utc=raw["measured_utc"])


def cores_to_autograde(learners: int, m: GradingMeasurement, hours: float = 1.0) -> int:
    """Cores that autograde ``learners`` submissions within ``hours``, at the measured CPU time each."""
    if learners < 1 or hours <= 0:
        raise ValueError(f"need at least one learner and a positive time, got {learners} learners, {hours} h")
    return max(1, math.ceil(learners * m.cpu_s_per_submission / (hours * 3600)))


def memory_per_learner_gib(m: GradingMeasurement, headroom: float = MEMORY_HEADROOM) -> float:
    """Memory to guarantee each learner (binary GiB): the kernel's measured peak times the headroom,
    rounded up to a quarter GiB."""
    return math.ceil(m.kernel_peak_rss_mib * MiB * headroom / GiB * 4) / 4
