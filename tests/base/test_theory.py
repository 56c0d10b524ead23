"""Seed 001's separation-rank bounds, their degree-d conjecture and seed 003's paths and collapse
bound, each checked against the formula written out here independently of blocklab.theory."""

import json
import math

import pytest

from blocklab import theory
from blocklab.cli import main
from blocklab.errors import UserError


def log3(x: float) -> float:
    return math.log(x, 3)


def theorem1(L, dx, H):  # seed 001 eq. 7
    a = -L + 2 - log3(2)
    return 3 ** (L - 2) * (log3(dx - H) + a), (3**L - 1) / 2 * log3(dx + H)


def theorem2(L, dx, H):  # seed 001 eq. 8
    b1, c1 = -L * (H / 2 + 1), L
    b2 = -dx * (1 + log3((dx - H) / 2) / 2)
    c2 = -2 * dx * log3(dx / (2 * math.sqrt(2 * math.e))) + log3(dx)
    return dx * L / 2 + b1 + b2, 2 * dx * L + c1 + c2


def test_a_linear_stack_has_no_predicted_multiplier():
    """h(1) = 0: a degree-1 stack's proxy never grows, so no budget matches d = 3's (the
    logistic example's arm); h(3) / h(d) elsewhere."""
    assert theory.predicted_multiplier("d=1", 1.0) is None
    assert theory.predicted_multiplier("d=2", 2.0) == pytest.approx(theory.h(3) / theory.h(2))


# ---- seed 001


def test_depth_threshold_is_log3_width():
    assert theory.depth_threshold(27) == pytest.approx(3)
    assert theory.depth_threshold(64) == pytest.approx(3.7856, abs=1e-4)


@pytest.mark.parametrize(
    "L, dx, regime",
    [
        (1, 64, "theorem 1"),
        (3, 64, "theorem 1"),
        (4, 64, "theorem 2"),
        (2, 8, "theorem 2"),
        (2, 9, "threshold"),
        (2, 10, "theorem 1"),
        (3, 27, "threshold"),
        (5, 243, "threshold"),  # log(243) / log(3) is 4.999999999999999 in floats
        (5, 242, "theorem 2"),
        (5, 244, "theorem 1"),
        (5, 9, "theorem 2"),
    ],
)
def test_regime_switches_at_log3_width(L, dx, regime):
    assert theory.sep_rank_regime(L, dx) == regime


def test_bounds_match_hand_computed_values():
    # L = 1 < log3 64: Theorem 1, 3^-1 (log3 63 + 1 - log3 2) and 1 * log3 65
    lo, hi = theory.sep_rank_bounds(1, 64, 1)
    assert lo == pytest.approx((log3(31.5) + 1) / 3) and lo == pytest.approx(1.380105, abs=1e-6)
    assert hi == pytest.approx(log3(65)) and hi == pytest.approx(3.799691, abs=1e-6)
    # L = 5 > log3 9: Theorem 2, 22.5 - 7.5 - 9 (1 + log3(4)/2)
    # and 90 + 5 - 18 log3(9 / (2 sqrt(2e))) + log3 9
    lo, hi = theory.sep_rank_bounds(5, 9, 1)
    assert lo == pytest.approx(15 - 9 - 4.5 * log3(4))
    assert hi == pytest.approx(97 - 18 * log3(9 / (2 * math.sqrt(2 * math.e))))
    assert (lo, hi) == pytest.approx(theorem2(5, 9, 1))
    # L = 2 > log3 8, two heads: 8 - 2 * 2 - 8 (1 + log3(3)/2) = -8 exactly (a trivial bound)
    lo, hi = theory.sep_rank_bounds(2, 8, 2)
    assert lo == pytest.approx(-8.0)
    assert hi == pytest.approx(34 - 16 * log3(8 / (2 * math.sqrt(2 * math.e))) + log3(8))


def test_threshold_returns_the_envelope_of_both_theorems():
    lo1, hi1 = theorem1(2, 9, 1)
    lo2, hi2 = theorem2(2, 9, 1)
    assert lo1 == pytest.approx(log3(4))  # 3^0 (log3 8 + 0 - log3 2)
    lo, hi = theory.sep_rank_bounds(2, 9, 1)
    assert lo == pytest.approx(min(lo1, lo2)) and hi == pytest.approx(max(hi1, hi2))


