"""LoSAC (Chen et al., IEEE TNNLS 2023 / arXiv:2112.04224): Table 2, Figs. 2-7 (spec: papers/losac.md)."""

from __future__ import annotations

import numpy as np

from fedbench.reproduce.entry import (PROXY, Arm, Claim, Metric, Reproduction, Scale, Tune, axis, candidates, grid, register,
                                      rounds_to)
from fedbench.reproduce.compare import best, first_to_target, narrowed, seeds, value

PAPER = "losac"
SIX = {  # the six classifiers of Figs. 2-4 (losac.md §4.5)
    "FedAvg": ("algorithm=fedavg",),
    "FedSaga": ("algorithm=fedsaga",),
    "FedCM": ("algorithm=fedcm",),
    "SCAFFOLD": ("algorithm=scaffold",),
    "MimeSVRG": ("algorithm=mime_svrg",),
    "LoSAC": ("algorithm=losac",),
}
ACC = Metric("final_acc", "at", "test_accuracy", scale=100)
LOSS = Metric("final_loss", "at", "train_loss")

# ---------------------------------------------------------------------------------------------- Table 2
# Rows: SCAFFOLD and LoSAC with M = 2, 3, 5; columns: T = 2, 4, 6 per data set. The baselines' minibatch is
# one of the M blocks (A5): batch = n_i / M with n_i = 600 (MNIST), 73 (HAR), 92 (ESR) at N = 100.
N_I = {"MNIST": 600, "HAR": 73, "ESR": 92}
DATA = {"MNIST": ("dataset=losac/mnist",), "HAR": ("dataset=har",), "ESR": ("dataset=esr",)}


def table2_arms(datasets, ts, ms, n_i, consistent: bool = True) -> tuple[Arm, ...]:
    """LoSAC rows run the `paper` variant (eqs. 11, 13 as printed): Table 2's ESR round counts follow
    SCAFFOLD's divided by M, the mark of its M-times global-gradient term (losac.md §2.2.4), and
    the spec asks for both variants in headline comparisons: `consistent` rows are reported too."""
    arms = []
    for ds in datasets:
        for t in ts:
            group = f"{ds} T={t}"
            base = (*DATA.get(ds, ()), f"local_steps={t}")
            arms += [Arm(f"SCAFFOLD (M={m})", group, (*base, "algorithm=scaffold", f"batch_size={max(1, n_i[ds] // m)}")) for m in ms]
            arms += [Arm(f"LoSAC (M={m})", group, (*base, "algorithm=losac", f"algorithm.blocks={m}", "algorithm.variant=paper"))
                     for m in ms]
            if consistent:
                arms += [Arm(f"LoSAC consistent (M={m})", group, (*base, "algorithm=losac", f"algorithm.blocks={m}",
                                                                   "algorithm.variant=consistent")) for m in ms]
    return tuple(arms)


VARIANTS = {"LoSAC (": "the paper variant", "LoSAC consistent (": "the consistent variant"}


