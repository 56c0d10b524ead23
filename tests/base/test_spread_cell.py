"""A summary over seeds in the terminal: one precision for the cell (two significant digits of
the std), and an interval kept inside the metric's range."""

from __future__ import annotations

import pytest

from blocklab.formatting import with_spread


def test_one_precision_for_mean_std_and_interval():
    assert with_spread(0.02721, 0.008237, 0.00675, 0.04767) == "0.0272 ± 0.0082 [0.0067, 0.0477]"
    assert with_spread(0.256, 0.001279, 0.25, 0.26) == "0.2560 ± 0.0013 [0.2500, 0.2600]"


def test_an_interval_of_a_loss_does_not_reach_below_zero():
    assert with_spread(0.3303, 0.4442, -0.2271, 0.8861) == "0.33 ± 0.44 [0.00, 0.89]"


@pytest.mark.parametrize(("hi", "said"), [(1.2, "[0.800, 1.000]"), (0.99, "[0.800, 0.990]")])
def test_an_accuracy_interval_stops_at_one(hi, said):
    assert with_spread(0.9, 0.05, 0.8, hi, 0.0, 1.0).endswith(said)
