"""All-reduce time against size: the ring, the naive ring and the engine's own, H hosts, one rate.

Every point is one test bed. ``real/allreduce.py`` times every algorithm at every size there, and
``experiments/ring_probe.py`` times ring rounds on the same hosts just before and just after
(``experiments.measure.measure_allreduce``). Each row is predicted from the rate's calibration
with that point's own round table (``NetworkInputs.with_rounds``), as the benchmark makes its
calls: back to back, the algorithms taking turns (``experiments.model.predict_allreduce_stream_s``).
"""

from __future__ import annotations

from .configs import AllReduceConfig
from .model import predict_allreduce_stream_s
from .report import plot_allreduce as plot  # noqa: F401  (the runner draws with ``module.plot``)


def point_rows(point: AllReduceConfig, measured: dict, net) -> list[dict]:
    """One row per measured (algorithm, size) of ``point``, predicted from ``net`` (the rate's
    inputs) with the point's own rounds (``measured["rounds"]``)."""
    net = net.with_rounds(point.hosts, measured["rounds"])
    predicted = {n: predict_allreduce_stream_s(point.algorithms, point.hosts, n, net)
                 for n in sorted({m["bytes"] for m in measured["results"]})}
    return [{"config": f"{m['algorithm']} {m['bytes'] / 1e6:g}MB {point.label}",
             "algorithm": m["algorithm"], "bytes": m["bytes"], "hosts": point.hosts,
             "bandwidth_bps": point.bandwidth_bps,
             "predicted_s": predicted[m["bytes"]][m["algorithm"]], "measured_s": m["time_s"]}
            for m in measured["results"]]


def rows(experiment, net_by_rate: dict, measure_fn) -> tuple[list[dict], dict]:
    """Measure every point (``measure_fn(point)``: ``measure.measure_allreduce``'s record) and
    predict its rows; also the points' round tables, by point label."""
    out, tables = [], {}
    for point in experiment.points:
        measured = measure_fn(point)
        tables[point.label] = measured["rounds"]
        out += point_rows(point, measured, net_by_rate[point.bandwidth_bps])
    return out, tables


def repredict(result: dict, net_by_rate: dict) -> list[dict]:
    """The rows of a stored run (``allreduce.json``) predicted again from ``net_by_rate`` (its
    own calibration) and the round tables stored with it: same measurements, today's model."""
    out = []
    for stored in result["points"]:
        point = AllReduceConfig(**{**{k: v for k, v in stored.items() if k != "kind"},
                                   "sizes_bytes": tuple(stored["sizes_bytes"]),
                                   "algorithms": tuple(stored["algorithms"])})
        if point.bandwidth_bps not in net_by_rate:
            raise ValueError(f"no calibration at {point.bandwidth_bps / 1e6:g} Mbit/s")
        if point.label not in result["rounds"]:
            raise ValueError(f"the stored run has no round table for {point.label}")
        mine = [{"algorithm": r["algorithm"], "bytes": r["bytes"], "time_s": r["measured_s"]}
                for r in result["rows"]
                if r["hosts"] == point.hosts and r["bandwidth_bps"] == point.bandwidth_bps]
        if not mine:
            raise ValueError(f"the stored run has no rows for {point.label}")
        for m in mine:
            if m["algorithm"] not in point.algorithms or m["bytes"] not in point.sizes_bytes:
                raise ValueError(f"the stored row {m['algorithm']} {m['bytes']} B is not one "
                                 f"of {point.label}'s algorithms and sizes")
        out += point_rows(point, {"rounds": result["rounds"][point.label], "results": mine},
                          net_by_rate[point.bandwidth_bps])
    return out
