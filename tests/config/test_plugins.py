"""A user's own algorithm, data set, partition and model outside the package: a yaml in their --config-dir
names the code by import path (`_target_`), the module is found in the current folder (issue 41, §1)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.bad_inputs import diagnose_command
from tests.faultkit import SMALL, env, error_lines, fedbench, runs

@pytest.fixture(autouse=True)
def no_plugin_outlives_its_test():
    """Plugins adopted in this process are forgotten after each test: names in later messages are the built-ins'."""
    yield
    from fedbench.config.plugins import forget_adopted

    forget_adopted()


# the user's module: an algorithm (FedAvg with its own server step), a model, a data set and a partition
MODULE = '''
from dataclasses import dataclass

import torch

from fedbench.algorithms import Algorithm
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.data.datasets import DATASETS


@dataclass
class HalfAvg(FedAvg):
    """FedAvg whose server moves half way to the clients' mean."""
    shrink: float = 0.5

    def aggregate(self, server, up, cohort):
        return {**server, "x": server["x"] + self.shrink * weighted_mean(up["delta"], cohort.weights)}


def tiny_mlp(input_shape, num_classes, width: int = 8):
    """A one-hidden-layer perceptron."""
    size = 1
    for s in input_shape:
        size *= s
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(size, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, num_classes))


def my_digits(root: str = "data", download: bool = False):
    """The digits data set, under a name of the user's."""
    return DATASETS.get("digits")(root=root, download=download)


def round_robin(labels, num_clients, rng, offset: int = 0):
    """Sample k goes to client (k + offset) mod N."""
    n = len(labels)
    return [[k for k in range(n) if (k + offset) % num_clients == c] for c in range(num_clients)]


def not_an_algorithm():
    pass


def model_by_name(input_shape, num_classes):
    """Returns the name of a model, not the model."""
    return "mlp"


def digits_as_tensors(root: str = "data", download: bool = False):
    """The digits' tensors, not a fedbench Dataset."""
    data = DATASETS.get("digits")(root=root, download=download)
    return data.x_train, data.y_train


def one_client_short(labels, num_clients, rng):
    """Forgets the last client."""
    return [[k for k in range(len(labels)) if k % num_clients == c] for c in range(num_clients - 1)]


@dataclass
class NoUpdate(Algorithm):  # aggregate only
    sends = (1, 1)

    def aggregate(self, server, up, cohort):
        return server


@dataclass
class WrongSignature(HalfAvg):
    def client_update(self, down, work):  # the client state forgotten
        return {"delta": down["x"]}, {}


@dataclass
class SingleUpload(FedAvg):
    """Uploads in float32 whatever the run's precision."""
    def client_update(self, down, client, work):
        up, client = super().client_update(down, client, work)
        return {"delta": up["delta"].float()}, client


@dataclass
class NoMean(FedAvg):
    """Forgets the cohort's mean: the server's x gets the clients' dim."""
    def aggregate(self, server, up, cohort):
        return {**server, "x": server["x"] + up["delta"]}


@dataclass
class NanAtThree(FedAvg):
    """A bug that shows at the third round."""
    def aggregate(self, server, up, cohort):
        new = super().aggregate(server, up, cohort)
        return {**new, "x": new["x"] * (float("nan") if cohort.round == 2 else 1.0)}


@dataclass
class CountingAvg(FedAvg):
    """Counts rounds in a Python int beside the tensors."""
    def init(self, x0):
        return {**super().init(x0), "rounds": 0}
'''

