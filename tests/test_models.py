"""real/models.py: the model table, shapes, sizes and seeded initialisation."""

import pytest
import torch

from real.models import MODELS, build_model, grad_bytes


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_maps_mnist_shaped_images_to_ten_logits(name):
    assert build_model(name, 0)(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_mlp_large_has_about_25_MB_of_fp32_gradients():
    assert 24.5e6 < grad_bytes(build_model("mlp-large", 0)) < 25.5e6


def test_initial_weights_depend_on_the_seed_only():
    a, b, c = (build_model("lenet", s) for s in (1, 1, 2))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_building_a_model_leaves_the_global_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    build_model("mlp", 0)
    assert torch.equal(torch.rand(1), expected)


def test_unknown_model_is_named_in_the_error():
    with pytest.raises(ValueError, match="'resnet'"):
        build_model("resnet", 0)
