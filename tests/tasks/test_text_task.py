"""Task-specific checks of `text`: the corpus, its split, the tokenizer, the cache, the windows."""

import random

import pytest
import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _corpus, make_task

SMALL = TASKS.get("text").small_options
WORDS = ["def", "return", "self", "import", "class", "lambda", "yield", "value", "index"]


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKLAB_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        task = make_task("text", **SMALL)
        yield task, task.streams(), {seed: task.make(seed) for seed in (0, 1)}


def words(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(WORDS) + rng.choice(" \n") for _ in range(n))


def text_file(tmp_path, train: str, test: str):
    """A file whose last 10% of characters is exactly `test`."""
    assert len(test) * 9 == len(train)
    path = tmp_path / "corpus.txt"
    path.write_text(train + test, encoding="utf-8")
    return str(path)


def test_file_list_sorted_without_tests_or_packages(tmp_path):
    for rel in ["b.py", "pkg/c.py", "pkg/a.txt", "site-packages/x.py", "test/y.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("pass\n")
    for rel in ["pkg/tests/z.py", "pkg/__pycache__/w.py", "idlelib/idle_test/v.py", "a.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("pass\n")
    assert _corpus.stdlib_files(tmp_path) == ["a.py", "b.py", "pkg/c.py"]
    files = _corpus.stdlib_files(_corpus.stdlib_root())
    assert files == sorted(files) and "os.py" in files and len(files) > 100
    assert not any(_corpus.SKIP_DIRS & set(f.split("/")) for f in files)


def test_split_by_file_and_stable():
    a, b = (_corpus.read_stdlib(0.1, 200_000) for _ in range(2))
    assert a == b
    assert a.train_names and a.test_names and not set(a.train_names) & set(a.test_names)
    assert all(_corpus.in_test(f, 0.1) for f in a.test_names)
    assert not any(_corpus.in_test(f, 0.1) for f in a.train_names)
    # a hash of the path alone: the same answers on every machine, whatever PYTHONHASHSEED
    assert _corpus.in_test("__phello__/spam.py", 0.1) and not _corpus.in_test("os.py", 0.1)
    files = _corpus.stdlib_files(_corpus.stdlib_root())
    assert 0.05 < sum(_corpus.in_test(f, 0.1) for f in files) / len(files) < 0.2


@pytest.mark.parametrize("leak", [False, True])
def test_tokenizer_trained_on_training_text_only(tmp_path, leak):
    marker = "zqxjv " * 300
    train, test = words(3000), marker
    train = train[: 9 * len(test)]
    if leak:  # the control: the same marker in the training part is learned as a token
        train = marker * 8 + train[: len(test)]
    task = make_task("text", path=text_file(tmp_path, train, test), vocab=1000, seq_len=8)
    s = task.streams()
    assert s.corpus.train == (train,) and s.corpus.test == (test,)
    learned = any("zq" in t or "xj" in t for t in s.tokenizer.get_vocab())
    assert learned == leak


def test_tokenizer_deterministic():
    docs = (words(2000, seed=1), words(500, seed=2))
    a, b = (_corpus.train_tokenizer(docs, 300).to_str() for _ in range(2))
    assert a == b


def test_cache_reused_and_keyed_by_directory(tmp_path, monkeypatch):
    task = make_task("text", **SMALL)
    first = task.make(0)
    assert len(list((tmp_path / "cache" / "text").glob("*"))) == 3  # tokenizer, two streams
    _corpus.load.cache_clear()

    def refuse(*args):
        raise AssertionError("trained again")

    monkeypatch.setattr(_corpus, "train_tokenizer", refuse)
    again = make_task("text", **SMALL).make(0)
    assert torch.equal(first.train.x, again.train.x) and first.info == again.info
    monkeypatch.setenv("BLOCKLAB_CACHE", str(tmp_path / "other"))
    with pytest.raises(AssertionError, match="trained again"):
        task.make(0)


def test_unwritable_cache_computes_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BLOCKLAB_CACHE", str(blocker))  # a file: no directory can be made in it
    with pytest.warns(UserWarning, match="not written"):
        d = make_task("text", path=text_file(tmp_path, words(1000)[:2700], "x = 1\n" * 50)).make(0)
    assert d.train.x.shape == (16384, 64)


def test_targets_are_the_next_tokens(small_data):
    task, s, by_seed = small_data
    d, T = by_seed[0], task.options.seq_len
    for split in (d.train, d.val, d.test):
        assert torch.equal(split.x[:, 1:], split.y[:, :-1])
    offsets = torch.linspace(0, len(s.test) - T - 1, len(d.test)).round().long()
    for i in (0, 7, len(d.test) - 1):
        assert torch.equal(d.test.x[i], s.test[offsets[i] : offsets[i] + T])
        assert d.test.y[i, -1] == s.test[offsets[i] + T]


def test_windows_decode_to_corpus_text(small_data):
    _, s, by_seed = small_data
    d = by_seed[0]
    for split, docs in ((d.train, s.corpus.train), (d.test, s.corpus.test)):
        text = "".join(docs)
        decoded = [s.tokenizer.decode(w.tolist()) for w in torch.cat([split.x, split.y[:, -1:]], 1)]
        # a window may cut a multibyte character, which decodes to the replacement character
        whole = [w for w in decoded if "\ufffd" not in w]
        assert len(whole) > 0.9 * len(decoded)
        assert all(w in text for w in whole)


def test_seed_changes_training_windows_only(small_data):
    task, _, by_seed = small_data
    a, b = by_seed[0], by_seed[1]
    assert not torch.equal(a.train.x, b.train.x) and not torch.equal(a.val.x, b.val.x)
    assert torch.equal(a.test.x, b.test.x) and torch.equal(a.test.y, b.test.y)
    c = make_task("text", **SMALL).make(0)
    assert all(torch.equal(getattr(a, k).x, getattr(c, k).x) for k in ("train", "val", "test"))
    assert task.seed_dependent and a.vocab == a.n_out == a.info["vocab"] <= 300


def test_user_path(tmp_path):
    path = text_file(tmp_path, words(2000)[:9000], words(300, seed=3)[:1000])
    d = make_task("text", path=path, vocab=300, seq_len=8, n_train=64).make(0)
    assert d.info["split_by"] == "position" and d.info["source"] == path
    assert (d.info["train_chars"], d.info["test_chars"]) == (9000, 1000)
    assert "train_files" not in d.info and d.train.x.shape == (64, 8)


def test_missing_path_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found") as err:
        make_task("text", path=str(tmp_path / "absent.txt"))
    assert "\n" not in str(err.value)


def test_too_short_stream_says_how_many_tokens(tmp_path):
    path = text_file(tmp_path, words(1000)[:1800], "yield " * 33 + "yi")
    with pytest.raises(UserError, match=r"test text has \d+ tokens"):
        make_task("text", path=path, seq_len=64).make(0)


def test_no_test_files_is_a_user_error():
    with pytest.raises(UserError, match="need one of each"):
        make_task("text", test_fraction=1e-9, max_chars=1000).make(0)


@pytest.mark.parametrize(
    "opts",
    [
        {"vocab": 256},
        {"seq_len": 0},
        {"n_train": 0},
        {"n_val": 0},
        {"n_test": 0},
        {"test_fraction": 0.0},
        {"test_fraction": 1.0},
        {"max_chars": 0},
    ],
)
def test_bad_options(opts):
    with pytest.raises(UserError):
        make_task("text", **opts)
