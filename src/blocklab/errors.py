"""Errors a user can cause and fix: the CLI prints them as one line and exits 2."""


class UserError(ValueError):
    """Bad input (an unknown name, an impossible budget, a malformed option)."""
