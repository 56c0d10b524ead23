"""Analysis of finished trials: seed statistics and verdicts (stats), and the theory beside them."""
