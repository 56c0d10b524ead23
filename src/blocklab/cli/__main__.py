"""`python -m blocklab.cli`."""

from blocklab.cli import command

command()
