"""Non-convex composite FL (Zhang, Hu, Johansson, arXiv:2502.03958): Figs. 2-4 (spec: papers/composite.md).

The figures' plotted values and the settings sentences were lost in the source text, so the published
numbers are the prose's qualitative statements; the checks are the spec's §7.2 thresholds.
"""

from __future__ import annotations

import numpy as np

from fedbench.reproduce.entry import Arm, Claim, Metric, Reproduction, Scale, Tune, axis, candidates, register, rounds_to
from fedbench.reproduce.compare import best, first_to_target, narrowed, seeds, value

PAPER = "composite"
ERR = Metric("final_rel_error", "at", "stationarity")
TAIL = Metric("tail_rel_error", "mean_last", "stationarity", last=100)


# "we use hand-tuned step sizes" (the paper): every method's eta over the same multiples of 1/L_max, per tau and
# per batch size (composite.md §4.1, review note), wide enough to pass each method's stability limit (eta~ lambda > 2;
# L_max is 17-60x the curvature at x*) and to bracket the small steps that FedDA and FedMid prefer at tau = 5 (a ci
# run over {0.5, 2, 8, 32} chose 32 for fedcomp and FedDA at tau = 1 and 0.5 for FedDA and FedMid at tau = 5: edges)
LMAX_MULTIPLES = tuple(2.0**k for k in range(-3, 8))  # 1/8 ... 128
CI_LMAX_MULTIPLES = tuple(2.0**k for k in range(-3, 8, 2))  # the same span in powers of 4
FLOAT64_FLOOR = 1e-12  # "machine precision": the float64 floor of e_r on this problem (2e-14 ... 3e-13 measured)
METHODS = ("fedcomp", "FedDA", "FedMid", "Fast-FedDA")


def eta_axis(multiples) -> tuple[tuple[str, ...], ...]:
    """eta_l = k / L_max of the run's own data set, for each k (quoted: the value is an interpolation)."""
    return candidates(tuple(f"eta_l='${{logistic_inv_lmax:${{dataset}},{k:g}}}'" for k in multiples))


def eta_tune(methods, multiples, by: str) -> Tune:
    """The same grid for every method, the winner per method and group by the lowest mean `by` over the seeds;
    a diverged candidate loses (non-finite), and where the entry counts rounds to 1e-4, so does one that ends
    more than 10x above 1e-4 after reaching it (the collapse rule, the stability guard)."""
    return Tune({m: eta_axis(multiples) for m in methods}, by=by, lower=True, by_first=True)


def per_round(table, method: str, group: str, metric: str) -> list[np.ndarray]:
    """The per-seed curves [rounds, 2] (round, value) of a cell (compare.curve)."""
    row = table[(table["method"] == method) & (table["group"] == group) & (table["metric"] == metric)]
    if row.empty:
        raise KeyError(f"no measured {metric} for {method} [{group}]")
    return [np.asarray(c, dtype=float).reshape(-1, 2) for c in row["series"].iloc[0]]


def same_rate(ours: list[np.ndarray], theirs: list[np.ndarray], floor: float = FLOAT64_FLOOR) -> tuple[bool, str]:
    """Target 9 on every seed and every round r >= 1 above the float64 floor: |log10(e_r / e'_r)| <= 0.05, and
    both curves decrease strictly from round 10 on (e_{r+1} < e_r) until they reach the floor, where the ratio
    and the steps are rounding noise. Rounds at which either is at the floor and the other is not still count."""
    if not ours or len(ours) != len(theirs) or any(len(c) == 0 for c in (*ours, *theirs)):
        return False, "not shown: a seed has no per-round error"
    gaps, rises = [], []
    for a, b in zip(ours, theirs):
        rounds = np.intersect1d(a[:, 0], b[:, 0])
        ea, eb = (c[np.isin(c[:, 0], rounds), 1] for c in (a, b))
        above = (ea > floor) | (eb > floor)
        if not above.any():
            return False, "not shown: both at the floor from round 1"
        gaps.append(float(np.abs(np.log10(ea[above] / eb[above])).max()))
        for e in (ea, eb):
            r0 = rounds >= 10
            live = e[r0][: int(np.argmax(e[r0] <= floor)) if (e[r0] <= floor).any() else None]
            rises.append(float(np.max(live[1:] / live[:-1])) if len(live) > 1 else 0.0)
    holds = max(gaps) <= 0.05 and max(rises) < 1
    return holds, (f"max |log10 ratio| per seed {', '.join(f'{g:.3g}' for g in gaps)}; largest e_(r+1)/e_r from round 10 "
                   f"to the floor {max(rises):.6g}")


