"""Seeded synthetic workloads with the shapes GPU clusters show in published traces.

* Arrivals follow a day: a Poisson process whose rate swings around its mean over 24
  hours (busiest in the afternoon, quietest before dawn) and drops on weekends.
* Durations are heavy-tailed: log-normal (most jobs take minutes, a few take days).
* Jobs ask for powers of two: most take one GPU, fewer take 2-8 on one node, and a
  tail of distributed gangs take whole 8-GPU nodes (2-16 pods, the gang is all pods).
* Inference jobs (non-preemptible, half a GPU each, long-running) make a steady share.

The arrival rate is set so that the GPU demand is ``load`` of the cluster's GPUs on
average over the trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from kai._dataclasses import dataclass
from kai.replay.trace import TraceJob

DAY = 86400.0
WEEK = 7 * DAY

# (GPUs per pod, pods, weight): the job sizes and how often they come.
TRAINING_SHAPES: tuple[tuple[float, int, float], ...] = (
    (1, 1, 0.46),
    (2, 1, 0.12),
    (4, 1, 0.10),
    (8, 1, 0.12),
    (8, 2, 0.08),
    (8, 4, 0.06),
    (8, 8, 0.04),
    (8, 16, 0.02),
)


@dataclass
class WorkloadSpec:
    """What to generate; the defaults make a busy week of a 1,000-node cluster."""

    jobs: int = 50_000
    span: float = WEEK  # seconds over which jobs are submitted
    total_gpus: float = 8000.0
    queues: Sequence[str] = ("default",)
    # Relative submission weight per queue (default: equal).
    queue_weights: Sequence[float] | None = None
    load: float = 0.85  # average GPU demand / capacity
    inference_fraction: float = 0.1
    train_class: str = "train"
    inference_class: str = "inference"
    median_duration: float = 1800.0  # seconds
    duration_sigma: float = 1.6  # log-normal shape: 1.6 puts p99 at ~40x the median
    max_duration: float = 3 * DAY
    min_duration: float = 30.0
    diurnal_amplitude: float = 0.5  # rate swings +-50% around its daily mean
    weekend_factor: float = 0.6
    cpu_per_gpu: float = 8000.0  # millicores a training pod asks per GPU
    memory_per_gpu: float = 64e9
    namespace: str = "default"


def generate(spec: WorkloadSpec | None = None, *, seed: int = 0) -> list[TraceJob]:
    """``spec.jobs`` jobs, in submit order; the same seed gives the same trace."""
    spec = spec or WorkloadSpec()
    rng = random.Random(seed)
    shapes = [(g, p) for g, p, _ in TRAINING_SHAPES]
    weights = [w for _, _, w in TRAINING_SHAPES]
    queues = list(spec.queues)
    queue_weights = list(spec.queue_weights or [1.0] * len(queues))

    # Draw every job's shape and duration first: the arrival rate follows from them.
    drafts = []
    for _ in range(spec.jobs):
        queue = rng.choices(queues, queue_weights)[0]
        if rng.random() < spec.inference_fraction:
            gpus, pods, cls, preempt = 0.5, 1, spec.inference_class, "non-preemptible"
            duration = _lognormal(rng, spec.median_duration * 4, spec.duration_sigma / 2, spec)
        else:
            gpus, pods = rng.choices(shapes, weights)[0]
            cls, preempt = spec.train_class, None
            duration = _lognormal(rng, spec.median_duration, spec.duration_sigma, spec)
        drafts.append((queue, gpus, pods, cls, preempt, duration))
    # The submit times: a non-homogeneous Poisson process (thinning) whose expected
    # count over the span is the number of jobs.
    times = _arrivals(rng, spec)
    if spec.load > 0:
        # Stretch durations so that the demand is `load` of the capacity on average;
        # clipping to the bounds moves the demand, so the stretch is refined a few times.
        base = drafts
        stretch = 1.0
        for _ in range(8):
            drafts = [
                (q, g, p, c, pr, min(max(d * stretch, spec.min_duration), spec.max_duration))
                for q, g, p, c, pr, d in base
            ]
            demand = sum(g * p * d for _, g, p, _, _, d in drafts)
            offered = demand / max(spec.total_gpus * spec.span, 1e-9)
            if offered <= 0 or abs(offered / spec.load - 1) < 0.005:
                break
            stretch *= spec.load / offered
    jobs = []
    width = len(str(spec.jobs))
    for i, (t, (queue, gpus, pods, cls, preempt, duration)) in enumerate(zip(times, drafts)):
        per_gpu = max(gpus, 0.125)
        jobs.append(
            TraceJob(
                round(t, 3),
                f"job-{i:0{width}d}",
                queue,
                cls,
                pods,
                pods,
                gpus,
                round(spec.cpu_per_gpu * per_gpu),
                float(round(spec.memory_per_gpu * per_gpu)),
                round(duration, 1),
                preempt,
                spec.namespace,
            )
        )
    return jobs


def _lognormal(rng: random.Random, median: float, sigma: float, spec: WorkloadSpec) -> float:
    value = median * math.exp(rng.gauss(0.0, sigma))
    return min(max(value, spec.min_duration), spec.max_duration)


def rate_factor(t: float, spec: WorkloadSpec) -> float:
    """The arrival rate at ``t`` relative to the mean of a weekday (peak at 15:00)."""
    day = (t % DAY) / DAY
    factor = 1.0 + spec.diurnal_amplitude * math.cos(2 * math.pi * (day - 15 / 24))
    if (t // DAY) % 7 >= 5:
        factor *= spec.weekend_factor
    return factor


def _arrivals(rng: random.Random, spec: WorkloadSpec) -> list[float]:
    """Sorted arrival times of exactly ``spec.jobs`` jobs following :func:`rate_factor`."""
    peak = 1.0 + spec.diurnal_amplitude
    times: list[float] = []
    # Draw candidates uniformly over the span and keep each with probability
    # factor/peak (thinning), until there are enough; sorting gives the process.
    while len(times) < spec.jobs:
        t = rng.random() * spec.span
        if rng.random() * peak <= rate_factor(t, spec):
            times.append(t)
    times.sort()
    return times
