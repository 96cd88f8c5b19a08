"""FedDyn (Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, "Federated Learning Based on Dynamic
Regularization", ICLR 2021, arXiv:2111.04263), Algorithm 1.

Client k keeps g_k = grad L_k(theta_k^{t-1}) (zero at the start) and minimises, by local SGD from
the server model theta^{t-1},
    L_k(theta) - <g_k, theta> + (alpha/2) ||theta - theta^{t-1}||^2;
then g_k <- g_k - alpha (theta_k^t - theta^{t-1}). The server keeps h, the mean of g_k over ALL
m clients (absent clients keep their g_k), and sends theta^t = mean_{P_t} theta_k^t - h^t / alpha.
Down and up: d floats. FedDyn has no server step size (eta_g must be 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.core.types import ClientStateSpec, Cohort, cohort_sum, Setting, State
from fedbench.algorithms.base import EXTRAS, Algorithm
from fedbench.algorithms.common import local_sgd, weighted_mean
from fedbench.algorithms.registry import register
from fedbench.core.errors import check


@register("feddyn", "FedDyn: dynamic regulariser per client, server correction h over all clients")
@dataclass
class FedDyn(Algorithm):
    sends = (1, 1)  # per client and round, in d-vectors: theta down, theta_i up (Acar et al. Alg. 1)
    lr_rows = True
    local_extras = EXTRAS
    alpha: float = 0.01

    def validate(self) -> None:
        check(self.alpha > 0, f"algorithm.alpha must be > 0, got {self.alpha}")

    def setup(self, setting: Setting) -> None:
        check(setting.eta_g == 1, f"feddyn has no server step size: eta_g must be 1, got {setting.eta_g}")
        super().setup(setting)

    def init(self, x0):
        return {"x": x0.clone(), "h": torch.zeros_like(x0)}

    def client_states(self) -> dict[str, ClientStateSpec]:
        return {"g": ClientStateSpec((self.setting.dim,))}

    def client_update(self, down: State, client: State, work) -> tuple[State, State]:
        x, g = down["x"], client["g"]
        theta = local_sgd(work, x, lambda t, W, G, batch: G - g + self.alpha * (W - x))  # local objective
        delta = theta - x
        return {"delta": delta}, {"g": g - self.alpha * delta}  # grad L_k(theta_k^t) update

    def aggregate(self, server: State, up: State, cohort: Cohort) -> State:
        # h^t = h^{t-1} - alpha (1/m) sum_{k in P_t} (theta_k^t - theta^{t-1}): 1/m over all m clients
        # (p_k = n_k / n in place of 1/m with aggregation=num_samples)
        h = server["h"] - self.alpha * cohort_sum(self.setting, up["delta"], cohort)
        # theta^t = (1/|P_t|) sum_{k in P_t} theta_k^t - h^t / alpha
        x = server["x"] + weighted_mean(up["delta"], cohort.weights) - h / self.alpha
        return {"x": x, "h": h}