def check_table2(table, scale: str) -> list[Claim]:
    """Per LoSAC variant (the spec asks for both, losac.md §2.2.4): fewer rounds to 85% and a lower loss than
    SCAFFOLD with the same (M, T), in every cell the scale runs (the paper's claim is every cell, at every scale)."""
    claims = []
    for prefix, variant in VARIANTS.items():
        cells = [(r.method, r.group) for r in table.itertuples() if r.method.startswith(prefix) and r.metric == "rounds_to_0.85"]
        if not cells:
            continue
        rounds, loss = [], []
        for method, group in cells:
            ref = "SCAFFOLD (" + method.partition("(")[2]
            rounds.append(first_to_target("", (method, value(table, method, group, "rounds_to_0.85")),
                                          {ref: value(table, ref, group, "rounds_to_0.85")}, strict=True))
            loss.append(best("", (method, value(table, method, group, "loss@500")), {ref: value(table, ref, group, "loss@500")},
                             higher=False, strict=True))
        need = max(1, len(cells))  # the paper's claim is every cell, at every scale

        def tally(parts) -> str:
            unshown = [c.detail.partition(" (")[0] for c in parts if c.detail.startswith("not shown")]
            text = f"{sum(c.holds for c in parts)}/{len(cells)} cells, need {need}: " + "; ".join(
                f"{g} {c.detail}" for (_, g), c in zip(cells, parts))
            return text + (f"; {unshown[0]} in {len(unshown)} cells" if unshown else "")

        speed = [float(table[(table["method"] == m) & (table["group"] == g) & (table["metric"] == "rounds_to_0.85")]
                       ["speedup_value"].iloc[0]) for m, g in cells]
        mean_speed = float(np.mean(speed))  # NaN when a LoSAC cell did not reach 85%: no speed-up to average
        cut = "" if scale == "full" else f"{len(cells)} cells of digits stand for the paper's 27 of MNIST, HAR and ESR"
        claims += [
            narrowed(Claim(f"LoSAC ({variant}) reaches 85% test accuracy in fewer rounds than SCAFFOLD with the same (M, T)",
                           sum(c.holds for c in rounds) >= need, tally(rounds)), cut),
            narrowed(Claim(f"LoSAC ({variant}) needs on average at least 2x fewer rounds than SCAFFOLD with the same (M, T) "
                           "(\"100% in average\")", bool(np.isfinite(mean_speed) and mean_speed >= 2.0),
                           f"mean speed-up {mean_speed:.3g}" if np.isfinite(mean_speed) else
                           "not shown: a LoSAC cell did not reach 85% (" + ", ".join(f"{g} {s:.3g}" for (_, g), s in zip(cells, speed)) + ")"),
                     cut + ("; " if cut else "") + "the ESR part (\"more than 300%\") is not checked"
                     + ("" if scale == "full" else " (ESR not run)")),
            narrowed(Claim(f"LoSAC's ({variant}) loss at round 500 (the last round at ci scale) is below SCAFFOLD's",
                           sum(c.holds for c in loss) >= need, tally(loss)), cut),
        ]
    return claims


CI_ETAS = (0.002, 0.005, 0.01, 0.02)  # every method's step size, tuned per (M, T) cell


register(Reproduction(
    name="losac/table2", paper=PAPER, title="Table 2: rounds to 85%, loss and accuracy at round 500, SCAFFOLD vs LoSAC over (M, T)",
    claim="LoSAC needs fewer rounds than SCAFFOLD to reach 85% in every (data set, T, M) cell (mean speed-up 2.37x) "
          "and has the lower loss at round 500",
    metrics=(rounds_to(0.85), Metric("loss@500", "at", "train_loss", at=500), Metric("acc@500", "at", at=500, scale=100)),
    reference={f"LoSAC{v} (M={m})": f"SCAFFOLD (M={m})" for m in (2, 3, 5) for v in ("", " consistent")},
    scales={
        "full": Scale(table2_arms(("MNIST", "HAR", "ESR"), (2, 4, 6), (2, 3, 5), N_I), (0, 1, 2), "gpu",
                      "81 arms x 3 seeds x 2000 rounds of a 2NN: ~45 GPU-hours (CPU: days)", ("mnist", "har", "esr")),
        "ci": Scale(table2_arms(("digits",), (2, 6), (2, 5), {"digits": 14}), (0, 1, 2), "cpu", "~5 min on 2 CPU cores",
                    config="losac/table2/ci", paper_groups={"digits T=2": "MNIST T=2", "digits T=6": "MNIST T=6"},
                    tune=Tune({a.method: candidates(axis("eta_l", CI_ETAS))
                               for a in table2_arms(("digits",), (2,), (2, 5), {"digits": 14})}),
                    note="digits (1,437 train images) label-sorted over 100 clients (14 each), 10 per round, 2NN with 64 hidden "
                         "units, 200 rounds (loss@500/acc@500 read at the last round); SCAFFOLD and both LoSAC variants, "
                         "every method's eta tuned per (M, T) cell over {2e-3, 5e-3, 1e-2, 2e-2} instead of the paper's 1e-4; "
                         "cut: T in {2, 6} and M in {2, 5} only (the paper's T = 4 and M = 3 and the HAR and ESR blocks "
                         "are not run), 3 seeds"),
    },
    check=check_table2, plot=("test_accuracy", "train_loss"),
))


