"""The task contract, at each task's `small_options`: the same seed gives the same data (and a
seed-dependent task another seed other data), shapes, dtypes and finite values as declared,
standardized targets or every class present, a perfect oracle, a constant predictor at chance,
balanced labels where reported, disjoint splits, the metric the kind implies, unknown options
refused with a hint, and fresh samples that follow the train split."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from blocklab.checks import NotApplicable, expect
from blocklab.errors import UserError
from blocklab.tasks import TASKS, make_task
from blocklab.tasks.base import IGNORE, score


def registry():
    return TASKS


class Case:
    """A task at its small options; its data made once per seed."""

    def __init__(self, name: str):
        self.name, self.example = name, {}
        self._data: dict[int, Any] = {}

    @property
    def cls(self):
        return TASKS.get(self.name)

    def task(self, **overrides):
        return self.cls(**{**getattr(self.cls, "small_options", {}), **overrides})

    def data(self, seed: int = 0):
        if seed not in self._data:
            self._data[seed] = self.task().make(seed)
        return self._data[seed]

    def __str__(self) -> str:
        return self.name


def cases(names: list[str] | None = None) -> list[Case]:
    return [Case(name) for name in (TASKS.names() if names is None else names)]


def splits(d) -> dict[str, Any]:
    return {"train": d.train, "val": d.val, "test": d.test}


def same_seed(case: Case) -> None:
    a, b = case.data(0), case.task().make(0)  # a fresh instance, not the cached result
    for key, s in splits(a).items():
        t = splits(b)[key]
        same = torch.equal(s.x, t.x) and torch.equal(s.y, t.y)
        expect(same, f"seed 0 made different {key} data twice")


def seed_dependence(case: Case) -> None:
    a, b = case.data(0), case.data(1)
    same = torch.equal(a.train.x, b.train.x) and torch.equal(a.train.y, b.train.y)
    # seed-independent tasks are fixed benchmarks: the trial seed varies only init and batch order
    if getattr(case.cls, "seed_dependent", True):
        expect(not same, "seeds 0 and 1 made the same data (set seed_dependent = False?)")
    else:
        expect(same, "seed_dependent is False, yet seeds 0 and 1 made different data")


def shapes(case: Case) -> None:
    d, cls = case.data(0), case.cls
    expect(d.kind == cls.kind and d.sequence == cls.sequence, "data kind/sequence != the task's")
    expect(case.task().seq_len == d.seq_len, "seq_len of the task != that of its data")
    expect(d.sequence or not d.per_position, "a target per position needs positions")
    for key, s in splits(d).items():
        expect(len(s) > 0 and s.x.shape[0] == s.y.shape[0], f"{key}: empty, or x and y differ")
        if d.vocab is None:
            expect(s.x.shape[1:] == d.input_shape, f"{key}: x shape != input_shape")
            expect(s.x.dtype == torch.float32, f"{key}: x is {s.x.dtype}, not float32")
            expect(s.x.ndim == (3 if d.sequence else 2), f"{key}: x is not (n, T, F) or (n, F)")
            expect(torch.isfinite(s.x).all(), f"{key}: x is not finite")
        else:
            expect(d.sequence and s.x.shape == (len(s), d.seq_len), f"{key}: ids are not (n, T)")
            expect(s.x.shape[1:] == d.input_shape, f"{key}: x shape != input_shape")
            expect(s.x.dtype == torch.int64, f"{key}: token ids are {s.x.dtype}, not int64")
            expect(s.x.min() >= 0 and s.x.max() < d.vocab, f"{key}: a token id outside the vocab")
        lead = (len(s), d.seq_len) if d.per_position else (len(s),)
        if d.kind == "regression":
            expect(s.y.shape == (*lead, d.n_out), f"{key}: y shape {tuple(s.y.shape)}")
            expect(s.y.dtype == torch.float32, f"{key}: y is {s.y.dtype}, not float32")
            expect(torch.isfinite(s.y).all(), f"{key}: y is not finite")
        else:
            expect(s.y.shape == lead, f"{key}: y shape {tuple(s.y.shape)}, expected {lead}")
            expect(s.y.dtype == torch.int64, f"{key}: labels are {s.y.dtype}, not int64")
            labels = s.y[s.y != IGNORE]  # positions without a target are not scored
            expect(labels.numel() > 0, f"{key}: every label is IGNORE")
            expect(labels.min() >= 0 and labels.max() < d.n_out, f"{key}: a label outside n_out")
    if d.vocab is not None:  # the next token is the class
        expect(d.vocab == d.n_out and d.kind == "classification", "vocab != n_out classes")


def targets(case: Case) -> None:
    d = case.data(0)
    y = d.train.y
    if d.kind == "regression" and d.tolerance is not None:
        # the tolerance is defined in raw units, so these targets stay unstandardized
        expect(torch.isfinite(y).all() and y.abs().max() > 0, "targets all zero or not finite")
        expect(d.oracle is not None, "a task scored by tolerance needs an oracle")
    elif d.kind == "regression":
        expect(y.mean(0).abs().max() < 1e-4, "train targets are not standardized (mean)")
        expect((y.std(0) - 1).abs().max() < 1e-3, "train targets are not standardized (std)")
    elif d.vocab is not None:
        # a vocabulary holds every byte, most never in the text: only check the targets vary
        expect(y.unique().numel() > min(d.n_out, y.numel()) // 100, "too few distinct targets")
    else:
        counts = torch.bincount(y[y != IGNORE], minlength=d.n_out)
        expect(counts.min() > 0, f"class {int(counts.argmin())} never appears in training")


def tolerance(case: Case) -> None:
    d = case.data(0)
    by = case.cls.scored_by_tolerance
    expect((d.tolerance is not None) == by, f"tolerance {d.tolerance} but scored_by_tolerance {by}")
    positive = d.tolerance is None or (d.kind == "regression" and d.tolerance > 0)
    expect(positive, "a tolerance needs a regression task and a positive value")


def oracle(case: Case) -> None:
    d = case.data(0)
    if d.sequence and d.vocab is None:
        # sequence tasks come with their definition as code; text has none to score perfectly
        expect(d.oracle is not None, "a sequence task needs an oracle")
    if d.oracle is None:
        raise NotApplicable("no oracle")
    for key, s in splits(d).items():
        _, metric, units = score(d.oracle(s.x), s.y, d.kind, d.tolerance)
        if d.kind == "regression" and d.tolerance is None:
            expect(metric / units < 1e-10, f"{key}: the oracle's mse is {metric / units:.2g}")
        else:
            expect(metric == units, f"{key}: the oracle's accuracy is {metric / units:.4g}")


def chance(case: Case) -> None:
    d = case.data(0)
    test = d.test
    if d.kind == "classification":
        counts = torch.bincount(d.train.y[d.train.y != IGNORE], minlength=d.n_out)
        majority = int(counts.argmax())
        out = torch.zeros(*test.y.shape, d.n_out)  # (n, [T,] C)
        out[..., majority] = 1.0
        _, correct, units = score(out, test.y, d.kind)
        scored = test.y[test.y != IGNORE]
        freq = torch.bincount(scored, minlength=d.n_out).double() / scored.numel()
        got, want = correct / units, float(freq[majority])
        expect(math.isclose(got, want, rel_tol=1e-6), f"majority accuracy {got:.4g} != {want:.4g}")
        # random logits pick a uniform class independent of the label: accuracy 1/C in expectation
        g = torch.Generator().manual_seed(0)
        _, correct, units = score(torch.randn(out.shape, generator=g), test.y, d.kind)
        p = 1 / d.n_out
        off = abs(correct / units - p)
        expect(off < 4 * (p * (1 - p) / units) ** 0.5, f"random logits score {correct / units:.3g}")
    elif d.tolerance is None:
        _, mse, units = score(d.train.y.mean(0).expand_as(test.y), test.y, d.kind)
        # ~1 by standardization; the small test splits (128 examples) spread it by ~0.15-0.2
        expect(mse / units > 0.7, f"the train mean scores mse {mse / units:.3g} on test")
    else:
        _, hits, units = score(torch.zeros_like(test.y), test.y, d.kind, d.tolerance)
        ch = d.info["chance"]
        expect(math.isclose(hits / units, ch, rel_tol=1e-6), "info['chance'] != zero's accuracy")
        _, hits, units = score(d.train.y.mean(0).expand_as(test.y), test.y, d.kind, d.tolerance)
        expect(abs(hits / units - ch) < 0.01, "the training mean is far from chance")
        expect(ch < 0.1, f"chance accuracy {ch:.3g} is not small")


def balance(case: Case) -> None:
    d = case.data(0)
    if "balance" not in d.info:
        raise NotApplicable("no balance reported")
    expect(0.35 <= d.info["balance"] <= 0.65, f"label balance {d.info['balance']:.3g}")


def disjoint(case: Case) -> None:
    d = case.data(0)
    rows = {k: {r.tobytes() for r in s.x.flatten(1).cpu().numpy()} for k, s in splits(d).items()}
    if d.info.get("split_by") in ("file", "position"):
        # windows of a text are held out by their source: validation windows come from the
        # training text (they may overlap training windows), test windows from text the training
        # stream never contains; text repeats, so a stray window may still coincide
        shared = len(rows["train"] & rows["test"])
        expect(shared <= 0.05 * len(rows["test"]), f"{shared} test windows are in training")
        return
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        expect(not rows[a] & rows[b], f"{len(rows[a] & rows[b])} inputs are in {a} and {b}")


def metric(case: Case) -> None:
    task = case.task()
    if task.kind == "regression" and task.scored_by_tolerance:
        expect(task.metric == "accuracy" and task.higher_is_better, "tolerance scores accuracy")
    elif task.kind == "regression":
        expect(task.metric == "mse" and not task.higher_is_better, "regression scores mse")
    else:
        expect(task.kind == "classification", f"unknown kind {task.kind!r}")
        expect(task.metric == "accuracy" and task.higher_is_better, "classes score accuracy")
    expect(task.name == case.name, f"registered as {case.name!r}, names itself {task.name!r}")
    expect(isinstance(task.threshold, float), "threshold is not a float")
    expect(isinstance(case.cls.default_threshold, float), "default_threshold is not a float")


def options(case: Case) -> None:
    first = dataclasses.fields(case.cls.Options)[0].name
    for bad, hint in ((first + "x", True), ("zzzqqq", False)):
        try:
            make_task(case.name, **{bad: 1})
        except UserError as exc:
            expect(not hint or "did you mean" in str(exc), f"option {bad!r}: no hint in {exc}")
        else:
            raise AssertionError(f"unknown option {bad!r} was accepted")


def samples(case: Case) -> None:
    """A generative task's sampler draws new examples of the same distribution, standardized as
    the train split: deterministic from its generator, different for another one."""
    d = case.data(0)
    if not d.online:
        raise NotApplicable("a fixed dataset")
    x, y = d.sample(4096, torch.Generator().manual_seed(1))
    again = d.sample(4096, torch.Generator().manual_seed(1))
    other = d.sample(4096, torch.Generator().manual_seed(2))
    expect(torch.equal(x, again[0]) and torch.equal(y, again[1]), "a generator drew twice apart")
    expect(not torch.equal(x, other[0]), "two generators drew the same inputs")
    expect(x.dtype == d.train.x.dtype and x.shape[1:] == d.input_shape, "x unlike the train split")
    expect(y.dtype == d.train.y.dtype and y.shape[1:] == d.train.y.shape[1:], "y unlike train's")
    expect(not (x[:, None] == d.train.x[None]).all(-1).any(), "a sample is a train example")
    # targets standardized by the train split: near mean 0, std 1 (256 train examples: loose)
    expect(y.mean(0).abs().max() < 0.25, "sampled targets are far from mean 0")
    expect((y.std(0) - 1).abs().max() < 0.25, "sampled targets are far from std 1")


CHECKS = {
    "same_seed": same_seed,
    "seed_dependence": seed_dependence,
    "shapes": shapes,
    "targets": targets,
    "tolerance": tolerance,
    "oracle": oracle,
    "chance": chance,
    "balance": balance,
    "disjoint": disjoint,
    "metric": metric,
    "options": options,
    "samples": samples,
}
