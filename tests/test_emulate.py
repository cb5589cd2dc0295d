"""real/emulate.py: an emulated step lasts what was asked, however late each sleep wakes."""

import pytest
import torch
from torch import nn

from real import emulate
from real.emulate import EmulatedModel

LATE_S = 0.001  # how late the fake clock's every sleep wakes


class LateClock:
    """Stands in for the ``time`` module: the clock moves only by sleeping, and every sleep
    wakes ``LATE_S`` after it should."""

    def __init__(self):
        self.now_s = 0.0
        self.sleeps = 0

    def perf_counter(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now_s += seconds + LATE_S


@pytest.fixture
def clock(monkeypatch):
    fake = LateClock()
    monkeypatch.setattr(emulate, "time", fake)
    return fake


def test_a_step_ends_one_late_wake_up_after_what_was_asked(clock):
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3), nn.Linear(3, 2))  # 6 parameters
    emulated = EmulatedModel(model, step_s=0.030)
    loss = emulated(torch.zeros(1))
    assert clock.now_s == pytest.approx(0.010 + LATE_S)
    loss.backward()
    assert clock.sleeps == 7  # forward, then one per parameter
    # sleeping for lengths would have ended 7 late wake-ups after the 30 ms
    assert clock.now_s == pytest.approx(0.030 + LATE_S)


def test_each_gradient_is_ready_when_the_forward_and_its_share_of_backward_have_passed(clock):
    model = nn.Sequential(nn.Linear(10, 10, bias=False), nn.Linear(10, 30, bias=False))
    ready = []
    for p in model.parameters():  # 100 and 300 weights: a quarter and three quarters
        p.register_post_accumulate_grad_hook(lambda _p: ready.append(clock.now_s))
    emulated = EmulatedModel(model, step_s=0.012)  # forward 4 ms, backward 8 ms
    emulated(torch.zeros(1)).backward()
    # the second layer's gradient first, after 6 ms of backward; the first's at the end
    assert ready == pytest.approx([0.010 + LATE_S, 0.012 + LATE_S])
