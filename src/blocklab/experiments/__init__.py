"""Experiments: one file each; each turns a frozen config into stored trials and flat result rows."""
