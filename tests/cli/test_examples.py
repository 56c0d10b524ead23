"""Every config under `examples/` runs through the CLI at a tiny size (one seed, a few steps, its
task's small options) and passes `input_rank`: a narrow embedding or a classifier's readout is a
bound the design chose, stated in the check's line and in `input_rank`'s `bound` and
`bound_reason`, never a refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from blocklab.cli import main
from blocklab.config import load_toml
from blocklab.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "examples").glob("*.toml"))
# config -> the bound its input_rank states (None: every arm sees every input); a config not
# listed is only run
BOUNDS = {
    # match3's 7 positions of 32 one-hot features, each embedded at width 16 (112 of 224)
    "attention_degrees": "embedding of width 16 at each of 7 positions",
    "mnist1d_degrees": "embedding of width 32",  # 40 features into width 32
    "mnist1d_logistic": "readout of 10 outputs",  # a linear map: 10 logits see 10 directions
    "mnist1d_mlp": None,
}


@pytest.fixture
def one_thread():
    """One torch thread: two threads of a tiny run on busy cores spin far longer than they work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(table: dict) -> list[str]:
    """Flags that shrink a config's run: one seed, five steps, its task's small options, one
    rate without extension where it searches one (Adam), few bootstrap draws."""
    flags = ["--seeds", "1", "--steps", "5", "--n-boot", "20", "--workers", "1", "--quiet"]
    for key, value in TASKS.get(table.get("task", "teacher")).small_options.items():
        flags += ["--task-option", f"{key}={value}"]
    if table.get("train", {}).get("optimizer") == "adam":
        flags += ["--lr-grid", "0.01", "--lr-extend", "0"]
    return flags


def test_every_example_config_is_here():
    assert {p.stem for p in CONFIGS} >= set(BOUNDS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_example_config_runs_at_a_tiny_size(path, tmp_path, capsys, one_thread):
    table = load_toml(path)
    out = tmp_path / path.stem
    code = main(["degree-sweep", "--config", str(path), "--out", str(out), "--json", *tiny(table)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    assert payload["status"]["line"].split(":")[0] in ("VERDICT", "INCONCLUSIVE", "NO VERDICT")
    assert payload["summaries"] and payload["failed"] == []
    check = next(c for c in payload["design_checks"] if c["name"] == "input_rank")
    assert check["passed"], check["detail"]
    seen = payload["input_rank"]
    assert seen and all(r["rank"] == r["bound"] <= r["inputs"] for r in seen.values()), seen
    if path.stem not in BOUNDS:
        return
    bound = BOUNDS[path.stem]
    if bound is None:
        assert all(r["bound_reason"] is None and r["bound"] == r["inputs"] for r in seen.values())
        assert check["detail"].startswith("every arm sees every input (")
    else:
        assert any(bound in (r["bound_reason"] or "") for r in seen.values()), seen
        assert "not refused" in check["detail"] and bound in check["detail"]