# ---------------------------------------------------------------------------------------------- Figs. 2-5
LOCAL_VR, GLOBAL_VR = ("FedAvg", "FedSaga"), ("SCAFFOLD", "MimeSVRG", "LoSAC")


def check_fig2(table, scale: str) -> list[Claim]:
    """Each named method its own part of the sentence: FedAvg and FedSaga each lose more accuracy from the first
    c to the last than every global-variance-reduction method (SCAFFOLD, MimeSVRG, LoSAC); FedCM loses less than
    each of FedAvg and FedSaga and more than each global one ("degrades but less")."""
    groups = list(dict.fromkeys(table["group"]))
    lo, hi = groups[0], groups[-1]
    methods = list(dict.fromkeys(table["method"]))
    drop = {m: value(table, m, lo, "final_acc") - value(table, m, hi, "final_acc") for m in methods}
    glob = {m: drop[m] for m in GLOBAL_VR if m in drop}
    cut = "" if len(groups) == len(CS) else f"only c = {lo.split('=')[1]} and {hi.split('=')[1]} (the intermediate c not run)"
    claims = [best(f"going from {lo} to {hi}, {m} loses more accuracy than each of {', '.join(glob)} "
                   "(global variance reduction is robust, local is not)", (f"{m} drop", drop[m]),
                   {f"{g} drop": d for g, d in glob.items()}, strict=True) for m in LOCAL_VR]
    if "FedCM" in drop:
        claims += [best(f"going from {lo} to {hi}, FedCM loses less accuracy than each of FedAvg and FedSaga",
                        ("FedCM drop", drop["FedCM"]), {f"{m} drop": drop[m] for m in LOCAL_VR}, higher=False, strict=True),
                   best(f"going from {lo} to {hi}, FedCM loses more accuracy than each of {', '.join(glob)}",
                        ("FedCM drop", drop["FedCM"]), {f"{g} drop": d for g, d in glob.items()}, strict=True)]
    return [narrowed(c, cut) for c in claims]


CS = (0, 20, 40, 60, 80, 100)
# the spec asks for both LoSAC presets in the headline comparisons (losac.md §2.2.4: Table 2, Figs. 2-5, 7); only
# Table 2 runs both, the figures run the consistent one: a cut, stated in each entry's notes
VARIANT_CUT = ("cut: LoSAC runs its consistent variant only (the spec asks for the paper variant too in Figs. 2-5 and 7, "
               "losac.md §2.2.4; only Table 2 runs both)")
register(Reproduction(
    name="losac/fig2", paper=PAPER, title="Fig. 2: all six methods under c% label-sorted data, MNIST 2NN, (R, T) = (100, 5)",
    claim="as c grows FedAvg and FedSaga degrade strongly, FedCM less, SCAFFOLD/MimeSVRG/LoSAC little",
    metrics=(ACC, LOSS),
    scales={
        "full": Scale(grid(SIX, {f"c={c}%": (f"partition.c={c / 100:g}",) for c in CS}), (0, 1, 2), "gpu",
                      "36 arms x 3 seeds x 100 rounds, N = 1000: ~3 GPU-hours", ("mnist",)),
        "ci": Scale(grid(SIX, {f"c={c}%": (f"partition.c={c / 100:g}",) for c in (0, 100)}),
                    (0, 1, 2), "cpu", "~2 min on 2 CPU cores",
                    config="losac/fig2/ci",
                    note="digits, N = 100, S = 10, c in {0, 100}%, 2NN with 64 hidden units, eta = 2e-3 (losac.md §8 target 9 "
                         "proxy), all six methods, every method's step one block of its client's data (M = 5 blocks of the "
                         "~14 samples: batch 3 for FedAvg, FedCM, SCAFFOLD, MimeSVRG); cut: the intermediate c values, "
                         "LoSAC's consistent variant only (not the paper variant), 3 seeds"),
    },
    check=check_fig2, plot=("train_loss", "test_accuracy"), notes=VARIANT_CUT,
))


