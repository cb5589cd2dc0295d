"""The single-process runs kept with a run's results (``experiments/single_process.py``): each
taken once per kind and key, the ones asked for listed as JSON, loaded back so that a stored run
is priced again without taking them again, and bad records refused with their index."""

import json

import pytest

from experiments import ps_model
from experiments.single_process import RUNS, SingleProcessRuns


@pytest.fixture(autouse=True)
def fresh_runs():
    RUNS.clear()
    yield
    RUNS.clear()


def test_a_run_is_taken_once_per_kind_and_key_and_listed_as_asked_since_start():
    runs, taken = SingleProcessRuns(), []

    def measure(value):
        return lambda: taken.append(value) or {"figure": value}
    assert runs.take("profile", ("mlp", 32), measure(1)) == {"figure": 1}
    assert runs.take("profile", ("mlp", 32), measure(2)) == {"figure": 1}  # kept: not taken again
    assert runs.take("paused_step", ("mlp", 32, 7), measure(3)) == {"figure": 3}
    assert taken == [1, 3] and runs.taken == [("profile", ("mlp", 32)),
                                              ("paused_step", ("mlp", 32, 7))]
    runs.start()  # a new experiment: only what it asks for is its own
    runs.take("paused_step", ("mlp", 32, 7), measure(4))
    assert taken == [1, 3] and runs.taken == [("paused_step", ("mlp", 32, 7))]  # this machine's
    assert runs.used() == [{"kind": "paused_step", "key": ["mlp", 32, 7], "value": {"figure": 3}}]
    with pytest.raises(ValueError, match="unknown single-process run 'dream'"):
        runs.take("dream", (), measure(5))


def test_runs_loaded_back_from_their_json_are_not_taken_again():
    first = SingleProcessRuns()
    first.take("emulated_step", ("mlp", 32, 0.05, False), lambda: {"compute_time_s": 0.0508})
    first.take("sleeps", (0.05,), lambda: (0.0501, 0.0503))
    stored = json.loads(json.dumps(first.used()))
    again = SingleProcessRuns()
    assert again.restore(stored) == 2

    def must_not_run():
        raise AssertionError("taken again")
    assert again.take("emulated_step", ("mlp", 32, 0.05, False), must_not_run) == \
        {"compute_time_s": 0.0508}
    assert again.take("sleeps", (0.05,), must_not_run) == (0.0501, 0.0503)
    assert again.taken == [] and again.used() == first.used()


def test_a_result_restored_is_priced_from_its_own_runs_and_this_machines_alone():
    runs, taken = SingleProcessRuns(), []
    runs.take("profile", ("mlp", 32, 30), lambda: taken.append("here") or {"of": "here"})
    mine = [{"kind": "profile", "key": ["mlp", 32, 30], "value": {"of": "mine"}},
            {"kind": "sleeps", "key": [0.05], "value": [0.0502]}]
    assert runs.restore(mine) == 2
    assert runs.take("profile", ("mlp", 32, 30), lambda: pytest.fail("taken")) == {"of": "mine"}
    assert runs.taken == []
    # another result, stored before the runs were kept: none of the first one's, this
    # machine's instead, taken once in all
    assert runs.restore([]) == 0
    assert runs.take("profile", ("mlp", 32, 30), lambda: taken.append("again")) == {"of": "here"}
    assert taken == ["here"] and runs.taken == [("profile", ("mlp", 32, 30))]
    # kept with it from then on, after what it kept before (marked), which it keeps even
    # where its prices no longer ask for it
    runs.restore(mine[1:])
    runs.take("profile", ("mlp", 32, 30), dict)
    assert runs.kept_with(mine[1:], "--repredict") == [
        mine[1], {"kind": "profile", "key": ["mlp", 32, 30], "value": {"of": "here"},
                  "taken_by": "--repredict"}]
    with pytest.raises(ValueError, match="single_process"):
        runs.restore("none")
    assert runs.take("sleeps", (0.05,), dict) == (0.0502,)  # a bad restore forgets nothing


