"""blocklab: which building block, at which depth and width, is best at a fixed parameter budget."""

__version__ = "0.1.0"


# served from their modules on first use: the DataFrame loaders import pandas, which
# `import blocklab` and the command line do not; `run` lives at the top layer (`blocklab.api`),
# which this bottom-layer module may name but never import at its own import
_LAZY = {
    "load_runs": "blocklab.frames",
    "load_rungs": "blocklab.frames",
    "load_curves": "blocklab.frames",
    "run": "blocklab.api",
    "plan": "blocklab.api",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'blocklab' has no attribute {name!r}")


def __dir__() -> list[str]:
    # what tab completion and help() offer: the lazy names too, though none is loaded yet
    return sorted({*globals(), *_LAZY})