def grid_text(multiples) -> str:
    return (f"eta = k/L_max, k in {{{', '.join(f'{k:g}' for k in multiples)}}} (FedMid's eta_s = 1, Fast-FedDA's gamma "
            "= 1/eta), the winner with the lowest mean error over the seeds; a diverged candidate loses")


TUNED, CI_TUNED = grid_text(LMAX_MULTIPLES), grid_text(CI_LMAX_MULTIPLES)
# measured: 8 arms x 4 step sizes x 3 seeds x 600 rounds took 2385 s on the 2-core CPU at load ~17 (41 ms per arm and
# round; the 2026-11-25 record ran 1 thread on a quiet CPU at ~11 ms); the full scale is ~15x the ci's arm-rounds
FIG2_FULL_COMPUTE = "8 arms x 11 step sizes x 5 seeds x 2000 rounds: ~2.5 h on a quiet 2-core CPU (~10 h loaded)"
FIG2_CI_COMPUTE = "8 arms x 6 step sizes x 3 seeds x 600 rounds: ~15 min on a quiet 2-core CPU (~1 h loaded)"


def fig2_arms(taus) -> tuple[Arm, ...]:
    arms = []
    for tau in taus:
        group, steps = f"tau={tau}", (f"local_steps={tau}",)
        arms += [Arm("fedcomp", group, steps), Arm("FedDA", group, (*steps, "algorithm=fedda")),
                 Arm("FedMid", group, steps, preset="composite/fig2_fedmid"),
                 Arm("Fast-FedDA", group, (*steps, "algorithm=fastfedda"))]
    return tuple(arms)


def check_fig2(table, scale: str) -> list[Claim]:
    """composite.md §7.2 targets 9-15 with the spec's thresholds at every scale (a ci run that is too short to
    reach them does not hold, with the numbers)."""
    e = {(m, g): seeds(table, m, g, "final_rel_error") for m, g in zip(table["method"], table["group"])}
    c1, d1, mid1, fast1 = (e[(m, "tau=1")] for m in ("fedcomp", "FedDA", "FedMid", "Fast-FedDA"))
    c5, d5, mid5, fast5 = (e[(m, "tau=5")] for m in ("fedcomp", "FedDA", "FedMid", "Fast-FedDA"))
    d5_min = seeds(table, "FedDA", "tau=5", "min_rel_error")
    r1, r5 = (seeds(table, "fedcomp", g, "rounds_to_0.0001") for g in ("tau=1", "tau=5"))
    reached = np.isfinite(r1)  # target 15: the rounds part on the seeds where tau = 1 reaches 1e-4 within R
    rate, rate_detail = same_rate(per_round(table, "fedcomp", "tau=1", "final_rel_error"),
                                  per_round(table, "FedDA", "tau=1", "final_rel_error"))
    # target 15's rounds part: nothing to compare (tau = 1 reached 1e-4 on no seed) shows nothing, it never holds
    rounds_part = bool(reached.any() and np.all(r5[reached] <= r1[reached] / 2))

    def errors(**named) -> str:
        return ", ".join(f"{k} [{', '.join(f'{x:.3g}' for x in np.asarray(v, dtype=float))}]" for k, v in named.items())

    return [
        narrowed(Claim("tau = 1: fedcomp and FedDA converge at the same rate: on every seed and every round "
                       f"|log10(e_r ratio)| <= 0.05, and both decrease every round from round 10 (target 9)", rate, rate_detail),
                 f"the rounds at which both errors are at the float64 floor (<= {FLOAT64_FLOOR:g}) are left out: "
                 "there the ratio and the steps are rounding noise"),
        Claim(f"tau = 1: fedcomp and FedDA converge to machine precision (the float64 floor: e_R <= {FLOAT64_FLOOR:g} "
              "on every seed)", bool(np.all(c1 <= FLOAT64_FLOOR) and np.all(d1 <= FLOAT64_FLOOR)),
              errors(fedcomp=c1, FedDA=d1)),
        Claim(f"tau = 5: fedcomp still converges precisely (the float64 floor: e_R <= {FLOAT64_FLOOR:g} on every seed)",
              bool(np.all(c5 <= FLOAT64_FLOOR)), errors(fedcomp=c5)),
        Claim("tau = 1: FedMid is the worst (>= 10x FedDA's error) and plateaus (e_R >= 0.05; target 10)",
              bool(np.all(mid1 >= 10 * d1) and np.all(mid1 >= 0.05)), errors(FedMid=mid1, FedDA=d1)),
        Claim("tau = 1: Fast-FedDA is slower than fedcomp (>= 5x its error; target 11)", bool(np.all(fast1 >= 5 * c1)),
              errors(**{"Fast-FedDA": fast1, "fedcomp": c1})),
        Claim("tau = 5: fedcomp converges exactly despite drift (median e_R <= 1e-8, every seed <= 1e-3; target 12)",
              float(np.median(c5)) <= 1e-8 and bool(np.all(c5 <= 1e-3)), f"median {np.median(c5):.2e}"),
        Claim("tau = 5: FedDA stalls in a neighbourhood (min_r e_r >= 5e-4 and >= 50x fedcomp's error; target 13)",
              bool(np.all(d5_min >= 5e-4) and np.all(d5 >= 50 * c5)), errors(FedDA_min=d5_min, FedDA=d5, fedcomp=c5)),
        Claim("tau = 5: FedMid (>= 3x FedDA) and Fast-FedDA (>= 10x fedcomp) are worse (target 14)",
              bool(np.all(mid5 >= 3 * d5) and np.all(fast5 >= 10 * c5)), errors(FedMid=mid5, FedDA=d5, **{"Fast-FedDA": fast5})),
        narrowed(Claim("local updates pay off: fedcomp's error at tau = 5 is below tau = 1 on every seed, and where tau = 1 "
                       "reaches 1e-4 tau = 5 needs at most half its rounds (target 15)",
                       bool(np.all((c5 < c1) | ((c5 <= FLOAT64_FLOOR) & (c1 <= FLOAT64_FLOOR)))) and rounds_part,
              ("" if reached.any() else "rounds part not shown: tau = 1 reached 1e-4 on no seed; ")
              + errors(**{"e_R tau=5": c5, "e_R tau=1": c1, "rounds to 1e-4 tau=5": r5, "rounds to 1e-4 tau=1": r1})),
                 f"a seed on which both final errors are at the float64 floor (<= {FLOAT64_FLOOR:g}, rounding noise) is "
                 "judged on its rounds part only"),
    ]