def test_the_sync_models_single_process_runs_come_back_under_the_keys_they_ask_for(monkeypatch):
    from experiments import sync_model
    from experiments.configs import SyncRunConfig
    runs = []
    monkeypatch.setattr(sync_model, "run_alone", lambda config, *args, **kw: runs.append(args)
                        or ({"compute_time_s": 0.05, "idle_time_s": 0.001}, {"layers": []}))
    config = SyncRunConfig(4, 200e6, emulate_compute_s=0.05)
    real = SyncRunConfig(4, 200e6)
    asked = [sync_model.emulated_step(config), sync_model.paused_step(real, 0.0204),
             sync_model.single_process_profile(real)]
    stored = json.loads(json.dumps(RUNS.used()))
    RUNS.clear()
    RUNS.restore(stored)
    monkeypatch.setattr(sync_model, "run_alone", lambda *a, **k: pytest.fail("taken again"))
    again = [SyncRunConfig(**{k: v for k, v in json.loads(json.dumps(c.as_dict())).items()
                              if k != "kind"}) for c in (config, real)]
    assert [sync_model.emulated_step(again[0]), sync_model.paused_step(again[1], 0.0204),
            sync_model.single_process_profile(again[1])] == asked
    assert len(runs) == 3 and RUNS.taken == []


def test_emulated_compute_draws_from_the_sleeps_loaded_and_sleeps_for_none(monkeypatch):
    RUNS.restore([{"kind": "sleeps", "key": [0.05], "value": [0.0502, 0.0506]}])
    monkeypatch.setattr(ps_model.time, "sleep", lambda s: pytest.fail("slept"))
    assert ps_model.emulated_compute(0.05).samples_s == (0.0502, 0.0506)


@pytest.mark.parametrize("records, named", [
    ({"kind": "profile"}, "not a list"),
    ([{"kind": "profile", "key": ["mlp"]}], r"single_process\[1\]: not a run"),
    ([{"kind": "dream", "key": [], "value": {}}], "unknown kind 'dream'"),
    ([{"kind": "profile", "key": "mlp", "value": {}}], "the key must be a list"),
    ([{"kind": "profile", "key": [["mlp"]], "value": {}}], "strings and finite numbers"),
    ([{"kind": "profile", "key": [float("nan")], "value": {}}], "strings and finite numbers"),
    ([{"kind": "profile", "key": [], "value": 3}], "must be an object"),
    ([{"kind": "sleeps", "key": [0.05], "value": []}], "positive seconds"),
    ([{"kind": "sleeps", "key": [0.05], "value": [0.05, -1]}], "positive seconds"),
    ([{"kind": "sleeps", "key": [0.05], "value": [True]}], "positive seconds"),
])
def test_bad_stored_runs_are_refused_and_none_is_kept(records, named):
    good = {"kind": "profile", "key": ["mlp", 32], "value": {"summary": {}}}
    runs = SingleProcessRuns()
    with pytest.raises(ValueError, match=named):
        runs.restore([good, *records] if isinstance(records, list) else records)
    assert runs.used() == [] and runs.take("profile", ("mlp", 32), dict) == {}  # nothing loaded


def test_each_experiments_result_keeps_the_runs_its_rows_asked_for(monkeypatch, tmp_path):
    from experiments import ps_vs_ring, run, sync_model
    from experiments.configs import Experiment, SyncRunConfig
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    monkeypatch.setattr(sync_model, "run_alone",
                        lambda config, *a, **k: ({"idle_time_s": 0.001}, {"layers": []}))
    monkeypatch.setattr(ps_vs_ring, "plot", lambda rows, path: None)
    monkeypatch.setattr(ps_vs_ring, "rows", lambda experiment, nets: [
        sync_model.single_process_profile(SyncRunConfig(1, 1.0)) and None][:0])
    experiment = Experiment("ps_vs_ring", "?", ())
    [kept] = run.run_experiment(experiment, {})["single_process"]
    assert kept["kind"] == "profile" and kept["value"]["summary"] == {"idle_time_s": 0.001}
    monkeypatch.setattr(ps_vs_ring, "rows", lambda experiment, nets: [])
    assert "single_process" not in run.run_experiment(experiment, {})  # asked for none
