"""real/grad_sync.py and real/emulate.py on one process: bucket layout and hook order."""

import torch
from torch import nn

from real.emulate import EmulatedModel
from real.grad_sync import MiB, assign_buckets


def params_of_bytes(*sizes):
    return [nn.Parameter(torch.zeros(size // 4)) for size in sizes]


def test_buckets_fill_in_reverse_parameter_order_with_a_small_first_bucket():
    params = params_of_bytes(4 * MiB, 4 * MiB, 2 * MiB, MiB // 2, MiB // 2)
    # reversed: 0.5, 0.5 (reaches 1 MiB: first bucket), 2, 4 (6 MiB >= 5), 4
    assert assign_buckets(params, bucket_bytes=5 * MiB) == [[4, 3], [2, 1], [0]]


def test_a_parameter_larger_than_the_cap_gets_its_own_bucket():
    params = params_of_bytes(8 * MiB, 2 * MiB, 8 * MiB)
    assert assign_buckets(params, bucket_bytes=MiB, first_bucket_bytes=MiB) == [[2], [1], [0]]


def test_one_huge_cap_puts_everything_after_the_first_bucket_together():
    params = params_of_bytes(MiB, MiB, MiB, 4)
    assert assign_buckets(params, bucket_bytes=100 * MiB) == [[3, 2], [1, 0]]


def test_emulated_backward_readies_full_size_gradients_in_reverse_order():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    order = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, name=name: order.append(name))
    EmulatedModel(model, step_s=0.003)(torch.zeros(1)).backward()
    assert order == ["1.bias", "1.weight", "0.bias", "0.weight"]
    assert all(p.grad.shape == p.shape and not p.grad.any() for p in model.parameters())