register(Reproduction(
    name="composite/fig2", paper=PAPER, title="Fig. 2: sparse logistic regression, full gradients, relative error, tau = 1 and tau > 1",
    claim="at tau = 1 fedcomp and FedDA coincide and FedMid/Fast-FedDA are slower; at tau > 1 fedcomp still converges "
          "exactly while FedDA only reaches a neighbourhood",
    metrics=(ERR, Metric("min_rel_error", "min", "stationarity"), rounds_to(1e-4, "stationarity", mode="min")),
    scales={
        "full": Scale(fig2_arms((1, 5)), (0, 1, 2, 3, 4), "cpu", FIG2_FULL_COMPUTE,
                      note=f"eta tuned per method and tau over {TUNED}",
                      tune=eta_tune(METHODS, LMAX_MULTIPLES, "final_rel_error")),
        "ci": Scale(fig2_arms((1, 5)), (1, 2, 3), "cpu", FIG2_CI_COMPUTE, config="composite/fig2/ci",
                    note=f"seeds 1-3, 600 rounds instead of 2000; eta tuned per method and tau over {CI_TUNED}; the spec's "
                         "thresholds (composite.md §7.2)",
                    tune=eta_tune(METHODS, CI_LMAX_MULTIPLES, "final_rel_error")),
    },
    check=check_fig2, plot=("stationarity",), plot_log=("stationarity",),
))


FIG3_METHODS = ("fedcomp", "FedDA", "Fast-FedDA")


def fig3_arms(bs) -> tuple[Arm, ...]:
    methods = {"fedcomp": (), "FedDA": ("algorithm=fedda",), "Fast-FedDA": ("algorithm=fastfedda",)}
    return tuple(Arm(m, f"b={b}", (f"batch_size={b}", *o)) for b in bs for m, o in methods.items())