def test_theorem1_lower_is_below_upper_in_its_regime():
    checked = 0
    for dx in (4, 10, 28, 64, 100, 244, 1000, 10**6):
        for H in (1, 2, 3, 8):
            if dx <= H:
                continue
            for L in range(1, 14):
                if theory.sep_rank_regime(L, dx) != "theorem 1":
                    continue
                lo, hi = theory.sep_rank_bounds(L, dx, H)
                assert (lo, hi) == pytest.approx(theorem1(L, dx, H))
                assert lo <= hi
                checked += 1
    assert checked > 50


def test_theorem2_upper_grows_linearly_with_slope_2dx_plus_1():
    for dx, H in ((9, 1), (16, 3), (64, 1)):
        depths = [L for L in range(1, 12) if theory.sep_rank_regime(L, dx) == "theorem 2"]
        uppers = [theory.sep_rank_bounds(L, dx, H)[1] for L in depths]
        lowers = [theory.sep_rank_bounds(L, dx, H)[0] for L in depths]
        for a, b in zip(uppers, uppers[1:], strict=False):
            assert b - a == pytest.approx(2 * dx + 1)
        for a, b in zip(lowers, lowers[1:], strict=False):
            assert b - a == pytest.approx(dx / 2 - (H / 2 + 1))


def test_conjecture_at_degree_3_is_the_theorem():
    for L in range(1, 8):
        for dx in (2, 5, 9, 27, 64, 243, 1000):
            for H in (1, 2):
                if dx <= H:
                    continue
                expected = theory.sep_rank_bounds(L, dx, H)
                assert theory.conjectured_bounds(L, dx, H, 3) == expected
                assert theory.conjectured_bounds(L, dx, H, 3.0) == expected


def test_conjecture_at_degree_2_uses_base_2():
    # L = 3 < log2 64 = 6: 2^(3-2) (log2 63 - 3 + 2 - log2 2) and (2^3 - 1)/(2 - 1) log2 65
    lo, hi = theory.conjectured_bounds(3, 64, 1, 2)
    assert lo == pytest.approx(2 * (math.log2(63) - 2))
    assert hi == pytest.approx(7 * math.log2(65))
    # L = 7 > 6: Theorem 2 with log2
    lo, hi = theory.conjectured_bounds(7, 64, 1, 2)
    assert lo == pytest.approx(32 * 7 - 7 * 1.5 - 64 * (1 + math.log2(31.5) / 2))
    assert hi == pytest.approx(
        128 * 7 + 7 - 128 * math.log2(64 / (2 * math.sqrt(2 * math.e))) + math.log2(64)
    )
    # the threshold moves to log2 dx: 2^6 = 64
    lo1 = 2**4 * (math.log2(63) - 6 + 2 - 1)
    lo2 = 32 * 6 - 6 * 1.5 - 64 * (1 + math.log2(31.5) / 2)
    assert theory.conjectured_bounds(6, 64, 1, 2)[0] == pytest.approx(min(lo1, lo2))


# ---- seed 003


def test_path_counts_are_binomial_times_heads():
    assert theory.path_counts(3, 2) == [1, 6, 12, 8]
    assert theory.path_counts(0, 3) == [1]
    for L in range(0, 13):
        for H in (1, 2, 4):
            counts = theory.path_counts(L, H)
            assert len(counts) == L + 1
            assert counts == [math.comb(L, k) * H**k for k in range(L + 1)]
            assert sum(counts) == (H + 1) ** L
            assert all(isinstance(c, int) for c in counts)


def test_path_shares_sum_to_one_even_when_deep():
    assert theory.path_shares(2, 1) == [0.25, 0.5, 0.25]
    assert theory.path_shares(3, 2) == pytest.approx([1 / 27, 6 / 27, 12 / 27, 8 / 27])
    for L, H in ((6, 1), (40, 3), (3000, 1), (1000, 7)):  # (H+1)^L overflows a float here
        shares = theory.path_shares(L, H)
        assert sum(shares) == pytest.approx(1.0)
        assert all(0 <= s <= 1 for s in shares)
    deep = theory.path_shares(3000, 1)
    assert max(range(3001), key=deep.__getitem__) == 1500


