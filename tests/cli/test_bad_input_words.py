"""What a refusal says: each bad input below exits 2 with one line on stderr, no traceback, and
the words that tell its user what went wrong and what was likely meant. The generated battery
(`test_bad_input_battery`) holds every option to the form of a refusal; this sweep holds
chosen mistakes to their words: a degree refused as a degree wherever degrees are taken, a
block's or a task's option checked against the names it takes, an advice outside its fit's
reach, and the refusals a user meets first (an unknown block, command or choice, an --out that
is a file)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from blocklab.blocks import Block
from blocklab.cli import main
from blocklab.experiments import _arms

# what a degree may be, as every degree's refusal words it
DEGREE = "a degree is a real number >= 1 (2, 3, 2.5) or e"
LISTS = "or a per-layer list such as [3,2,3]"  # the degree sweep's degrees take lists too

# (the command's words, what every word of the one line must include, what it must not)
CASES = [
    # degrees
    (["degree-sweep", "--degrees", "2", "x"], ["degree 'x' is not a number", DEGREE, LISTS],
     ["unknown block"]),
    (["demo", "--degrees", "x"], ["degree 'x' is not a number", DEGREE, LISTS], ["unknown block"]),
    (["degree-sweep", "--degrees", "0.5"], ["degree '0.5' is below 1", DEGREE], []),
    (["degree-sweep", "--degrees", "nan"], ["degree 'nan' is not finite", DEGREE],
     ["unknown block"]),
    (["degree-sweep", "--degrees", "[3,x]"], ["degree 'x' is not a number", DEGREE], []),
    (["degree-sweep", "--degrees", "mlp"], ["'mlp' is a block; put it in baselines"], []),
    (["degree-sweep", "--baselines", "3"], ["baseline '3' is a degree; put it in degrees"], []),
    (["seprank", "degree", "--degrees", "x"], ["degree 'x' is not a number", DEGREE],
     ["unknown block", "per-layer"]),
    (["seprank", "degree", "--degrees", "[3,2]"], ["degree '[3,2]' is not a number", DEGREE], []),
    (["theory", "--degrees", "2", "x"], ["degree 'x' is not a number", DEGREE], []),
    (["seprank", "measure", "--block", "0.5"], ["degree '0.5' is below 1", DEGREE], []),
    # a block's options, against its constructor's names
    (["degree-sweep", "--baselines", "mlp(widht=3)"],
     ["unknown block 'mlp' option 'widht' (known: activation, bias)"], ["did you mean"]),
    (["degree-sweep", "--baselines", "mlp(activaton=relu)"],
     ["unknown block 'mlp' option 'activaton'; did you mean 'activation'?"], []),
    (["degree-sweep", "--baselines", "poly_attention(n=2,haeds=2)"],  # through its **kwargs
     ["option 'haeds'; did you mean 'heads'?", "known: bias, causal, head_dim, heads, n"], []),
    (["mad", "--blocks", "hyena(ordr=2)"], ["unknown block 'hyena' option 'ordr'",
                                             "did you mean 'order'?"], []),
    (["seprank", "measure", "--block", "softmax_attention(haeds=2)"],
     ["unknown block 'softmax_attention' option 'haeds'; did you mean 'heads'?"], []),
    # a task's options
    (["degree-sweep", "--task-option", "inptus=3"],
     ["unknown task 'teacher' option 'inptus'; did you mean 'inputs'?", "(known: "], []),
    (["degree-sweep", "--task-option", "inputs"],
     ["task option 'inputs' is not of the form key=value"], []),
    # advice out of its fit's reach
    (["advise", "--params", "1e3"],
     ["--params 1e3", "under half a layer (L* = 0.0035)", "depths 6-30", "N = 3.3e+06 to 2.4e+08",
      "from N = 1.5e+05"], []),
    (["advise", "--params", "1e30", "--json"], ["--params 1e30", "depths 6-30", "113%"], []),
    # the refusals a user meets first
    (["degree-sweep", "--baselines", "mpl"], ["unknown block 'mpl'; did you mean 'mlp'?"], []),
    (["degre-sweep"], ["invalid choice 'degre-sweep': did you mean 'degree-sweep'?"], []),
    (["degree-sweep", "--mode", "wdth"],
     ["invalid choice 'wdth': did you mean 'width'? (choose from width, depth)"], []),
]  # fmt: skip


class Reached(BaseException):
    """Work started: a bad input got through."""


@pytest.fixture
def stopped(monkeypatch):
    """Where work starts, a bad input that got through stops, so that none runs for long."""
    import blocklab.engine.sweep
    import blocklab.measures.seprank

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(blocklab.engine.sweep, "run", stop)
    monkeypatch.setattr(blocklab.measures.seprank, "separation_rank", stop)


def one_line(argv: list[str], capsys) -> str:
    """The one line a refused command prints, after checking it exits 2 with nothing else."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err, captured.err
    assert captured.err.count("\n") == 1 and captured.err.startswith("blocklab: error: ")
    return captured.err.strip()


