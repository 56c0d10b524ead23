"""Text corpora for the token tasks and their byte-level BPE, cached on disk.

The corpus is the Python standard library's own source (present wherever Python is) or a file the
user names. The tokenizer is trained on the training text alone; it and the encoded streams are
cached under $BLOCKLAB_CACHE/text (else ~/.cache/blocklab/text), keyed by a hash of the content.
Nothing is ever downloaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from blocklab.errors import UserError

SKIP_DIRS = frozenset({"site-packages", "__pycache__", "test", "tests", "idle_test"})
FORMAT = 1  # bump when the cached files change meaning


@dataclass(frozen=True)
class Corpus:
    train: tuple[str, ...]  # documents: files, or the one training part of a user's file
    test: tuple[str, ...]
    train_names: tuple[str, ...]  # relative paths of the files in each split; empty for `path`
    test_names: tuple[str, ...]
    source: str


class Streams(NamedTuple):
    tokenizer: object  # tokenizers.Tokenizer
    train: torch.Tensor  # (L_train,) int64 token ids of the training documents, concatenated
    test: torch.Tensor  # (L_test,)
    corpus: Corpus


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[str]:
    """Relative POSIX paths of the library's .py files, sorted, without tests or installed
    packages; os.walk does not follow directory links, so the list cannot cycle."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        rel = Path(dirpath).relative_to(root)
        out += [(rel / f).as_posix() for f in filenames if f.endswith(".py")]
    return sorted(out)


def in_test(rel: str, test_fraction: float) -> bool:
    """A hash of the path, not of the content or a random draw: the same split on every machine."""
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) / 2**32 < test_fraction


def read_stdlib(test_fraction: float, max_chars: int | None, root: Path | None = None) -> Corpus:
    """Split the library by file; `max_chars` keeps each split's first files (in sorted order)
    until its share of the characters is reached, so even a small cap leaves both splits text
    in the proportion asked for."""
    root = stdlib_root() if root is None else root
    cap = {True: float("inf"), False: float("inf")}
    if max_chars is not None:
        cap = {True: test_fraction * max_chars, False: (1 - test_fraction) * max_chars}
    docs: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
    chars = {True: 0, False: 0}
    for rel in stdlib_files(root):
        side = in_test(rel, test_fraction)
        if chars[side] >= cap[side]:
            if all(chars[s] >= cap[s] for s in cap):
                break
            continue
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        docs[side].append((rel, text))
        chars[side] += len(text)
    if not docs[False] or not docs[True]:
        raise UserError(
            f"the standard library corpus at {root} has {len(docs[False])} training and "
            f"{len(docs[True])} test files with test_fraction={test_fraction}; need one of each"
        )
    version = ".".join(map(str, sys.version_info[:3]))
    return Corpus(
        tuple(t for _, t in docs[False]),
        tuple(t for _, t in docs[True]),
        tuple(r for r, _ in docs[False]),
        tuple(r for r, _ in docs[True]),
        f"stdlib (Python {version})",
    )


def read_path(path: str, test_fraction: float, max_chars: int | None) -> Corpus:
    """Split a user's text by position: the last `test_fraction` of its characters is the test."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise UserError(f"cannot read text file {path!r}: {e.strerror or e}") from None
    text = text[:max_chars] if max_chars is not None else text
    cut = round(len(text) * (1 - test_fraction))
    return Corpus((text[:cut],), (text[cut:],), (), (), str(path))


def cache_dir() -> Path:
    root = os.environ.get("BLOCKLAB_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "blocklab") / "text"


def _key(corpus: Corpus, vocab: int, test_fraction: float, max_chars: int | None) -> str:
    import tokenizers

    h = hashlib.sha256()
    head = [FORMAT, tokenizers.__version__, vocab, test_fraction, max_chars, corpus.source]
    h.update(json.dumps(head).encode())
    for side, names in ((corpus.train, corpus.train_names), (corpus.test, corpus.test_names)):
        h.update(json.dumps([len(side), names]).encode())
        for doc in side:
            # the length first, so that no two different splits of the text hash alike
            h.update(f"{len(doc)}:".encode())
            h.update(doc.encode("utf-8", errors="surrogatepass"))
    return h.hexdigest()[:24]


def train_tokenizer(docs: tuple[str, ...], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # no prefix space: decoding gives back the text exactly, not with a space in front
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    return tok


def encode(tok, docs: tuple[str, ...]) -> np.ndarray:
    dtype = np.uint16 if tok.get_vocab_size() <= 2**16 else np.int32
    ids = [np.asarray(e.ids, dtype=dtype) for e in tok.encode_batch(list(docs))]
    return np.concatenate(ids) if ids else np.zeros(0, dtype)


def _save(path: Path, data: bytes | np.ndarray) -> None:
    """Write to a temporary file beside `path`, then rename: readers see all of it or nothing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                np.save(f, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@functools.lru_cache(maxsize=8)
def load(
    path: str | None, vocab: int, test_fraction: float, max_chars: int | None, where: Path
) -> Streams:
    """The trained tokenizer and both token streams, from `where` when cached there."""
    from tokenizers import Tokenizer

    if path is None:
        corpus = read_stdlib(test_fraction, max_chars)
    else:
        corpus = read_path(path, test_fraction, max_chars)
    key = _key(corpus, vocab, test_fraction, max_chars)
    files = {k: where / f"{key}.{k}" for k in ("train.npy", "test.npy", "tokenizer.json")}
    if all(f.is_file() for f in files.values()):
        tok = Tokenizer.from_file(str(files["tokenizer.json"]))
        train, test = np.load(files["train.npy"]), np.load(files["test.npy"])
    else:
        tok = train_tokenizer(corpus.train, vocab)
        train, test = encode(tok, corpus.train), encode(tok, corpus.test)
        try:
            where.mkdir(parents=True, exist_ok=True)
            _save(files["train.npy"], train)
            _save(files["test.npy"], test)
            _save(files["tokenizer.json"], tok.to_str().encode())
        except OSError as e:
            # workers still get their data, only computed again next time
            warnings.warn(f"text cache not written to {where}: {e}", stacklevel=2)
    ids = (torch.from_numpy(a.astype(np.int64)) for a in (train, test))  # (L,) each
    return Streams(tok, *ids, corpus)