YAMLS = {
    "algorithm/halfavg.yaml": "_target_: myfl.HalfAvg\nname: halfavg\nshrink: 0.5\n",
    "model/tiny.yaml": "_target_: myfl.tiny_mlp\nname: tiny\nwidth: 8\n",
    "dataset/mydigits.yaml": "_target_: myfl.my_digits\nname: mydigits\n",
    "partition/robin.yaml": "_target_: myfl.round_robin\nname: robin\noffset: 1\n",
    # broken plugins
    "algorithm/no_module.yaml": "_target_: nosuchpackage.Algo\nname: no_module\n",
    "algorithm/no_class.yaml": "_target_: myfl.NoSuchClass\nname: no_class\n",
    "algorithm/broken_import.yaml": "_target_: brokenfl.Algo\nname: broken_import\n",
    "algorithm/not_algo.yaml": "_target_: myfl.not_an_algorithm\nname: not_algo\n",
    "algorithm/not_algo_class.yaml": "_target_: torch.nn.Linear\nname: not_algo_class\n",
    "algorithm/bad_key.yaml": "_target_: myfl.HalfAvg\nname: bad_key\nshrinkk: 0.5\n",
    "algorithm/taken.yaml": "_target_: myfl.HalfAvg\nname: fedavg\n",
    "model/bad_model.yaml": "_target_: myfl.tiny_mlp\nname: bad_model\ndepth: 3\n",
    "algorithm/single_upload.yaml": "_target_: myfl.SingleUpload\nname: single_upload\n",
    "algorithm/no_mean.yaml": "_target_: myfl.NoMean\nname: no_mean\n",
    "algorithm/counting.yaml": "_target_: myfl.CountingAvg\nname: counting\n",
    "model/by_name.yaml": "_target_: myfl.model_by_name\nname: by_name\n",
    "partition/short.yaml": "_target_: myfl.one_client_short\nname: short\n",
    "algorithm/double.yaml": "_target_: doublefl.Algo\nname: double\n",
    "algorithm/nan_at_three.yaml": "_target_: myfl.NanAtThree\nname: nan_at_three\n",
    "dataset/tensors.yaml": "_target_: myfl.digits_as_tensors\nname: tensors\n",
    "algorithm/chatty.yaml": "_target_: chattyfl.Algo\nname: chatty\n",
    "algorithm/no_update.yaml": "_target_: myfl.NoUpdate\nname: no_update\n",
    "algorithm/wrong_signature.yaml": "_target_: myfl.WrongSignature\nname: wrong_signature\n",
}


def user_folder(root: Path) -> Path:
    """A researcher's folder outside the checkout: myfl.py and my_conf/."""
    (root / "myfl.py").write_text(MODULE)
    (root / "brokenfl.py").write_text("import a_dependency_not_installed\n")
    (root / "chattyfl.py").write_text("from myfl import HalfAvg as Algo\n\nprint('chattyfl loaded')\n")
    (root / "doublefl.py").write_text("import torch\nfrom myfl import HalfAvg as Algo\n\n"
                                      "torch.set_default_dtype(torch.float64)  # for my own tests\n")
    for name, text in YAMLS.items():
        (root / "my_conf" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "my_conf" / name).write_text(text)
    return root


def line_of(cls: str) -> int:
    """The line of myfl.py where a class of MODULE starts, as inspect reports it: its @dataclass, the line above
    `class` (the 0-based index of the class line is the 1-based number of the line above it)."""
    return next(i for i, text in enumerate(MODULE.splitlines()) if text.startswith(f"class {cls}("))


