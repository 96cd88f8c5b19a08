"""The fairness of scripts/bench_peers.py: the peers see fedbench's minibatches and cohorts, so
their round-1 global model equals fedbench's."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import require_data

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
require_data(importlib.util.find_spec("flwr") is not None, "flwr is the `peers` extra (scripts/install_test_deps.sh)")
require_data(Path("/usr/share/datasets/fashion-mnist").is_dir() or bool(os.environ.get("FEDBENCH_FMNIST_DIR")),
             "Fashion-MNIST not found")

sys.path.insert(0, str(SCRIPTS))
spec = importlib.util.spec_from_file_location("bench_peers", SCRIPTS / "bench_peers.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_peers"] = bench
spec.loader.exec_module(bench)

THREADS = torch.get_num_threads()
# 60 samples per client: an epoch is a step of 50 and a short step of 10.
TINY = dict(model="mclr", num_clients=20, per_client=60, cohort=4)


def release_the_test_streams() -> None:
    """pfl imports absl, whose logging handler holds the stream that was sys.stderr at import (pytest's capture
    file) and closes it when logging is configured again (logging.config.dictConfig, as Hydra's job logging
    does in a later test's in-process run) unless it is sys.stderr at that moment: under contextlib's
    redirect_stderr it is not, and pytest's capture is closed for every test after. Pointed at the process's
    own stderr, which absl never closes."""
    absl = sys.modules.get("absl.logging")
    if absl is not None:
        absl.get_absl_handler().python_handler.stream = sys.__stderr__


@pytest.fixture(autouse=True)
def restore_the_environment():
    """Flower's Ray simulation writes PYTHONPATH (with site-packages and the checkout) into os.environ:
    later tests' subprocesses must not inherit it. The peers' logging keeps no stream of pytest's."""
    environ, path = dict(os.environ), list(sys.path)
    yield
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    release_the_test_streams()


def test_client_batches_are_the_engine_minibatches():
    from fedbench.engine.local import LocalWork

    fed, _ = bench.federation(TINY, 1)
    ids = bench.cohort(fed, 2)
    batches = bench.client_batches(fed, 2, ids)
    work = LocalWork(fed.clients, torch.tensor(ids), 2, fed.eta_l, fed.batch_size, torch.ones(len(ids), dtype=torch.long), None)
    assert [len(b) for b in batches[0]] == [50, 10]
    for t in range(work.max_steps):
        batch = work.batch(t)
        for i in range(len(ids)):
            valid = batch.w[i] > 0
            assert torch.equal(batch.x[i][valid], fed.clients.x[batches[i][t]])
    # each client's epoch visits its own samples exactly once
    for i, cid in enumerate(ids):
        own = fed.clients.index[cid, : int(fed.clients.size[cid])]
        assert torch.equal(torch.cat(batches[i]).sort().values, own.sort().values)


def test_fedbench_and_sequential_loop_agree_after_one_round():
    fb = bench.run_fedbench(TINY, 2)
    seq = bench.run_seq(TINY, 2)
    assert float((fb["round1"] - seq["round1"]).abs().max()) <= bench.ROUND1_TOL
    assert abs(fb["accuracy"] - seq["accuracy"]) <= bench.ACC_TOL
    assert len(fb["round_times"]) == len(seq["round_times"]) == 2


def test_round1_check_detects_another_minibatch_order(monkeypatch):
    """The 1e-4 check can fail: the sequential loop with each client's batches reversed."""
    fb = bench.run_fedbench(TINY, 1)
    original = bench.client_batches
    monkeypatch.setattr(bench, "client_batches", lambda *a: [b[::-1] for b in original(*a)])
    seq = bench.run_seq(TINY, 1)
    assert float((fb["round1"] - seq["round1"]).abs().max()) > bench.ROUND1_TOL


@pytest.fixture(scope="module")
def sequential_two_rounds():
    return bench.run_seq(TINY, 2)


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
@pytest.mark.parametrize("framework", ["flower", "pfl"])
def test_each_peer_and_the_sequential_loop_agree(framework, sequential_two_rounds):
    """The benchmark's fairness checks hold for the peers themselves (flwr and pfl, the `peers`
    extra): the same round-1 global model to 1e-4, the same accuracy after the last round."""
    require_data(importlib.util.find_spec(framework.replace("flower", "flwr")) is not None,
                 f"{framework} is the `peers` extra (scripts/install_test_deps.sh)")
    peer, seq = bench.RUNNERS[framework](TINY, 2), sequential_two_rounds
    assert float((peer["round1"] - seq["round1"]).abs().max()) <= bench.ROUND1_TOL
    assert abs(peer["accuracy"] - seq["accuracy"]) <= bench.ACC_TOL
    assert len(peer["round_times"]) == 2


# unequal clients (Dirichlet 0.1 over all 60,000 images): FedAvg by examples would differ from seq's uniform mean
TINY_DIR = dict(model="mclr", num_clients=20, cohort=4, partition=["partition=dirichlet", "partition.alpha=0.1"])


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
@pytest.mark.parametrize("framework", ["fedbench", "flower", "pfl"])
def test_every_framework_runs_the_same_computation_on_unequal_clients(framework):
    """On unequal clients too, each framework's round-1 model equals the sequential loop's (Flower:
    uniform weights under the strategy's weighting key, replies summed in cohort order). With
    `replay`, it starts rounds 2 and 3 from the given models (seq's own, shifted by 0.1 noise so
    that ignoring them shows) and ends each round where seq does from them."""
    require_data(importlib.util.find_spec(framework.replace("flower", "flwr")) is not None,
                 f"{framework} is the `peers` extra (scripts/install_test_deps.sh)")
    fed, _ = bench.federation(TINY_DIR, 1)
    sizes = fed.clients.size[bench.cohort(fed, 0)]
    assert sizes.max() > 2 * sizes.min()  # weighting by examples would change the mean
    own = bench.run_seq(TINY_DIR, 3)
    given = own["models"][:2] + 0.1 * torch.randn(own["models"][:2].shape, generator=torch.Generator().manual_seed(0))
    seq, peer = bench.run_seq(TINY_DIR, 3, given), bench.RUNNERS[framework](TINY_DIR, 3, given)
    assert torch.equal(seq["round1"], own["round1"])
    assert min(bench.deviations(seq["models"], own["models"])[1:]) > 1e-2  # the given models changed seq's rounds 2, 3
    assert max(bench.deviations(peer["models"], seq["models"])) <= bench.ROUND1_TOL


def test_frameworks_run_interleaved_and_rows_are_medians():
    calls = []

    def run(fw):
        calls.append(fw)
        return {"round_times": [float(len(calls))] * 2, "startup": 1.0, "round1": None, "accuracy": 0.0}

    results = bench.interleaved_runs(["a", "b", "c"], run, 3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert bench.combined(results["a"])["seconds"] == 6.0  # runs 1, 6, 8: their median
    assert "error" in bench.combined([{"error": "exit 1"}, *results["a"]])


def trajectory(*deviations: float, accuracy: float = 50.0) -> dict:
    """A run whose global model is off the zero model by `deviations[r]` (max abs) after round r+1."""
    models = torch.zeros(len(deviations), 3)
    models[:, 1] = torch.tensor(deviations)
    return {"models": models, "accuracy": accuracy}


def test_the_replay_check_fails_on_a_computation_that_changes_after_round_one(monkeypatch):
    """Replayed from seq's models, a loop whose batches are reversed from round 2 on fails at round 2;
    the same loop at another thread count (the noise floor) passes."""
    seq = bench.run_seq(TINY, 3)
    torch.set_num_threads(bench.noise_threads(0))
    try:
        floor = bench.run_seq(TINY, 3, seq["models"][:2])
    finally:
        torch.set_num_threads(THREADS)
    original = bench.client_batches
    monkeypatch.setattr(bench, "client_batches", lambda fed, r, ids: [b[::-1] if r else b for b in original(fed, r, ids)])
    late = bench.run_seq(TINY, 3, seq["models"][:2])
    step = bench.deviations(late["models"], seq["models"])
    noise = {**floor, "replayed": floor["models"]}
    assert bench.checks({**late, "replayed": late["models"]}, seq, noise, False) == ["round1 ok", f"replay FAIL from round 2 ({step[1]:.0e})"]
    assert bench.checks({**floor, "replayed": floor["models"]}, seq, None, False)[1].startswith("replay ok")


def test_the_replay_check_is_bounded_by_the_replayed_noise_floor():
    """Each replayed round against NOISE_FACTOR x the noise row's replayed deviation in that round
    (or ROUND1_TOL); the free-running drift (round 2: 1e-3 against the floor's 1e-7) is not judged."""
    seq, floor = trajectory(0, 0, 0), trajectory(1e-8, 1e-7, 1e-7)
    floor["replayed"] = trajectory(1e-8, 6e-4, 1e-7)["models"]
    row = {**trajectory(3e-8, 1e-3, 1e-2, accuracy=51.2), "replayed": trajectory(3e-8, 5e-3, 2e-6)["models"]}
    assert bench.checks(row, seq, floor, True) == ["round1 ok", "replay ok (max 5e-03)", "acc FAIL (1.20 pt)"]
    row["replayed"] = trajectory(3e-8, 5e-3, 2e-4)["models"]
    assert bench.checks(row, seq, floor, False)[1] == "replay FAIL from round 3 (2e-04)"
    assert bench.checks(row, seq, None, False)[1] == "replay FAIL from round 2 (5e-03)"  # no floor: ROUND1_TOL
    assert bench.checks(trajectory(2e-4, 2e-4), seq, None, False) == ["round1 FAIL"]
    # round 1 against the noise row's own round-1 deviation where that is above ROUND1_TOL (a GPU's
    # nondeterministic kernels): within 10x of it passes, beyond fails
    gpu_floor = trajectory(4e-3, 5e-3)
    assert bench.checks(trajectory(7e-3, 1e-2), seq, gpu_floor, False) == ["round1 ok (7e-03, floor 4e-03)"]
    assert bench.checks(trajectory(5e-2, 1e-2), seq, gpu_floor, False) == ["round1 FAIL (5e-02, floor 4e-03)"]
    assert bench.deviations(trajectory(1.0, 2.0, 3.0)["models"], seq["models"][:2]) == [1.0, 2.0]


def test_synthetic_cifar10_is_read_by_the_cifar10_data_set_with_its_shapes(tmp_path):
    """resnet100 without CIFAR-10: the bench's synthetic batches are CIFAR-10's python batches, which fedbench's
    own reader takes (50,000 / 10,000 images of 3x32x32, labels 0-9), and which has_cifar10 then finds."""
    from fedbench.data import DATASETS

    assert not bench.has_cifar10(str(tmp_path))
    bench.write_synthetic_cifar10(tmp_path)
    assert bench.has_cifar10(str(tmp_path))
    ds = DATASETS.get("cifar10")(root=str(tmp_path), mean=None, std=None)
    assert ds.x_train.shape == (50_000, 3, 32, 32) and ds.x_test.shape == (10_000, 3, 32, 32)
    assert set(ds.y_train.unique().tolist()) == set(range(10))
    spec = bench.workload_spec("resnet100", "cpu", str(tmp_path))
    assert spec["data_root"] == str(tmp_path) and spec["num_clients"] * spec["per_client"] == 50_000


def test_logging_configured_again_under_a_redirected_stderr_leaves_pytests_streams_open():
    """What a later test does (tests/bad_inputs.py runs `fedbench run` in this process, its stderr redirected,
    and Hydra configures logging): pytest's capture files stay open after the peers were imported."""
    import contextlib
    import io
    import logging.config

    import pfl  # noqa: F401 - imports absl.logging

    release_the_test_streams()
    streams = sys.stdout, sys.stderr
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    assert not any(stream.closed for stream in streams)
