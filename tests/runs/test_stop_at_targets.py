"""stop_at_targets: a run ends FINISHED at the first round where every target is reached, its rounds
the same as those of the full run (rounds-to-target unchanged); alone or as a lane, resumed or not."""

from __future__ import annotations

import pytest

import fedbench
from fedbench.core.errors import ConfigError
from tests.conftest import make_cfg

BASE = ["rounds=12", "num_clients=10", "clients_per_round=4", "batch_size=16", "eval_every=1", "tracking.artifacts=false",
        "engine.threads=1"]


def _target_first_reached_at(history, round_):
    """A target the run first reaches at `round_`: its accuracy there, when above every earlier one."""
    accs = list(history["test_accuracy"])
    assert accs[round_ - 1] > max(accs[: round_ - 1]), "the accuracy must rise at the chosen round"
    return accs[round_ - 1]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stop")
    res = fedbench.run([*BASE, f"tracking.uri=sqlite:///{tmp}/m.db", "targets=[0.5]"], run_dir=tmp / "full")
    return tmp, res


def _stopped_at(history) -> int:
    accs = list(history["test_accuracy"])
    return next(r for r in range(3, len(accs)) if accs[r - 1] > max(accs[: r - 1]))


def test_the_run_ends_at_the_first_round_every_target_is_reached_with_the_full_runs_rounds(full):
    tmp, whole = full
    r = _stopped_at(whole.history)
    low, high = sorted([whole.history["test_accuracy"].iloc[0], _target_first_reached_at(whole.history, r)])
    res = fedbench.run([*BASE, f"tracking.uri=sqlite:///{tmp}/m.db", f"targets=[{low},{high}]", "stop_at_targets=true"],
                       run_dir=tmp / "stopped")
    assert len(res.history) == r < 12
    assert list(res.history["test_accuracy"]) == list(whole.history["test_accuracy"][:r])
    assert res.summary["rounds_to_target"] == {low: 1, high: r}
    from mlflow.tracking import MlflowClient

    assert MlflowClient(f"sqlite:///{tmp}/m.db").get_run(res.run_id).info.status == "FINISHED"
    again = fedbench.run([*BASE, f"tracking.uri=sqlite:///{tmp}/m.db", f"targets=[{low},{high}]", "stop_at_targets=true",
                          "resume=true"], run_dir=tmp / "stopped")
    assert again.run_id == res.run_id and len(again.history) == r  # complete: nothing trained or logged again


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_lane_that_reaches_its_targets_leaves_and_the_others_are_their_runs_alone(full):
    from fedbench.config.compose import compose

    tmp, whole = full
    r = _stopped_at(whole.history)
    target = _target_first_reached_at(whole.history, r)
    common = [*BASE, f"tracking.uri=sqlite:///{tmp}/lanes.db", f"targets=[{target}]", "stop_at_targets=true"]
    jobs = [[*common, "seed=0"], [*common, "seed=0", "eta_l=0.01"]]  # the slow lane never reaches it
    out = fedbench.runs.api.run_batched([(compose(j), j, tmp / f"lane{i}", "") for i, j in enumerate(jobs)])
    assert [len(o.history) for o in out] == [r, 12]
    assert list(out[0].history["test_accuracy"]) == pytest.approx(list(whole.history["test_accuracy"][:r]), abs=1e-6)
    alone = fedbench.run([*jobs[1][:-1], f"tracking.uri=sqlite:///{tmp}/alone.db", "eta_l=0.01"], run_dir=tmp / "alone")
    assert list(out[1].history["test_accuracy"]) == pytest.approx(list(alone.history["test_accuracy"]), abs=1e-6)


def test_off_keeps_the_config_hash_of_earlier_runs_and_on_changes_it():
    from omegaconf import OmegaConf, open_dict

    from fedbench.runs.single import config_hash

    cfg = make_cfg()
    before = OmegaConf.create(OmegaConf.to_container(cfg))
    with open_dict(before):
        before.pop("stop_at_targets")
    assert config_hash(cfg) == config_hash(before)
    assert config_hash(make_cfg("stop_at_targets=true")) != config_hash(cfg)


def test_stopping_needs_an_evaluation_to_see_the_targets():
    from fedbench.config.preflight import checked_compose

    with pytest.raises(ConfigError, match="stop_at_targets=true needs .* eval_every=0"):
        checked_compose(["stop_at_targets=true", "eval_every=0"])
