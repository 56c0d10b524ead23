"""The command line: `main` in `main.py`, and `command`, the `blocklab` entry point, which runs it
as a process of its own and ends that process; the subcommand every registered experiment gets in
`experiment.py`, and one module per command that is not an experiment (advise, bench, runs, seprank
measure, theory). Building the parser imports no torch, numpy or matplotlib: a command imports them
when it runs.
"""

from blocklab.cli.main import build_parser, command, main

__all__ = ["build_parser", "command", "main"]
