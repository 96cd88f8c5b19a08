"""Bad hyperparameters of the baselines are one ConfigError naming the value, before any work."""

from __future__ import annotations

import pytest

from tests.problems import LSTSQ, build
from fedbench.core.errors import ConfigError


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["algorithm=fedprox", "algorithm.mu=-1"], "mu"),
        (["algorithm=scaffold", "algorithm.option=III"], "option"),
        (["algorithm=scaffold", "algorithm.regularizer=l2"], "regularizer"),
        (["algorithm=scaffold/prox", "algorithm.regularizer=nuclear", "algorithm.shape=[3,3]"], "shape"),
        (["algorithm=feddyn", "eta_g=0.5"], "eta_g"),
        (["algorithm=feddyn", "algorithm.alpha=0"], "alpha"),
        (["algorithm=fedcm", "algorithm.alpha=1.5"], "alpha"),
        (["algorithm=fedavg/avgm", "algorithm.server_opt.momentum=1"], "momentum"),
        (["algorithm=fedavg/adam", "algorithm.server_opt.beta2=1"], "beta2"),
        (["algorithm=fedavg/yogi", "algorithm.server_opt.tau=0"], "tau"),
        (["algorithm=fedavg", "algorithm.server_opt=adamw"], "server_opt 'adamw'. Available: adagrad, adam"),
        (["algorithm=fedavg/avgm", "+algorithm.server_opt.beta1=0.9"], "server_opt.beta1 for server_opt 'momentum'"),
        (["algorithm=fedavg/adagrad", "algorithm.server_opt.v0=-1"], "v0"),
    ],
)
def test_bad_hyperparameters_are_config_errors(overrides, words):
    with pytest.raises(ConfigError, match=words):
        build(*LSTSQ, "clients_per_round=3", *overrides)