def check_losac_beats_scaffold(table, scale: str) -> list[Claim]:
    groups = [g for g in dict.fromkeys(table["group"]) if "non-IID" in g or "IID" not in g]
    wins = [g for g in groups if best("", ("LoSAC", value(table, "LoSAC", g, "final_acc")),
                                      {"SCAFFOLD": value(table, "SCAFFOLD", g, "final_acc")}, strict=True).holds]
    return [Claim("LoSAC ends at a higher test accuracy than SCAFFOLD in every non-IID panel", bool(groups) and len(wins) == len(groups),
                  f"{len(wins)}/{len(groups)} panels")]


def split_groups(values, key) -> dict[str, tuple[str, ...]]:
    return {f"{split} {key}={v}": (f"partition={part}", f"{'clients_per_round' if key == 'S' else 'local_steps'}={v}")
            for split, part in (("IID", "iid"), ("non-IID", "label_sorted")) for v in values}


for fig, key, values in (("fig3", "S", (10, 20, 50, 100)), ("fig4", "T", (2, 5, 10))):
    register(Reproduction(
        name=f"losac/{fig}", paper=PAPER,
        title=f"Fig. {fig[-1]}: the six methods on MNIST 2NN, IID and non-IID, {key} varied",
        claim="non-IID degrades FedAvg and MimeSVRG; SCAFFOLD and LoSAC handle heterogeneity and LoSAC outperforms SCAFFOLD",
        metrics=(ACC, LOSS),
        scales={"full": Scale(grid(SIX, split_groups(values, key)), (0, 1, 2), "gpu",
                              f"{6 * 2 * len(values)} arms x 3 seeds x 500 rounds, N = 1000: ~10 GPU-hours", ("mnist",),
                              config=f"losac/{fig}/full")},
        check=check_losac_beats_scaffold, plot=("train_loss", "test_accuracy"), notes=VARIANT_CUT,
    ))

def check_fig5_esr(table) -> Claim:
    text = "ESR: LoSAC ends above SCAFFOLD and FedAvg in every panel"
    panels = [g for g in dict.fromkeys(table["group"]) if g.startswith("ESR")]
    each = [best(text, ("LoSAC", value(table, "LoSAC", g, "final_acc")),
                 {m: value(table, m, g, "final_acc") for m in ("SCAFFOLD", "FedAvg")}, strict=True) for g in panels]
    return Claim(text, bool(each) and all(c.holds for c in each), f"{sum(c.holds for c in each)}/{len(each)} panels")


FIG5 = {k: SIX[k] for k in ("FedAvg", "FedSaga", "FedCM", "SCAFFOLD", "LoSAC")}
register(Reproduction(
    name="losac/fig5", paper=PAPER, title="Fig. 5: HAR and ESR, non-IID, N = 100, S and T varied",
    claim="on HAR LoSAC with T = 2 beats SCAFFOLD with T = 8; on ESR LoSAC is above SCAFFOLD and FedAvg",
    metrics=(ACC, LOSS),
    scales={"full": Scale(grid(FIG5, {f"{ds} S={s} T={t}": (f"dataset={ds.lower()}", f"clients_per_round={s}", f"local_steps={t}")
                                      for ds in ("HAR", "ESR") for s in (5, 10, 20) for t in (2, 4, 8)}), (0, 1, 2), "gpu",
                          "90 arms x 3 seeds x 500 rounds: ~8 GPU-hours", ("har", "esr"))},
    check=lambda table, scale: [
        best("HAR: LoSAC with T = 2 ends above SCAFFOLD with T = 8 (S = 10)", ("LoSAC T=2", value(table, "LoSAC", "HAR S=10 T=2", "final_acc")),
             {"SCAFFOLD T=8": value(table, "SCAFFOLD", "HAR S=10 T=8", "final_acc")}, strict=True),
        check_fig5_esr(table),
    ],
    plot=("train_loss", "test_accuracy"), notes=VARIANT_CUT,
))

