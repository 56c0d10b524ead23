"""The package's timings file, `blocklab/timings.json`, read: its entries (one timed run of a
command at its defaults or a named form each: the command line, the wall time, the machine, the
fingerprint of the config it ran) and the fingerprint a config is recorded under. The command
line states an entry's time in `--help` and checks the file (`cli.timings`); an experiment's
plan reads the entry of the very config it prices (`experiments._pricing`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve().parent / "timings.json"  # blocklab/timings.json


def entries(path: str | Path = PATH) -> list[dict[str, Any]]:
    """The file's entries; none where there is no file."""
    path = Path(path)
    if not path.exists():
        return []
    return json.loads(path.read_text())["entries"]


def find(words: str, form: str = "", path: str | Path = PATH) -> dict[str, Any] | None:
    """The entry of command `words` run at `form` ("": the command's own defaults), if any."""
    found = (e for e in entries(path) if (e.get("command"), e.get("form")) == (words, form))
    return next(found, None)


def config_fingerprint(cfg: Any) -> str:
    """16 hex digits over the config as a run records it (`formatting.config_json`)."""
    from blocklab.formatting import config_json

    text = json.dumps(config_json(cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
