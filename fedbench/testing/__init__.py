"""The public contract kit: a user's own test suite checks their algorithm as fedbench checks its own.

    from fedbench.testing import Contract

    def test_fednova_keeps_the_contract(tmp_path):
        Contract(["algorithm=fednova"], config_dir="my_conf").check_all(tmp_path)

See fedbench/testing/contract.py for the checks and docs/own_method.md for a worked plugin."""

from fedbench.testing.contract import PROBLEM, Contract, assert_same_state

__all__ = ["PROBLEM", "Contract", "assert_same_state"]
