"""blocklab: which building block, at which depth and width, is best at a fixed parameter budget."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # the DataFrame loaders import pandas, which `import blocklab` and the command line do not
    if name in ("load_runs", "load_curves"):
        from blocklab import frames

        return getattr(frames, name)
    raise AttributeError(f"module 'blocklab' has no attribute {name!r}")
