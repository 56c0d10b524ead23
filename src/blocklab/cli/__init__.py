"""The command line: `main` (the `blocklab` entry point) in `main.py`, the subcommand every
registered experiment gets in `experiment.py`, and one module per command that is not an
experiment (advise, bench, runs, seprank measure, theory). Building the parser imports no torch,
numpy or matplotlib: a command imports them when it runs.
"""

from blocklab.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
