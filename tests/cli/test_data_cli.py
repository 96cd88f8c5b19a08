"""`fedbench data show` and `fedbench list` for the data and model zoo."""

from __future__ import annotations

import re

import numpy as np
from typer.testing import CliRunner

from fedbench.cli.app import app
from fedbench.core.errors import ConfigError

runner = CliRunner()


def test_data_show_prints_the_split_and_saves_a_heatmap(tmp_path):
    png = tmp_path / "heat.png"
    res = runner.invoke(app, ["data", "show", "dataset=digits", "partition=label_k", "partition.k=2", "num_clients=10",
                              "partition.seed=3", "--rows", "0", "--out", str(png)])
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.output.splitlines() if re.match(r"\s+\d+\s+\d+\s+\d+\s", line)]
    assert len(rows) == 10
    from fedbench.data import DATASETS, fingerprint, make_partition

    labels = DATASETS.get("digits")().y_train.numpy()
    parts = make_partition("label_k", labels, 10, seed=3, k=2)
    for (client, size, nlab, *pairs), p in zip(rows, parts):
        counts = dict(pair.split(":") for pair in pairs)
        assert int(size) == len(p) and int(nlab) == 2 == len(counts)
        assert {int(k): int(v) for k, v in counts.items()} == dict(zip(*map(np.ndarray.tolist, np.unique(labels[p], return_counts=True))))
    assert f"fingerprint={fingerprint(parts)}" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_data_show_rejects_unknown_names():
    res = runner.invoke(app, ["data", "show", "partition=imbalanced_shard"])
    assert isinstance(res.exception, ConfigError) and "imbalanced_shards" in str(res.exception)


def test_list_shows_the_zoo():
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0
    for name in ("emnist", "cifar10", "cifar100", "tinyimagenet", "har", "esr", "libsvm", "shakespeare", "sent140",
                 "c_noniid", "imbalanced_shards", "label_k", "composite_mnist", "pfl_noniid", "quantity_skew",
                 "dirichlet_balanced", "iid_stratified", "logreg", "resnet18_gn"):
        assert re.search(rf"^\s+{name}\s", res.output, re.M), name
    for paper, names in (("fedadmm", "cnn1, cnn2, fc"), ("composite", "cnn"), ("fedsso", "cnn, lenet, mlp_sent140")):
        assert re.search(rf"^\s+{paper}\s+{names}$", res.output, re.M), paper  # model=<paper>/<name>


def test_every_dataset_partition_and_model_config_validates():
    # each yaml's keys are its factory's arguments (a typo would be a ConfigError before any work)
    from pathlib import Path

    from tests.conftest import CONF, make_cfg
    from fedbench.config.validate import validate

    for group in ("dataset", "partition", "model"):
        for path in sorted((Path(CONF) / group).glob("*.yaml")):
            validate(make_cfg(f"{group}={path.stem}"))


def test_data_show_of_a_population_made_on_demand_counts_its_first_users(tmp_path, monkeypatch):
    """issue 35: sizes of every user come without making one; labels are counted for the first 1,000."""
    from fedbench.data.synthetic import PerUserSynthetic

    made = []
    user = PerUserSynthetic.user
    monkeypatch.setattr(PerUserSynthetic, "user", lambda self, k: made.append(k) or user(self, k))
    n = 200_000
    res = runner.invoke(app, ["data", "show", "dataset=synthetic", "dataset.generator=per_user", f"dataset.num_users={n}",
                              "dataset.eval_users=10", "partition=natural", f"num_clients={n}", "--rows", "2",
                              "--out", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    sizes = PerUserSynthetic(0, n, 60, 10, 1.0, 1.0, False).sizes
    train = sizes - np.maximum(1, np.round(0.2 * sizes)).astype(int)
    assert f"train samples assigned: {train.sum()}" in res.output and f"clients={n}" in res.output
    assert "labels of the first 1000 users" in res.output and "... 199998 more" in res.output
    assert len(made) == 10 + 1000  # the test users and the counted ones, not 200,000
    first = [line.split() for line in res.output.splitlines() if re.match(r"\s+\d+\s+\d+\s+\d+\s", line)]
    assert [int(r[1]) for r in first] == train[:2].tolist()