EXACT_GRADIENT = ("DSGD", "MimeSVRG")  # uploads that are client 1's exact gradient at x^5 (losac.md §5)


def check_fig6(table, scale: str) -> list[Claim]:
    claims = []
    for g in dict.fromkeys(table["group"]):
        ratios = {m: value(table, m, g, "dlg_error_ratio") for m in table[table["group"] == g]["method"]}
        exact = float(np.max([ratios[m] for m in EXACT_GRADIENT]))  # NaN (not measured) propagates: nothing to compare with
        for m, ratio in ratios.items():
            if m in EXACT_GRADIENT:
                claims.append(Claim(f"{m}: e_100 < e_0 on {g}", np.isfinite(ratio) and ratio < 1, f"e_100 / e_0 = {ratio:.3f}"))
            else:  # the paper's divergence at every scale; on the synthetic proxy also its weaker form (§8 target 15)
                claims.append(Claim(f"{m}: e_100 > e_0 on {g}", np.isfinite(ratio) and ratio > 1, f"e_100 / e_0 = {ratio:.3f}"))
                if scale == "ci":
                    claims.append(Claim(f"{PROXY} (the spec's proxy, the weaker form of losac.md §8 target 15): {m}: "
                                        f"the attack gains less than on an exact gradient on {g} (e_100 / e_0 above "
                                        f"DSGD's and MimeSVRG's)", np.isfinite(ratio) and ratio > exact,
                                        f"e_100 / e_0 = {ratio:.3f}, exact-gradient uploads <= {exact:.3f}"))
    return claims


FIG6 = {m: (f"algorithm={a}", *more) for m, a, *more in (("DSGD", "dsgd"), ("MimeSVRG", "mime_svrg"), ("FedAvg", "fedavg"),
                                                            ("SCAFFOLD", "scaffold"), ("LoSAC", "losac", "algorithm.blocks=1"))}
register(Reproduction(
    name="losac/fig6", paper=PAPER, title="Fig. 6: deep leakage from gradients (DLG) attack error on client 1",
    claim="the DLG reconstruction error decreases for DSGD and MimeSVRG and increases for FedAvg, SCAFFOLD and LoSAC",
    metrics=(Metric("dlg_error_ratio", "max", "dlg_error_ratio"),),  # logged once, after the last attack iteration
    scales={
        "full": Scale(grid(FIG6, {ds: (f"dataset={d}",) for ds, d in (("MNIST", "losac/mnist_binary"), ("HAR", "losac/har_binary"), ("ESR", "esr"))}),
                      (0, 1, 2), "cpu", "15 arms x 3 seeds x 5 rounds + 100 attack iterations: minutes", ("mnist", "har", "esr")),
        "ci": Scale(grid(FIG6, {"proxy": ()}), (0, 1, 2), "cpu", "~1 min on 2 CPU cores",
                    config="losac/fig6/ci",
                    note="synthetic sparse logistic regression (10 clients x 200 samples, 60 features), linear model, "
                         "full participation, round-5 uploads, 100 GD attack iterations; the paper's claim is checked as "
                         "stated, and beside it, labelled \"not the paper's claim\" and not counted among the paper's "
                         "claims, the spec's weaker proxy for FedAvg, SCAFFOLD and LoSAC (the attack gains less than on "
                         "DSGD's and MimeSVRG's exact gradients): on synthetic data the paper's divergence is not to be "
                         "expected (losac.md §5, §8 target 15); "
                         "cut: LoSAC with one block (M = 1) in its consistent variant only, 3 seeds"),
    },
    check=check_fig6, plot=("dlg_error",), runner="dlg",
    notes="the attack reads client 1's round-5 upload (losac.md §5.4); `fedbench attack dlg` runs the same evaluation ad hoc",
))

