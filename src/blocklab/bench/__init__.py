"""`blocklab bench`: how fast this machine trains and fits small networks. `throughput` holds
the benchmark (the matmul ceiling, sequential against ensemble training of polynomial networks
and small language models, and `run_bench`, which measures every row in one run); `fits` times
the Levenberg-Marquardt fits of its rows (e) and (f).
"""

from blocklab.bench.throughput import (
    FIT_DEPTHS,
    LM_WIDTHS,
    MATMUL_OPS,
    SPLIT_DEPTHS,
    WIDTHS,
    BenchConfig,
    lm_rows,
    lm_step_flops,
    matmul_ceiling,
    matmul_share,
    run_bench,
    step_flops,
)

__all__ = [
    "FIT_DEPTHS",
    "LM_WIDTHS",
    "MATMUL_OPS",
    "SPLIT_DEPTHS",
    "WIDTHS",
    "BenchConfig",
    "lm_rows",
    "lm_step_flops",
    "matmul_ceiling",
    "matmul_share",
    "run_bench",
    "step_flops",
]
