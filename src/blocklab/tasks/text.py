"""Causal language modelling on a corpus every machine has: the Python standard library's source.

A byte-level BPE (seed 001: 2000 tokens) is trained on the training files alone; an example is a
window of seq_len + 1 consecutive tokens, the input its first seq_len and the target at each
position the token that follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _corpus
from blocklab.tasks.base import Split, Task, TaskData


def windows(stream: torch.Tensor, offsets: torch.Tensor, seq_len: int) -> Split:
    """Inputs and next-token targets of the windows starting at `offsets` in `stream` (L,)."""
    w = stream[offsets[:, None] + torch.arange(seq_len + 1)]  # (n, T + 1)
    # copies, not views of one tensor: changing x in place must not change y
    return Split(w[:, :-1].contiguous(), w[:, 1:].contiguous())  # (n, T), (n, T)


@TASKS.register
class Text(Task):
    """Next-token prediction at every position, scored by accuracy and cross-entropy per token.

    The standard library is split by file (a hash of each path), a user's `path` by position (its
    last `test_fraction` of characters). Training and validation windows start at offsets drawn
    with the trial seed in the training stream; test windows are evenly spaced in the test stream
    and the same for every seed, so all trials are scored on one test set.
    """

    kind = "classification"
    sequence = True
    # nats per token: well below the unigram entropy of source code, above a good small model
    default_threshold = 4.0
    small_options: ClassVar[dict] = {
        "max_chars": 200_000,
        "vocab": 300,
        "seq_len": 16,
        "n_train": 256,
        "n_val": 32,
        "n_test": 64,
    }

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 64
        vocab: int = 2000  # BPE vocabulary asked for; a small corpus may realize fewer
        n_train: int = 16384
        n_val: int = 256
        n_test: int = 2048
        test_fraction: float = 0.1
        max_chars: int | None = None  # cap the corpus (fast small configurations)
        path: str | None = None  # a UTF-8 text file instead of the standard library

        def __post_init__(self):
            if self.vocab < 257:
                raise UserError(f"vocab must be >= 257 (256 bytes and a merge), got {self.vocab}")
            for key in ("seq_len", "n_train", "n_val", "n_test"):
                if getattr(self, key) < 1:
                    raise UserError(f"{key} must be >= 1, got {getattr(self, key)}")
            if not 0 < self.test_fraction < 1:
                raise UserError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
            if self.max_chars is not None and self.max_chars < 1:
                raise UserError(f"max_chars must be >= 1, got {self.max_chars}")
            if self.path is not None and not Path(self.path).expanduser().is_file():
                raise UserError(f"text file not found: {self.path}")

    def streams(self) -> _corpus.Streams:
        """The tokenizer (for decoding), both token streams and the corpus they come from."""
        o = self.options
        return _corpus.load(o.path, o.vocab, o.test_fraction, o.max_chars, _corpus.cache_dir())

    def make(self, seed: int) -> TaskData:
        o, T = self.options, self.options.seq_len
        s = self.streams()
        for name, stream in (("training", s.train), ("test", s.test)):
            if len(stream) < T + 1:
                raise UserError(
                    f"the {name} text has {len(stream)} tokens, too few for one window of "
                    f"seq_len + 1 = {T + 1}; lower seq_len or give more text"
                )
        g = torch.Generator().manual_seed(seed)
        starts = len(s.train) - T  # offsets whose window fits
        train = windows(s.train, torch.randint(starts, (o.n_train,), generator=g), T)
        # validation windows may share text with training windows: the validation loss only
        # chooses learning rates, and the test split, from held-out text, is what is reported
        val = windows(s.train, torch.randint(starts, (o.n_val,), generator=g), T)
        last = len(s.test) - T - 1
        spaced = torch.linspace(0, last, o.n_test, dtype=torch.float64).round().long()  # (n_test,)
        test = windows(s.test, spaced, T)
        vocab = s.tokenizer.get_vocab_size()
        c = s.corpus
        chars = [sum(map(len, docs)) for docs in (c.train, c.test)]
        info = {
            "source": c.source,
            "split_by": "file" if c.train_names else "position",
            "train_chars": chars[0],
            "test_chars": chars[1],
            "train_tokens": len(s.train),
            "test_tokens": len(s.test),
            "vocab": vocab,
            "tokens_per_char": len(s.train) / max(chars[0], 1),
        }
        if c.train_names:
            info |= {"train_files": len(c.train_names), "test_files": len(c.test_names)}
        return TaskData(
            train,
            val,
            test,
            self.kind,
            vocab,
            info,
            sequence=True,
            per_position=True,
            vocab=vocab,
        )