# ---------------------------------------------------------------------------------------------- Fig. 7
FIG7 = {
    "LoSAC-Prox": ("algorithm=losac", "algorithm.regularizer=nuclear", "algorithm.lam=0.1"),
    "SCAFFOLD-Prox": ("algorithm=scaffold/prox", "algorithm.regularizer=nuclear", "algorithm.lam=0.1", "algorithm.shape=[64,64]",
                      "batch_size=20"),
    "FedADMM": ("algorithm=fedadmm_lowrank", "eta_l=1e-4"),
}


def ranks(values) -> list:
    return [int(v) if np.isfinite(v) else "not measured" for v in values]


def check_fig7(table, scale: str) -> list[Claim]:
    claims = []
    for group in dict.fromkeys(table["group"]):
        r = int(group.split("=")[1])
        exact = seeds(table, "LoSAC-Prox", group, "final_rank")
        sc = seeds(table, "SCAFFOLD-Prox", group, "final_rank")
        claims.append(Claim(f"rank {r}: LoSAC-Prox recovers the exact rank on every seed", bool(len(exact) and np.all(exact == r)),
                            f"ranks {ranks(exact)}"))
        others = [m for m in ("SCAFFOLD-Prox", "FedADMM") if m in set(table["method"])]
        claims.append(best(f"rank {r}: LoSAC-Prox has the smallest recovery error",
                           ("LoSAC-Prox", value(table, "LoSAC-Prox", group, "final_rec_err")),
                           {m: value(table, m, group, "final_rec_err") for m in others}, higher=False, strict=True))
        if r > 2:  # r = 2 is borderline for SCAFFOLD-Prox (losac.md §8 target 7)
            # an unmeasured rank (NaN) is not "a different rank": the claim needs a measured rank on every seed
            claims.append(Claim(f"rank {r}: SCAFFOLD-Prox does not recover it (another rank on every seed)", bool(len(sc) and np.all(np.isfinite(sc)) and np.all(sc != r)),
                                f"ranks {ranks(sc)}"))
        if "FedADMM" in set(table["method"]):
            claims.append(best(f"rank {r}: FedADMM has the largest recovery error", ("FedADMM", value(table, "FedADMM", group, "final_rec_err")),
                               {m: value(table, m, group, "final_rec_err") for m in ("LoSAC-Prox", "SCAFFOLD-Prox")}, strict=True))
    return claims


register(Reproduction(
    name="losac/fig7", paper=PAPER, title="Fig. 7: low-rank matrix estimation, recovery error and rank against rounds",
    claim="LoSAC-Prox recovers the exact rank of X_G; SCAFFOLD-Prox does not; FedADMM is the worst",
    metrics=(Metric("final_rec_err", "at", "rec_err"), Metric("final_rank", "at", "rank")),
    scales={
        "full": Scale(grid(FIG7, {f"rank={r}": (f"dataset.rank={r}",) for r in (32, 16, 8, 4, 2)}), (0, 1, 2), "cpu",
                      "15 arms x 3 seeds x 600 rounds: ~45 min on 2 CPU cores"),
        "ci": Scale(grid({k: FIG7[k] for k in ("LoSAC-Prox", "SCAFFOLD-Prox")}, {f"rank={r}": (f"dataset.rank={r}",) for r in (8, 2)}),
                    (0, 1, 2), "cpu", "~8 min on 2 CPU cores", config="losac/fig7/ci",
                    note="ranks 8 and 2 only, 3 seeds, 400 rounds (LoSAC-Prox reaches the exact rank by round 300, losac.md §8 "
                         "target 5); cut: FedADMM (its 20 proximal steps per local step do not fit the ci budget; its claim, "
                         "the largest error, is checked at full scale only), LoSAC's consistent variant only (the paper "
                         "variant is not run)"),
    },
    check=check_fig7, plot=("rec_err", "rank"), plot_log=("rec_err",), notes=VARIANT_CUT,
))
