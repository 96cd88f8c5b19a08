"""The numbers a run prints: four decimals where they say something, scientific notation where they would not."""

from __future__ import annotations

from fedbench.runs.single import format_summary, metric_text


def test_a_diverging_loss_is_printed_with_its_magnitude_not_thirty_digits():
    text = format_summary({"final_accuracy": 0.1, "best_accuracy": 0.25, "final_loss": 3.2e30,
                           "wall_time": 1.0, "rounds": 5, "run_id": "abc"}, rounds=5)
    assert "final test loss      3.2000e+30" in text
    assert "final test accuracy  0.1000   best 0.2500" in text


def test_metric_text_keeps_four_decimals_in_the_usual_range():
    assert [metric_text(v) for v in (2.2736, 0.0, 0.001, 999999.0)] == ["2.2736", "0.0000", "0.0010", "999999.0000"]
    assert [metric_text(v) for v in (1e-5, -2e7, float("nan"), float("inf"))] == ["1.0000e-05", "-2.0000e+07", "nan",
                                                                                   "inf"]
