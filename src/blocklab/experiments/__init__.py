"""Experiments, one file each: a frozen config in, stored trials and flat result rows out."""
