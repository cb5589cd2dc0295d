"""real/data.py: the synthetic teacher task, the MNIST IDX loader and per-rank shards."""

import gzip
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from real.data import (DataError, DatasetSpec, ShardedBatches, _bilinear_upsampling, load_dataset,
                       mnist_dataset, read_idx, synthetic_dataset)


def write_idx(path, array: np.ndarray, gz: bool = False) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as handle:
        handle.write(payload)


def write_mnist(directory, count=12, gz=False, labels=None):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    labels = np.arange(count) % 10 if labels is None else labels
    suffix = ".gz" if gz else ""
    write_idx(directory / f"train-images-idx3-ubyte{suffix}", images, gz)
    write_idx(directory / f"train-labels-idx1-ubyte{suffix}", np.asarray(labels), gz)
    return images, labels


def test_synthetic_dataset_is_a_function_of_the_seed():
    a, b, c = synthetic_dataset(64, 3), synthetic_dataset(64, 3), synthetic_dataset(64, 4)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)


def test_smaller_synthetic_dataset_is_a_prefix_of_a_larger_one():
    small, large = synthetic_dataset(50, 2), synthetic_dataset(300, 2)
    assert np.array_equal(small.images, large.images[:50])
    assert np.array_equal(small.labels, large.labels[:50])  # the same teacher


def test_synthetic_pixels_are_unit_variance_and_correlated_with_neighbours():
    images = synthetic_dataset(4000, 0).images.reshape(-1, 28, 28)
    assert np.allclose(images.std(axis=0), 1, atol=0.06) and abs(images.mean()) < 0.01
    right_neighbour = np.mean(images[:, :, :-1] * images[:, :, 1:])
    assert right_neighbour > 0.8  # smooth: what LeNet's convolutions and pooling can read


def test_bilinear_upsampling_matrix_matches_torch_interpolate():
    field = torch.randn(2, 1, 7, 7)
    up = _bilinear_upsampling(7, 28)
    expected = F.interpolate(field, size=(28, 28), mode="bilinear", align_corners=False)
    assert np.allclose(up @ field[:, 0].numpy() @ up.T, expected[:, 0].numpy(), atol=1e-5)


def test_synthetic_dataset_too_large_for_memory_is_a_value_error():
    with pytest.raises(ValueError, match="10000000000000 synthetic samples .* do not fit"):
        synthetic_dataset(10**13, 0)


def test_synthetic_labels_use_several_classes():
    labels = synthetic_dataset(2000, 0).labels
    counts = np.bincount(labels, minlength=10)
    assert (counts > 0).sum() >= 5 and counts.max() < 0.5 * len(labels)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_loader_reads_images_and_labels_written_as_idx(tmp_path, gz):
    images, labels = write_mnist(tmp_path, gz=gz)
    data = mnist_dataset(str(tmp_path))
    x, y = data.batch(np.array([5, 0, 11]))
    assert x.shape == (3, 1, 28, 28) and y.tolist() == [labels[5], labels[0], labels[11]]
    expected = (images[5].astype(np.float32) / 255 - 0.1307) / 0.3081
    assert np.allclose(x[0, 0].numpy(), expected, atol=1e-5)


def test_missing_mnist_directory_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        mnist_dataset(str(tmp_path / "nowhere"))


def test_mnist_directory_without_label_file_names_it(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        mnist_dataset(str(tmp_path))


def test_truncated_idx_file_is_a_data_error(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match="header"):
        read_idx(str(path))


def test_file_that_is_not_idx_is_a_data_error(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"<html>not found</html>")
    with pytest.raises(DataError, match="not an IDX"):
        mnist_dataset(str(tmp_path))


def test_label_out_of_range_is_a_data_error(tmp_path):
    write_mnist(tmp_path, labels=np.full(12, 10))
    with pytest.raises(DataError, match="labels"):
        mnist_dataset(str(tmp_path))


def test_image_and_label_counts_must_agree(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5))
    with pytest.raises(DataError, match="12 images"):
        mnist_dataset(str(tmp_path))


def test_dataset_spec_parses_synthetic_and_mnist_dir():
    assert DatasetSpec.parse("synthetic").kind == "synthetic"
    assert DatasetSpec.parse("mnist:/data/mnist").path == "/data/mnist"
    for bad in ("mnist", "mnist:", "cifar"):
        with pytest.raises(ValueError):
            DatasetSpec.parse(bad)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_rank_shards_together_are_the_one_process_global_batch(world_size):
    batch = 5
    ranks = [ShardedBatches(100, batch, world_size, r, seed=7) for r in range(world_size)]
    single = ShardedBatches(100, batch * world_size, 1, 0, seed=7)
    for step in (0, 1, single.steps_per_epoch, 3 * single.steps_per_epoch + 1):
        shards = [s.indices(step) for s in ranks]
        assert all(len(s) == batch for s in shards)
        assert len(set(np.concatenate(shards))) == batch * world_size  # disjoint
        assert np.array_equal(np.concatenate(shards), single.indices(step))


def test_each_epoch_visits_samples_in_a_new_order():
    batches = ShardedBatches(40, 10, 1, 0, seed=0)
    epoch0 = np.concatenate([batches.indices(s) for s in range(4)])
    epoch1 = np.concatenate([batches.indices(s) for s in range(4, 8)])
    assert sorted(epoch0) == list(range(40)) == sorted(epoch1)
    assert not np.array_equal(epoch0, epoch1)
    assert batches.position(5) == {"epoch": 1, "batch_in_epoch": 1, "global_batch_size": 10}


@pytest.mark.parametrize("samples, batch, world, message", [
    (100, 0, 2, "batch size"), (3, 1, 4, "4 ranks but only 3 samples"),
    (10, 4, 3, "exceeds the 10 samples")])
def test_batches_reject_what_cannot_fill_a_global_batch(samples, batch, world, message):
    with pytest.raises(ValueError, match=message):
        ShardedBatches(samples, batch, world, 0, seed=0)


def test_load_dataset_dispatches_on_the_spec(tmp_path):
    write_mnist(tmp_path)
    assert len(load_dataset(DatasetSpec.parse(f"mnist:{tmp_path}"), 999, 0)) == 12
    assert len(load_dataset(DatasetSpec.parse("synthetic"), 33, 0)) == 33