def test_collapse_bound_matches_theorem_2_2():
    beta, d, r = 1.5, 16, 0.4
    k = 4 * beta / math.sqrt(d)
    assert theory.collapse_bound_log(1, beta, d, r) == pytest.approx(math.log(k) + 3 * math.log(r))
    assert theory.collapse_bound_log(3, beta, d, r) == pytest.approx(
        13 * math.log(k) + 27 * math.log(r)
    )
    assert theory.collapse_bound_log(0, beta, d, r) == pytest.approx(math.log(r))
    for L in range(5):
        assert theory.collapse_bound_ratio_log(L, beta, d, r) == pytest.approx(
            theory.collapse_bound_log(L, beta, d, r) - math.log(r)
        )
    assert theory.collapse_bound_ratio_log(2, beta, d, r) == pytest.approx(4 * math.log(k * r**2))
    # k r^2 = 0.24 < 1: the bound shrinks with depth; k r^2 = 6 > 1: vacuous, it grows
    shrinking = [theory.collapse_bound_ratio_log(L, beta, d, r) for L in range(1, 6)]
    growing = [theory.collapse_bound_ratio_log(L, beta, d, 2.0) for L in range(1, 6)]
    assert all(b < a < 0 for a, b in zip(shrinking, shrinking[1:], strict=False))
    assert all(b > a > 0 for a, b in zip(growing, growing[1:], strict=False))
    # a log that leaves the float range saturates instead of raising
    assert theory.collapse_bound_log(1000, beta, d, r) == -math.inf
    assert theory.collapse_bound_ratio_log(1000, beta, d, 2.0) == math.inf
    assert theory.collapse_bound_log(2, beta, d, 0) == -math.inf
    assert theory.collapse_bound_ratio_log(2, beta, d, 0.0) == -math.inf


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.depth_threshold(0),
        lambda: theory.sep_rank_regime(0, 9),
        lambda: theory.sep_rank_regime(2, 0),
        lambda: theory.sep_rank_bounds(0, 64, 1),
        lambda: theory.sep_rank_bounds(1, 64, 0),
        lambda: theory.sep_rank_bounds(1, 2, 2),
        lambda: theory.sep_rank_bounds(1, 1, 1),
        lambda: theory.sep_rank_bounds(1.5, 64, 1),
        lambda: theory.conjectured_bounds(2, 64, 1, 1),
        lambda: theory.conjectured_bounds(2, 64, 1, 0.5),
        lambda: theory.conjectured_bounds(2, 64, 1, math.nan),
        lambda: theory.path_counts(-1, 1),
        lambda: theory.path_counts(2, 0),
        lambda: theory.path_shares(2, -1),
        lambda: theory.collapse_bound_log(2, 0.0, 16, 0.5),
        lambda: theory.collapse_bound_log(2, 1.0, 0, 0.5),
        lambda: theory.collapse_bound_log(2, 1.0, 16, -0.5),
        lambda: theory.collapse_bound_ratio_log(-1, 1.0, 16, 0.5),
    ],
)
def test_bad_arguments_are_one_line_user_errors(call):
    with pytest.raises(UserError) as info:
        call()
    assert "\n" not in str(info.value) and str(info.value)


# ---- the command


def test_theory_command_json_has_all_three_tables(capsys):
    assert main(["theory", "--json", "--dx", "27", "--depths", "1", "2", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dx"] == 27 and out["heads"] == 1 and out["depths"] == [1, 2, 4]
    assert out["threshold"] == pytest.approx(3)
    assert [b["regime"] for b in out["bounds"]] == ["theorem 1", "theorem 1", "theorem 2"]
    for b in out["bounds"]:
        expected = (theorem1 if b["depth"] < 3 else theorem2)(b["depth"], 27, 1)
        assert (b["log3_lower"], b["log3_upper"]) == pytest.approx(expected)
    assert out["paths"]["depth"] == 4
    assert [r["count"] for r in out["paths"]["rows"]] == [1, 4, 6, 4, 1]
    assert [r["share"] for r in out["paths"]["rows"]] == [1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16]
    assert {round(r["degree"], 3) for r in out["rows"]} == {2.0, 2.718, 3.0, 4.0, 5.0}


def test_theory_command_text_marks_the_threshold(capsys):
    assert main(["theory", "--dx", "9", "--depths", "1", "2", "3", "--heads", "2"]) == 0
    out = capsys.readouterr().out
    assert "seed 001 Theorems 1-2" in out and "seed 003 Theorem 2.1" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["1", "theorem", "1"] in [r[:3] for r in rows]
    assert ["2", "threshold"] in [r[:2] for r in rows]
    assert ["3", "theorem", "2"] in [r[:3] for r in rows]
    assert "not a bound" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["theory", "--dx", "1"],
        ["theory", "--dx", "4", "--heads", "4"],
        ["theory", "--heads", "0"],
        ["theory", "--depths", "3", "0"],
        ["theory", "--dx", "x"],
    ],
)
def test_theory_command_bad_input_is_one_line(capsys, argv):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