@pytest.mark.parametrize(("words", "said", "unsaid"), CASES, ids=lambda v: " ".join(v)[:60])
def test_a_refusal_says_what_went_wrong(words, said, unsaid, tmp_path, capsys, stopped):
    experiment = words[0] in ("degree-sweep", "demo", "mad") or words[:2] == ["seprank", "degree"]
    argv = [*words, *(["--out", str(tmp_path / "run"), "--quiet"] if experiment else [])]
    line = one_line(argv, capsys)
    for word in said:
        assert word in line, line
    for word in unsaid:
        assert word not in line, line
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys, stopped):
    note = tmp_path / "notes.txt"
    note.write_text("a file, not a run directory")
    line = one_line(["degree-sweep", "--out", str(note), "--quiet"], capsys)
    assert f"--out {note} is a file: --out names a run directory" in line


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["degree-sweep", "--degrees", "2", "x"], "degree 'x' is not a number"),
        (["advise", "--params", "1e3"], "under half a layer"),
    ],
)
def test_the_installed_command_refuses_in_one_line(words, said, tmp_path):
    out = [] if words[0] == "advise" else ["--out", str(tmp_path / "run")]
    command = [sys.executable, "-m", "blocklab", *words, *out]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert said in proc.stderr


def test_advice_inside_the_fit_is_as_it_was_and_outside_it_says_so(capsys):
    assert main(["advise", "--params", "1e7"]) == 0
    inside = capsys.readouterr().out
    assert "depth L = 11 (L* = 10.69 +- 0.18; no other depth is within the fit's 1-sigma)" in inside
    assert "width dx = 275 +- 2 (sqrt(N / (12 L)))" in inside and "extrapolated" not in inside
    assert main(["advise", "--params", "175B"]) == 0
    outside = capsys.readouterr().out
    assert "L* = 80.51 +- 1.25" in outside
    assert (
        "extrapolated: L* lies outside the depths 6-30 the fit was measured at "
        "(N = 3.3e+06 to 2.4e+08): its +- assumes the fit's line holds out here"
    ) in outside


def test_a_tight_fit_shows_its_uncertainty_not_zero(tmp_path, capsys):
    from blocklab.analysis import depth_width as dw

    fit = dw.fit_transitions([6, 12, 18], [200, 260, 340], [1e-3, 1e-3, 1e-3], source="tight")
    (tmp_path / "fit.json").write_text(json.dumps(fit.to_dict()))
    assert main(["advise", "--params", "1e8", "--fit", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    advice = dw.advise(1e8, fit)
    assert advice.depth_sigma < 0.005 and advice.width_sigma < 0.5  # each would print as 0
    depth = re.search(r"L\* = [\d.]+ \+- ([\d.]+);", out)
    width = re.search(r"width dx = [\d.]+ \+- ([\d.]+) ", out)
    assert depth and width, out
    assert float(depth[1]) == pytest.approx(advice.depth_sigma, rel=0.05)
    assert float(width[1]) == pytest.approx(advice.width_sigma, rel=0.05)


def test_block_options_follow_a_kwargs_passed_up_and_not_one_a_block_keeps():
    from blocklab.blocks import BLOCKS

    assert _arms.block_options(BLOCKS.get("mlp")) == ["bias", "activation"]
    assert _arms.block_options(BLOCKS.get("poly_attention")) == [
        "n", "heads", "head_dim", "causal", "bias",
    ]  # fmt: skip
    assert "seq_len" not in _arms.block_options(BLOCKS.get("mixer"))  # the task sets it

    class Kept(Block):  # a plugin's block whose **options are its own
        def __init__(self, d_in: int, d_out: int, **options):
            super().__init__(d_in, d_out)

    assert _arms.block_options(Kept) is None  # not checked: no name would be refused
