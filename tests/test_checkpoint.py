"""real/checkpoint.py: atomic writes, newest complete checkpoint wins, damaged ones never load."""

import os

import torch

from real.checkpoint import (TEMP_PREFIX, checkpoint_path, list_checkpoints,
                             load_latest_checkpoint, save_checkpoint)


def state(step):
    return {"step": step, "model": {"w": torch.full((3,), float(step))}}


def test_saved_checkpoint_loads_back_identically(tmp_path):
    save_checkpoint(str(tmp_path), 7, state(7))
    step, loaded = load_latest_checkpoint(str(tmp_path))
    assert step == 7 and torch.equal(loaded["model"]["w"], torch.full((3,), 7.0))


def test_newest_checkpoint_is_loaded_and_old_ones_pruned(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(str(tmp_path), step, state(step), keep=2)
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [30, 20]
    assert load_latest_checkpoint(str(tmp_path))[0] == 30


def test_half_written_temporary_file_is_never_loaded(tmp_path):
    save_checkpoint(str(tmp_path), 10, state(10))
    full = open(checkpoint_path(str(tmp_path), 10), "rb").read()
    # what a writer killed mid-write leaves behind: a partial file under a temporary name
    (tmp_path / f"{TEMP_PREFIX}abc").write_bytes(full[: len(full) // 2])
    assert load_latest_checkpoint(str(tmp_path))[0] == 10


def test_truncated_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys):
    save_checkpoint(str(tmp_path), 10, state(10))
    save_checkpoint(str(tmp_path), 20, state(20))
    newest = checkpoint_path(str(tmp_path), 20)
    data = open(newest, "rb").read()
    open(newest, "wb").write(data[: len(data) // 2])
    step, loaded = load_latest_checkpoint(str(tmp_path))
    assert step == 10 and loaded["model"]["w"][0] == 10.0
    assert "skipping unreadable checkpoint" in capsys.readouterr().err
    # set aside, kept to look at: pruning after the next save keeps the good one of step 10
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000010.pt", "ckpt-000000020.pt.unreadable"]
    save_checkpoint(str(tmp_path), 30, state(30), keep=2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000010.pt", "ckpt-000000020.pt.unreadable",
                                            "ckpt-000000030.pt"]


def test_checkpoint_whose_content_disagrees_with_its_name_is_skipped(tmp_path):
    save_checkpoint(str(tmp_path), 10, state(10))
    os.replace(checkpoint_path(str(tmp_path), 10), checkpoint_path(str(tmp_path), 50))
    assert load_latest_checkpoint(str(tmp_path)) is None


def test_no_checkpoint_directory_means_a_fresh_start(tmp_path):
    assert load_latest_checkpoint(str(tmp_path / "absent")) is None


def test_writer_leaves_no_temporary_files(tmp_path):
    (tmp_path / f"{TEMP_PREFIX}stale").write_bytes(b"partial")
    save_checkpoint(str(tmp_path), 1, state(1))
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000001.pt"]


class Rank:
    """A rank of a job of two, before the collectives: it keeps each header rank 0 broadcasts
    (rank 0), or receives ``sent`` (rank 1)."""
    world_size, device = 2, torch.device("cpu")

    def __init__(self, rank, sent=None):
        self.rank, self.sent, self.headers = rank, sent, []

    def broadcast(self, tensor, src=0):
        if self.rank != src:
            tensor.copy_(self.sent)
        self.headers.append(tensor.tolist())


def restore_with_unreadable_checkpoints(comm, tmp_path, monkeypatch):
    import real.replica_state as replica_state

    def unreadable(directory):
        raise PermissionError(13, "Permission denied", directory)

    monkeypatch.setattr(replica_state, "load_latest_checkpoint", unreadable)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    replica_state.restore_or_start(comm, str(tmp_path), model, optimizer, {"seed": 0})


def test_a_checkpoint_folder_rank_0_cannot_read_is_said_to_every_rank(tmp_path, monkeypatch):
    # rank 0 once left the job on such an error before telling the others, who waited out
    # their --timeout
    import pytest
    from real.replica_state import RestoreError

    rank_0 = Rank(0)
    with pytest.raises(RestoreError, match="cannot read the checkpoints in"):
        restore_with_unreadable_checkpoints(rank_0, tmp_path, monkeypatch)
    # the header it broadcast first: step 0, no checkpoint, refused, not the same world
    assert rank_0.headers == [[0, 0, 1, 0]]
    rank_1 = Rank(1, sent=torch.tensor(rank_0.headers[0]))
    with pytest.raises(RestoreError, match="rank 0 cannot resume"):
        restore_with_unreadable_checkpoints(rank_1, tmp_path, monkeypatch)
