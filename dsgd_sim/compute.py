"""Per-iteration compute time of one replica, as a probability distribution.

``--compute`` takes one of::

    80ms                      constant
    exp:80ms                  exponential with mean 80 ms
    shifted-exp:60ms,20ms     60 ms shift plus an exponential of mean 20 ms
    normal:80ms,5ms           normal (mean, standard deviation of at most a third of it)
    lognormal:80ms,0.2        lognormal with mean 80 ms and log-space sigma 0.2

A profile written by the real trainer gives an ``empirical`` distribution (resampling of measured
times). Every distribution draws from a numpy ``Generator`` handed in by the simulation, so a run
is reproducible from its seed. Adding a distribution means one class and one line in ``PARSERS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .units import format_time, parse_time

MAX_TIME_S = 1e6  # beyond 11 days is a typo; far beyond overflows time.sleep and the simulator
MIN_MEAN_S = 1e-9  # a mean step under a nanosecond is a typo; far under, the figures divide to NaN
MAX_SIGMA = 10.0  # lognormal: at sigma 10 the median is already e^-50 of the mean


class ComputeModel:
    """A distribution of compute seconds. Subclasses set ``mean_s`` and implement ``sample``."""

    mean_s: float

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(ComputeModel):
    mean_s: float

    def sample(self, rng, size):
        return np.full(size, self.mean_s)

    def describe(self):
        return f"{format_time(self.mean_s)} (constant)"


@dataclass(frozen=True)
class Exponential(ComputeModel):
    mean_s: float

    def sample(self, rng, size):
        return rng.exponential(self.mean_s, size)

    def describe(self):
        return f"exponential, mean {format_time(self.mean_s)}"


@dataclass(frozen=True)
class ShiftedExponential(ComputeModel):
    shift_s: float
    exp_mean_s: float

    @property
    def mean_s(self):
        return self.shift_s + self.exp_mean_s

    def sample(self, rng, size):
        return self.shift_s + rng.exponential(self.exp_mean_s, size)

    def describe(self):
        return f"{format_time(self.shift_s)} + exponential of mean {format_time(self.exp_mean_s)}"


@dataclass(frozen=True)
class Normal(ComputeModel):
    """Normal compute times; the spread is at most a third of the mean, so that a negative
    draw (clipped to 0) is rarer than 0.14% and ``mean_s`` is the mean within 0.01%."""

    mean_s: float
    std_s: float

    def __post_init__(self):
        if not 0 <= self.std_s <= self.mean_s / 3:
            raise ValueError(f"a normal compute time's standard deviation must be from 0 to a "
                             f"third of its mean (a compute time is never negative; lognormal "
                             f"or shifted-exp spread wider), got mean {format_time(self.mean_s)}, "
                             f"sd {format_time(self.std_s)}")

    def sample(self, rng, size):
        return np.maximum(rng.normal(self.mean_s, self.std_s, size), 0.0)

    def describe(self):
        return f"normal, mean {format_time(self.mean_s)}, sd {format_time(self.std_s)}"


@dataclass(frozen=True)
class LogNormal(ComputeModel):
    mean_s: float
    sigma: float

    def sample(self, rng, size):
        mu = math.log(self.mean_s) - self.sigma**2 / 2  # so that E[X] = mean_s
        return rng.lognormal(mu, self.sigma, size)

    def describe(self):
        return f"lognormal, mean {format_time(self.mean_s)}, sigma {self.sigma:g}"


@dataclass(frozen=True)
class Empirical(ComputeModel):
    """Resamples measured compute times (seconds) with replacement."""

    samples_s: tuple[float, ...]

    @property
    def mean_s(self):
        return float(np.mean(self.samples_s))

    def sample(self, rng, size):
        return rng.choice(np.asarray(self.samples_s), size)

    def describe(self):
        return f"empirical, {len(self.samples_s)} samples, mean {format_time(self.mean_s)}"


def _times(args: list[str], count: int, spec: str) -> list[float]:
    if len(args) != count:
        raise ValueError(f"compute {spec!r} takes {count} value(s), got {len(args)}")
    times = [parse_time(a) for a in args]
    if max(times) > MAX_TIME_S:
        raise ValueError(f"compute {spec!r}: times must be at most {MAX_TIME_S:g} s")
    return times


def _parse_lognormal(args: list[str], spec: str) -> LogNormal:
    if len(args) != 2:
        raise ValueError(f"compute {spec!r} takes a mean time and a sigma, e.g. lognormal:80ms,0.2")
    try:
        sigma = float(args[1])
    except ValueError:
        raise ValueError(f"compute {spec!r}: sigma {args[1]!r} is not a number") from None
    if not (math.isfinite(sigma) and 0 <= sigma <= MAX_SIGMA):
        raise ValueError(f"compute {spec!r}: sigma must be a number from 0 to {MAX_SIGMA:g}")
    return LogNormal(*_times(args[:1], 1, spec), sigma)


def _parse_normal(args: list[str], spec: str) -> Normal:
    times = _times(args, 2, spec)
    try:
        return Normal(*times)
    except ValueError as error:
        raise ValueError(f"compute {spec!r}: {error}") from None


PARSERS = {
    "const": lambda a, s: Constant(*_times(a, 1, s)),
    "exp": lambda a, s: Exponential(*_times(a, 1, s)),
    "shifted-exp": lambda a, s: ShiftedExponential(*_times(a, 2, s)),
    "normal": _parse_normal,
    "lognormal": _parse_lognormal,
}


def parse_compute(spec: str) -> ComputeModel:
    """Parse a ``--compute`` value (see the module docstring); ``ValueError`` names the bad text."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty compute time: {spec!r}")
    kind, sep, rest = spec.strip().partition(":")
    if not sep:
        kind, rest = "const", spec.strip()
    if kind not in PARSERS:
        raise ValueError(f"unknown compute distribution {kind!r} in {spec!r} "
                         f"(known: {', '.join(PARSERS)})")
    model = PARSERS[kind]([a.strip() for a in rest.split(",")], spec)
    if model.mean_s <= 0:
        raise ValueError(f"compute {spec!r} must have a positive mean")
    if model.mean_s < MIN_MEAN_S:
        raise ValueError(f"compute {spec!r} is too short (mean at least {MIN_MEAN_S:g} s)")
    return model
