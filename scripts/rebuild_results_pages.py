"""Rebuilds docs/results.md and docs/results.html from the recorded results (fedbench/reproduce/results/: each
scale's <scale>.csv and each entry's stored sections), running nothing: after records made on several branches
or machines were merged. `fedbench reproduce ENTRY --record` rebuilds them itself.

    python scripts/rebuild_results_pages.py
"""

from __future__ import annotations

from fedbench.reproduce.results import rebuild

if __name__ == "__main__":
    for path in rebuild():
        print(f"rebuilt: {path}")
