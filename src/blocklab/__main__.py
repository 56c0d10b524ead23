"""`python -m blocklab`."""

from blocklab.cli import command

command()