def check_fig3(table, scale: str) -> list[Claim]:
    tail = {(m, b): seeds(table, m, f"b={b}", "tail_rel_error") for m in ("fedcomp", "FedDA", "Fast-FedDA") for b in (1, 20)}
    c1, c20 = tail[("fedcomp", 1)], tail[("fedcomp", 20)]
    # the paper's sentence ("beats FedDA and Fast-FedDA") is about both batch sizes: judged at b = 1 and at b = 20
    ratios = {(m, b): float(np.median(tail[(m, b)] / tail[("fedcomp", b)])) for m in ("FedDA", "Fast-FedDA") for b in (1, 20)}
    return [
        Claim("the batch size shrinks fedcomp's neighbourhood: b = 20 <= 1/3 of b = 1 on every seed", bool(np.all(3 * c20 <= c1)),
              f"ratios {np.round(c1 / c20, 1).tolist()}"),
        Claim("b = 1 and b = 20: fedcomp beats FedDA and Fast-FedDA (median ratio >= 2 at each batch size)",
              all(r >= 2 for r in ratios.values()), "; ".join(f"b = {b}: {m} {r:.3g}x" for (m, b), r in ratios.items())),
    ]


register(Reproduction(
    name="composite/fig3", paper=PAPER, title="Fig. 3: sparse logistic regression, minibatch gradients b = 1 and 20, tau = 5",
    claim="fedcomp converges to a neighbourhood that shrinks from b = 1 to b = 20 and beats FedDA and Fast-FedDA",
    metrics=(TAIL, ERR),
    scales={
        "full": Scale(fig3_arms((1, 20)), (0, 1, 2, 3, 4), "cpu", "6 arms x 11 step sizes x 5 seeds x 2000 rounds: ~2 h on a quiet "
                      "2-core CPU",
                      note=f"eta tuned per method and batch size over {TUNED}",
                      tune=eta_tune(FIG3_METHODS, LMAX_MULTIPLES, "tail_rel_error")),
        "ci": Scale(fig3_arms((1, 20)), (1, 2, 3), "cpu", "6 arms x 6 step sizes x 3 seeds x 600 rounds: ~12 min on a quiet "
                    "2-core CPU",
                    config="composite/fig3/ci", note=f"seeds 1-3, 600 rounds; eta tuned per method and batch size over {CI_TUNED}",
                    tune=eta_tune(FIG3_METHODS, CI_LMAX_MULTIPLES, "tail_rel_error")),
    },
    check=check_fig3, plot=("stationarity",), plot_log=("stationarity",),
))

def check_fig4(table, g: str) -> Claim:
    """fedcomp's accuracy >= FedDA's at rounds 50, 100, 200 and it reaches 95% strictly first (an unreached
    target never wins, accuracies that are all the same show nothing)."""
    text = f"{g}: fedcomp's accuracy >= FedDA's at rounds 50, 100, 200 and it reaches 95% first"
    parts = [best(text, ("fedcomp", value(table, "fedcomp", g, m)), {"FedDA": value(table, "FedDA", g, m)}) for m in ("acc@50", "acc@100", "acc@200")]
    parts.append(first_to_target(text, ("fedcomp", value(table, "fedcomp", g, "rounds_to_0.95")),
                                 {"FedDA": value(table, "FedDA", g, "rounds_to_0.95")}, strict=True))
    labels = ("acc@50", "acc@100", "acc@200", "rounds to 95%")
    return Claim(text, all(c.holds for c in parts), "; ".join(f"{k}: {c.detail}" for k, c in zip(labels, parts)))


FIG4_METRICS = (Metric("acc@50", "at", at=50, scale=100), Metric("acc@100", "at", at=100, scale=100),
                Metric("acc@200", "at", at=200, scale=100), rounds_to(0.95))
register(Reproduction(
    name="composite/fig4", paper=PAPER, title="Fig. 4: CNN on the heterogeneous MNIST split, tau = 5 and 10, fedcomp vs FedDA",
    claim="fedcomp reaches a higher test accuracy in fewer rounds than FedDA for both tau",
    metrics=FIG4_METRICS,
    scales={"full": Scale(tuple(Arm(m, f"tau={t}", (f"local_steps={t}", *o)) for t in (5, 10)
                                for m, o in (("fedcomp", ()), ("FedDA", ("algorithm=fedda",)))), (0, 1, 2), "gpu",
                          "4 arms x 3 seeds x 200 rounds of a 307k-parameter CNN: ~1 GPU-hour (CPU: ~10 h)", ("mnist",))},
    check=lambda table, scale: [check_fig4(table, g) for g in ("tau=5", "tau=10")],
))
