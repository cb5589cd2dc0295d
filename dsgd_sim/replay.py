"""Convergence replay: a simulated schedule drives real SGD, giving loss against simulated time.

The simulator knows, for every update, when it lands and which weights its gradient was computed
on; it does not know what that does to training. The replay finds out on a small task: logistic
regression on a seeded synthetic data set (numpy, a fraction of a second). Each simulated update
becomes one real SGD step:

* **sync** (and K-sync): update k averages the gradients of G minibatches (G = R, or K), all
  computed on the current weights w_k:  w_{k+1} = w_k − η · mean of G gradients at w_k.
* **async**: update u applies one minibatch gradient computed on the weights the worker held,
  version u − s_u (s_u its simulated staleness):  w_{u+1} = w_u − η_u · ∇f(w_{u−s_u}), with
  η_u = η, or η / (1 + s_u) with the staleness-aware rate of Zhang et al. (IJCAI 2016),
  the rule the real trainer's ``--staleness-lr inverse`` applies.

Minibatches are drawn from one seeded stream in update order, so one-worker async and one-replica
sync take exactly the same steps. The loss is the mean logistic loss over the whole data set,
evaluated at about ``points`` updates and paired with the simulated time each update landed:
the error–runtime trade-off of Dutta et al. (AISTATS 2018).

The task (``ReplayConfig``): ``samples`` points in ``features`` dimensions, feature scales falling
from 1 to 0.1 (an ill-conditioned problem, as real ones are), labels from a random teacher with
``label_noise`` of them flipped. The default rate η = 2 is half the fastest one worker tolerates
(η ≈ 4, where stale gradients from 16 workers already make plain async SGD diverge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReplayConfig:
    """The synthetic task and the SGD settings of a replay."""

    features: int = 32
    samples: int = 4096
    batch_size: int = 8  # samples per gradient (one worker's minibatch)
    lr: float = 2.0  # η
    staleness_lr: bool = False  # async: η / (1 + staleness) (Zhang et al. 2016)
    label_noise: float = 0.05  # fraction of labels flipped
    seed: int = 0
    points: int = 200  # loss evaluations per curve

    def __post_init__(self):
        for name in ("features", "samples", "batch_size", "points"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"replay {name} must be an integer >= 1, got {value!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"replay learning rate must be positive, got {self.lr!r}")
        if not 0 <= self.label_noise < 0.5:
            raise ValueError(f"label noise must be in [0, 0.5), got {self.label_noise!r}")


class LogisticTask:
    """Binary logistic regression on seeded synthetic data; labels are ±1."""

    def __init__(self, config: ReplayConfig):
        rng = np.random.default_rng([config.seed, 11])
        scales = np.logspace(0, -1, config.features)
        self.x = rng.standard_normal((config.samples, config.features)) * scales
        teacher = rng.standard_normal(config.features) / scales
        labels = np.sign(self.x @ teacher)
        labels[labels == 0] = 1.0
        flip = rng.random(config.samples) < config.label_noise
        self.y = np.where(flip, -labels, labels)
        self.features = config.features

    def loss(self, w: np.ndarray) -> float:
        """Mean logistic loss log(1 + exp(−y·xᵀw)) over the whole data set."""
        return float(np.mean(np.logaddexp(0.0, -self.y * (self.x @ w))))

    def gradient(self, w: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Gradient of the mean loss over ``rows`` at ``w``."""
        x, y = self.x[rows], self.y[rows]
        weight = -y / (1.0 + np.exp(np.clip(y * (x @ w), -500, 500)))
        return x.T @ weight / len(rows)


@dataclass
class Curve:
    """Loss after selected updates (update 0: the initial weights, at time 0)."""

    mode: str
    updates: np.ndarray
    time_s: np.ndarray
    loss: np.ndarray

    def points(self) -> list[dict]:
        """The JSON form: ``[{"time_s": ..., "loss": ..., "updates": ...}, ...]``."""
        return [{"time_s": float(t), "loss": float(v), "updates": int(u)}
                for u, t, v in zip(self.updates, self.time_s, self.loss)]

    def _first_below(self, target: float) -> int | None:
        below = np.flatnonzero(self.loss <= target)
        return int(below[0]) if len(below) else None

    def updates_to_reach(self, target: float) -> int | None:
        """First evaluated update count whose loss is at most ``target`` (None: never)."""
        i = self._first_below(target)
        return None if i is None else int(self.updates[i])

    def time_to_reach(self, target: float) -> float | None:
        """Simulated seconds until the loss is at most ``target`` (None: never)."""
        i = self._first_below(target)
        return None if i is None else float(self.time_s[i])


def _eval_at(total: int, points: int) -> set[int]:
    return set(np.unique(np.linspace(0, total, min(points, total + 1)).round().astype(int)))


def replay(task: LogisticTask, config: ReplayConfig, mode: str, update_times_s: np.ndarray,
           gradients_per_update: int = 1, staleness: np.ndarray | None = None,
           eval_every: int | None = None) -> Curve:
    """Run one real SGD step per simulated update; ``staleness`` None means every gradient is
    computed on the current weights (sync). ``eval_every`` overrides ``config.points``."""
    total = len(update_times_s)
    stale = np.zeros(total, dtype=np.int64) if staleness is None else np.asarray(staleness)
    depth = int(stale.max(initial=0)) + 1
    history = np.zeros((depth, task.features))  # w_u lives in row u % depth
    rng = np.random.default_rng([config.seed, 7])
    evaluate = (set(range(0, total + 1, eval_every)) | {total} if eval_every
                else _eval_at(total, config.points))
    rows_per_update = gradients_per_update * config.batch_size
    w = history[0].copy()
    updates, times, losses = [0], [0.0], [task.loss(w)]
    for u in range(total):
        s = min(int(stale[u]), u)
        rows = rng.integers(0, len(task.y), rows_per_update)
        grad = task.gradient(history[(u - s) % depth] if s else w, rows)
        lr = config.lr / (1 + s) if config.staleness_lr else config.lr
        with np.errstate(over="ignore", invalid="ignore"):
            w = w - lr * grad
        history[(u + 1) % depth] = w
        if u + 1 in evaluate:
            updates.append(u + 1)
            times.append(float(update_times_s[u]))
            with np.errstate(over="ignore", invalid="ignore"):
                losses.append(task.loss(w))
        if not (np.isfinite(w).all() and math.isfinite(losses[-1])):
            raise ValueError(f"--lr {config.lr:g}: the {mode} replay diverged after {u + 1} "
                             f"update{'s' if u else ''} (its weights or loss overflowed); use a smaller --lr")
    return Curve(mode, np.asarray(updates), np.asarray(times), np.asarray(losses))