BROKEN = [
    ("algorithm=no_module", "algorithm._target_=nosuchpackage.Algo does not import: no module named nosuchpackage"),
    ("algorithm=no_class", "algorithm._target_=myfl.NoSuchClass does not import: module myfl has no NoSuchClass"),
    ("algorithm=broken_import", "algorithm._target_=brokenfl.Algo does not import: importing brokenfl raises "
     "ModuleNotFoundError: No module named 'a_dependency_not_installed'"),
    ("algorithm=not_algo", "algorithm._target_=myfl.not_an_algorithm is a function, not a subclass of "
     "fedbench.algorithms.Algorithm"),
    ("algorithm=not_algo_class", "algorithm._target_=torch.nn.Linear is the class torch.nn.modules.linear.Linear, "
     "not a subclass of fedbench.algorithms.Algorithm"),
    ("algorithm=bad_key", "Unknown parameter algorithm.shrinkk for algorithm 'bad_key'. Valid: server_opt, shrink. "
     "Did you mean 'shrink'?"),
    ("algorithm=taken", "algorithm.name=fedavg with algorithm._target_=myfl.HalfAvg: the name 'fedavg' is taken by "
     "fedbench.algorithms.fedavg.FedAvg"),
    ("model=bad_model", "Unknown parameter model.depth for model 'bad_model'. Valid: width."),
    ("algorithm=double", "algorithm._target_=doublefl.Algo: importing doublefl (<tmp>/doublefl.py) changed torch's "
     "default dtype from torch.float32 to torch.float64 (torch.set_default_dtype), which would change every run"),
    ("algorithm=no_update", f"algorithm._target_=myfl.NoUpdate: myfl.NoUpdate (<tmp>/myfl.py:{line_of('NoUpdate')}) "
     "does not define "
     "client_update; an Algorithm defines client_update(down, client, work) and aggregate(server, up, cohort)"),
    ("algorithm=wrong_signature", "algorithm._target_=myfl.WrongSignature: myfl.WrongSignature "
     f"(<tmp>/myfl.py:{line_of('WrongSignature')}) "
     "defines client_update(down, work), but fedbench calls client_update(down, client, work)"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return user_folder(tmp_path_factory.mktemp("user"))


@pytest.mark.parametrize("line,needle", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_plugin_is_one_line_before_any_work(folder, monkeypatch, line, needle):
    monkeypatch.chdir(folder)  # the user's module is found in the folder the command runs in
    monkeypatch.setattr(sys, "path", list(sys.path))
    message = diagnose_command(f"run --config-dir {folder}/my_conf {line}", folder)
    assert needle in message and "\n" not in message
    import torch

    assert torch.get_default_dtype() == torch.float32  # put back: the process's later runs are as before


def test_a_broken_plugin_exits_2_with_one_line(folder):
    done = fedbench("run", "--config-dir", "my_conf", "algorithm=no_class", *SMALL, cwd=folder)
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [f"error: {BROKEN[1][1]} (a module is looked up in the current folder, "
                                        "on PYTHONPATH and among the installed packages)"]
    assert "Traceback" not in done.stderr and not (folder / "outputs").exists()


# found when the run is built (its data set, partition and model made), before its first round
BUILT = [
    ("model=by_name", "model 'by_name': myfl.model_by_name returned a str, not a torch.nn.Module (a model factory "
     "takes (input_shape, num_classes, **parameters) and returns the module)"),
    ("dataset=tensors", "dataset 'tensors': myfl.digits_as_tensors returned a tuple, not a fedbench.data.Dataset "
     "(like the built-ins of fedbench/data/datasets.py)"),
    ("partition=short", "partition 'short': myfl.one_client_short returned 3 index lists for num_clients=4 (one per "
     "client)"),
]


@pytest.mark.parametrize("line,needle", BUILT, ids=[b[0] for b in BUILT])
def test_a_data_set_model_or_partition_that_returns_the_wrong_thing_exits_2_with_one_line(tmp_path, line, needle):
    folder = user_folder(tmp_path)  # a folder of its own: its runs are not in the others' record
    done = fedbench("run", "--config-dir", "my_conf", line, "rounds=1", *SMALL, cwd=folder)
    assert done.returncode == 2, done.stderr[-2000:]
    assert error_lines(done.stderr) == [f"error: {needle}"] and "Traceback" not in done.stderr


RETURNS = [
    ("algorithm=single_upload", "myfl.SingleUpload.client_update (<tmp>/myfl.py:LINE) returned the upload 'delta' as "
     "a float32 tensor of shape [1, 650]: the run computes in float64 (engine.dtype), and this loses precision"),
    ("algorithm=no_mean", "myfl.NoMean.aggregate (<tmp>/myfl.py:LINE) returned 'x' as a float64 tensor of shape "
     "[2, 650]: it was a float64 tensor of shape [650] before"),
    ("algorithm=counting", "myfl.CountingAvg.init (<tmp>/myfl.py:LINE) returned 'rounds' as an int: not a "
     "torch.Tensor"),
]


@pytest.mark.slow  # a fresh process for each, that starts a run
@pytest.mark.parametrize("line,needle", RETURNS, ids=[r[0] for r in RETURNS])
def test_a_method_that_returns_what_the_engine_cannot_take_is_one_line_naming_it(tmp_path, line, needle):
    """A float32 upload in a float64 run, a server x of the wrong shape, a number in the state: one line naming the
    method and its file at the first round, not a traceback from the engine, torch or the checkpoint."""
    folder = user_folder(tmp_path)  # a folder of its own: its runs are not in the others' record
    done = fedbench("run", "--config-dir", "my_conf", line, "rounds=2", "engine.dtype=float64", *SMALL, cwd=folder)
    method = needle.split(" (")[0].rsplit(".", 1)[1]
    cls = needle.split(".")[1]
    number = next(i for i, text in enumerate(MODULE.splitlines(), 1) if text.startswith(f"class {cls}("))
    number += next(i for i, text in enumerate(MODULE.splitlines()[number:], 1) if f"def {method}(" in text)
    assert done.returncode == 1, done.stderr[-2000:]
    assert error_lines(done.stderr) == [f"error: {needle}".replace("<tmp>", str(folder)).replace("LINE", str(number))]
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # a fresh process that starts a run
def test_a_plugin_that_makes_nan_at_round_3_is_named_in_the_divergence_line(tmp_path):
    folder = user_folder(tmp_path)  # a folder of its own: its runs are not in the others' record
    done = fedbench("run", "--config-dir", "my_conf", "algorithm=nan_at_three", "rounds=4", *SMALL, cwd=folder)
    number = line_of("NanAtThree") + 3  # its aggregate: the @dataclass, class, docstring, then def
    assert done.returncode == 3, done.stderr[-2000:]
    assert error_lines(done.stderr) == [f"error: run diverged at round 3: non-finite model parameters after "
                                        f"myfl.NanAtThree.aggregate ({folder}/myfl.py:{number})"]


@pytest.mark.slow  # a fresh process that runs three jobs
def test_own_algorithm_model_data_set_and_partition_run_from_python(folder):
    """fedbench.run/sweep with config_dir: the user's code in every group, the built-in beside it, and the
    own algorithm's numbers follow its own server step (shrink 1 is FedAvg: equal results)."""
    script = textwrap.dedent(f"""
        import fedbench
        base = ["model=tiny", "dataset=mydigits", "partition=robin", "rounds=2", {", ".join(map(repr, SMALL))}]
        half, full = fedbench.sweep(["algorithm=halfavg", "algorithm.shrink=0.5,1.0", *base], config_dir="my_conf",
                                    sweep_dir="sweep", progress=False)
        avg = fedbench.run(["algorithm=fedavg", *base], config_dir=["my_conf"], progress=False)
        curve = lambda r: r.history["test_loss"].tolist()
        print("CURVES", curve(full) == curve(avg), curve(half) != curve(avg))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    curves = next(line for line in done.stdout.splitlines() if line.startswith("CURVES")).split()[1:]
    assert curves == ["True", "True"], done.stdout
    client, recorded = runs(folder / "outputs" / "mlflow.db")
    names = sorted(r.data.params["algorithm.name"] for r in recorded)
    assert names == ["fedavg", "halfavg", "halfavg"]
    assert {r.data.params["model.name"] for r in recorded} == {"tiny"}
    assert {r.data.params["algorithm._target_"] for r in recorded if "algorithm._target_" in r.data.params} == {"myfl.HalfAvg"}
    assert all(r.info.status == "FINISHED" for r in recorded)


@pytest.mark.slow  # three command lines, each a fresh process
@pytest.mark.parametrize("launcher", ["basic", "batched"])
def test_own_algorithm_runs_in_a_grid_beside_a_built_in_and_in_the_report(tmp_path, launcher):
    folder = user_folder(tmp_path)
    done = fedbench("run", "--config-dir", "my_conf", "-m", "algorithm=fedavg,halfavg", "seed=0,1", "rounds=2",
                    f"hydra/launcher={launcher}", *SMALL, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    client, recorded = runs(folder / "outputs" / "mlflow.db")
    assert sorted(r.data.params["algorithm.name"] for r in recorded) == ["fedavg", "fedavg", "halfavg", "halfavg"]
    assert all(r.info.status == "FINISHED" for r in recorded)
    table = fedbench("report", "--experiment", "fedbench", "--target", "0.1", "--baseline", "fedavg", cwd=folder)
    assert table.returncode == 0, table.stderr
    assert any(line.startswith("| halfavg ") for line in table.stdout.splitlines()), table.stdout


def installed_plugin(site: Path) -> None:
    """A package as pip installs it (its files and a dist-info with an entry point of the group fedbench.plugins):
    the algorithm HalfAvg and its yaml, in the package's folder conf/."""
    package = site / "halfavg_plugin"
    (package / "conf" / "algorithm").mkdir(parents=True)
    (package / "__init__.py").write_text(MODULE)
    (package / "conf" / "algorithm" / "halfavg_pkg.yaml").write_text(
        "# FedAvg half way, from an installed package\n_target_: halfavg_plugin.HalfAvg\nname: halfavg_pkg\nshrink: 0.5\n")
    info = site / "halfavg_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halfavg-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedbench.plugins]\nhalfavg = halfavg_plugin.conf\n")
    (info / "RECORD").write_text("")


@pytest.mark.slow  # three fresh processes
def test_an_installed_package_declares_its_algorithm_by_entry_point(tmp_path):
    """`fedbench list` shows it and `fedbench run algorithm=<its name>` runs it, with no --config-dir, from a
    folder that holds none of its files."""
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    installed_plugin(site)
    environment = {**env(), "PYTHONPATH": f"{env()['PYTHONPATH']}:{site}"}

    def fedbench_here(*args):
        return subprocess.run([sys.executable, "-m", "fedbench.cli", *args], cwd=work, env=environment,
                              capture_output=True, text=True, timeout=600)

    listed = fedbench_here("list")
    assert listed.returncode == 0, listed.stderr
    row = next((line for line in listed.stdout.splitlines() if line.strip().startswith("halfavg_pkg ")), "")
    assert "FedAvg half way, from an installed package [plugin: halfavg_plugin.HalfAvg]" in row, listed.stdout
    done = fedbench_here("run", "algorithm=halfavg_pkg", "rounds=2", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    client, recorded = runs(work / "outputs" / "mlflow.db")
    assert [(r.data.params["algorithm.name"], r.info.status) for r in recorded] == [("halfavg_pkg", "FINISHED")]
    bad = fedbench_here("run", "algorithm=halfavg_pkg", "algorithm.shrinkk=1", "rounds=2", *SMALL)
    assert bad.returncode == 2 and error_lines(bad.stderr) == [
        "error: Unknown parameter algorithm.shrinkk for algorithm 'halfavg_pkg'. Valid: server_opt, shrink. "
        "Did you mean 'shrink'?"], bad.stderr


def test_a_package_installed_or_removed_while_the_process_runs_is_seen_by_the_next_composition(tmp_path, monkeypatch):
    """installed_config_dirs reads the installed packages' metadata once per state of sys.path's folders."""
    import shutil

    from fedbench.config.plugins import installed_config_dirs

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    before = installed_config_dirs()
    assert installed_config_dirs() == before
    installed_plugin(site)
    assert installed_config_dirs() == (*before, site / "halfavg_plugin" / "conf")
    shutil.rmtree(site / "halfavg_plugin-0.1.dist-info")
    assert installed_config_dirs() == before


def test_a_plugin_adopted_in_one_test_is_gone_in_the_next(folder, monkeypatch):
    from fedbench.algorithms import load_all
    from fedbench.config.plugins import adopt, forget_adopted

    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    adopt("algorithm", "halfavg_once", "myfl.HalfAvg")
    assert "halfavg_once" in load_all() and "halfavg_once" not in load_all().describe()
    forget_adopted()
    assert "halfavg_once" not in load_all() and "fedavg" in load_all()


def test_a_yaml_at_the_path_of_a_built_in_is_refused_not_ignored(tmp_path):
    """my_conf/algorithm/fedavg.yaml: Hydra reads fedbench's algorithm/fedavg.yaml and never the user's, so the run
    would silently train the built-in; one line names the file (a verbatim copy of the built-in is harmless)."""
    from fedbench.config.compose import conf_dir
    from fedbench.config.preflight import preflight
    from fedbench.core.errors import ConfigError

    mine = tmp_path / "my_conf" / "algorithm"
    mine.mkdir(parents=True)
    (mine / "fedavg.yaml").write_bytes((conf_dir() / "algorithm" / "fedavg.yaml").read_bytes())
    preflight(conf_dir(), ["--config-dir", str(tmp_path / "my_conf"), "algorithm=fedavg"])
    (mine / "fedavg.yaml").write_text("_target_: myfl.HalfAvg\nname: halfavg\n")
    with pytest.raises(ConfigError) as raised:
        preflight(conf_dir(), ["--config-dir", str(tmp_path / "my_conf"), "algorithm=fedavg"])
    assert str(raised.value) == (f"{mine / 'fedavg.yaml'}: algorithm=fedavg is a built-in of fedbench "
                                 "(algorithm/fedavg.yaml), whose file Hydra reads in place of yours; give yours a "
                                 "name of its own (e.g. algorithm/my_fedavg.yaml)")


def test_a_folder_named_almost_as_a_group_is_refused_not_ignored(tmp_path):
    """my_conf/algorithms/fednova.yaml (the package's folder is fedbench/algorithms): Hydra never looks there, and
    `algorithm=fednova` was an unknown choice with no word of the folder; one line names it and the group's."""
    from fedbench.config.compose import conf_dir
    from fedbench.config.preflight import preflight
    from fedbench.core.errors import ConfigError

    (tmp_path / "my_conf" / "algorithms").mkdir(parents=True)
    (tmp_path / "my_conf" / "algorithms" / "fednova.yaml").write_text("_target_: myfl.FedNova\nname: fednova\n")
    with pytest.raises(ConfigError) as raised:
        preflight(conf_dir(), ["--config-dir", str(tmp_path / "my_conf"), "algorithm=fednova"])
    assert str(raised.value).startswith(f"{tmp_path / 'my_conf' / 'algorithms'}: no config group is named algorithms; "
                                        f"its yamls go in {tmp_path / 'my_conf' / 'algorithm'}/")


def test_what_a_plugin_prints_on_import_stays_out_of_the_printed_config(folder):
    """`fedbench run --cfg job > config.yaml`: a plugin module's print as it is imported goes to stderr."""
    import yaml

    done = fedbench("run", "--config-dir", "my_conf", "algorithm=chatty", "--cfg", "job", cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    assert yaml.safe_load(done.stdout)["algorithm"]["name"] == "chatty" and "chattyfl loaded" in done.stderr
