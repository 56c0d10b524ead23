"""The contract battery of one kind (`blocklab.checks`) as a pytest test: every check over every
registered case, a check that does not apply skipped with its reason."""

import pytest

from blocklab.checks import NotApplicable


def contract_test(contract, cases, ids=str):
    @pytest.mark.parametrize("check", list(contract.CHECKS))
    @pytest.mark.parametrize("case", cases, ids=[ids(c) for c in cases])
    def test_contract(case, check):
        try:
            contract.CHECKS[check](case)
        except NotApplicable as exc:
            pytest.skip(str(exc))

    return test_contract
