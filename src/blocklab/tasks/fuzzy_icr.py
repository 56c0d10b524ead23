"""Fuzzy in-context recall (mad-lab, Poli et al. 2024): keys and values are short token tuples.

Vocabulary: PAD = V - 1; of the m = V - 1 others, ids 0..m//2 - 1 are key tokens and m//2..m-1
value tokens. A key is a tuple of 1..k_motif distinct key tokens, a value a tuple of 1..v_motif
distinct value tokens; the two vocabularies are disjoint, so a maximal run of key tokens is one
key and the run of value tokens after it its value. Within a sequence each key has one value:
keys are drawn (tokens uniform without replacement), and a key's value (size uniform in
1..v_motif, tokens uniform without replacement) is drawn at its first appearance and reused at
every later one. Pairs are appended while they fit in T; the sequence is left-padded with PAD.

Key sizes: uniform in 1..k_motif in the training split; exactly k_motif in the validation and
test splits (mad-lab prompts with keys of the largest size at test time). Value sizes are uniform
in 1..v_motif in every split.

Labels (next-token form, aligned to the inputs), only for a pair whose key appeared as a whole key
at an earlier pair: at the key's last token the label is value[0]; at value token j the label is
value[j + 1] for j < len(value) - 1. Every other position (PAD, the other key tokens, the last
value token, and every token of a pair whose key is new) is IGNORE. A causal model decides each
label from the tokens up to it: the key run read so far names the earlier pair, and the position
within the value run names the token to recall.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Per position (n, T), the last position <= it where mask holds; -1 where none."""
    at = torch.where(mask, torch.arange(mask.shape[1]), -1)  # (n, T)
    return at.cummax(1).values


def fuzzy_recall(x: torch.Tensor, n_keys: int, pad: int) -> torch.Tensor:
    """The oracle's answer per position (n, T): parse the runs and recall from an earlier pair whose
    whole key equals the key run read so far; IGNORE where there is nothing to recall."""
    n, T = x.shape
    is_key = x < n_keys  # (n, T)
    is_value = (x >= n_keys) & (x != pad)  # (n, T)
    after = torch.zeros(n, 1, dtype=torch.bool)  # the edge of the sequence
    starts = is_key & ~torch.cat([after, is_key[:, :-1]], 1)  # (n, T) first token of a key run
    ends = is_key & torch.cat([is_value[:, 1:], after], 1)  # (n, T) a whole key, a value after it
    # same[:, i, j]: the key runs up to i and up to j are equally long and hold the same tokens;
    # compared offset by offset, so the loop runs over the longest key run, not over T
    run = torch.where(is_key, torch.arange(T) - last_index(starts), -1)  # (n, T) offset in run
    same = is_key[..., None] & (run[..., None] == run[:, None, :])  # (n, T, T)
    for back in range(int(run.max()) + 1):
        shifted = torch.cat([x[:, :1].expand(n, back), x[:, : T - back]], 1)  # (n, T) x_{i-back}
        same &= (shifted[..., None] == shifted[:, None, :]) | (run < back)[..., None]
    # a value token recalls through the key run before it, at its offset in the value run
    last_key = last_index(is_key)  # (n, T)
    anchor = torch.where(is_key, torch.arange(T), last_key)  # (n, T)
    offset = torch.where(is_key, -1, torch.arange(T) - last_key - 1)  # (n, T)
    real = (is_key | is_value) & (anchor >= 0)  # (n, T)
    anchor = anchor.clamp_min(0)
    key_start = last_index(starts).gather(1, anchor)  # (n, T) where the anchor's key run begins
    candidates = same.gather(1, anchor[..., None].expand(n, T, T)) & ends[:, None, :]
    candidates &= torch.arange(T) < key_start[..., None]  # (n, T, T): whole keys before the run
    j = (candidates * torch.arange(1, T + 1)).argmax(-1)  # (n, T) any one recalls the same
    at = (j + 2 + offset).clamp_max(T - 1)  # (n, T)
    answer = x.gather(1, at)  # (n, T)
    found = real & candidates.any(-1) & (answer >= n_keys) & (answer != pad)
    return torch.where(found, answer, IGNORE)


@TASKS.register
class FuzzyIcr(TokenTask):
    """In-context recall of value tuples by key tuples, keys of varying size in training."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 64  # T
        vocab: int = 16  # V: 7 key tokens, 8 value tokens, PAD
        k_motif: int = 2  # the largest key size
        v_motif: int = 2  # the largest value size
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            _tokens.at_least(self, 1, "k_motif", "v_motif")
            keys = (self.vocab - 1) // 2
            if keys < self.k_motif or self.vocab - 1 - keys < self.v_motif:
                raise UserError(
                    f"vocab {self.vocab} has {keys} key and {max(self.vocab - 1 - keys, 0)} value "
                    f"tokens, too few for k_motif = {self.k_motif} and v_motif = {self.v_motif} "
                    "distinct tokens: raise vocab"
                )
            if self.seq_len < 2 * (self.k_motif + self.v_motif):
                raise UserError(
                    f"seq_len must be >= 2 * (k_motif + v_motif) = "
                    f"{2 * (self.k_motif + self.v_motif)} (two pairs), got {self.seq_len}"
                )

    def ids(self) -> tuple[int, int, int]:
        """(key tokens K, value tokens, PAD): keys 0..K-1, values K..V-2, PAD V-1."""
        V = self.options.vocab
        return (V - 1) // 2, V - 1 - (V - 1) // 2, V - 1

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        T, km, vm = o.seq_len, o.k_motif, o.v_motif
        K, n_values, pad = self.ids()
        P = T // 2  # pairs take >= 2 tokens: no more can fit
        if split == "train":
            k_size = torch.randint(1, km + 1, (n, P), generator=g)  # (n, P)
        else:
            k_size = torch.full((n, P), km)
        v_size = torch.randint(1, vm + 1, (n, P), generator=g)  # (n, P)
        k_tok = torch.rand(n, P, K, generator=g).argsort(-1)[..., :km]  # (n, P, km) distinct
        k_tok = torch.where(torch.arange(km) < k_size[..., None], k_tok, -1)  # -1: past the key
        v_tok = K + torch.rand(n, P, n_values, generator=g).argsort(-1)[..., :vm]  # (n, P, vm)
        # each pair takes the value of its key's first appearance
        same = (k_tok[:, :, None] == k_tok[:, None]).all(-1)  # (n, P, P)
        first = same.to(torch.uint8).argmax(-1)  # (n, P) the first True
        repeat = first < torch.arange(P)  # (n, P)
        v_size = v_size.gather(1, first)
        v_tok = v_tok.gather(1, first[..., None].expand(-1, -1, vm))
        length = k_size + v_size  # (n, P)
        end = length.cumsum(1)  # (n, P)
        fits = end <= T  # (n, P) a prefix of the pairs
        start = T - (length * fits).sum(1, keepdim=True) + end - length  # (n, P) left padding
        s = torch.arange(km + vm)  # slot within a pair
        ks, vs = k_size[..., None], v_size[..., None]  # (n, P, 1)
        in_key = s < ks  # (n, P, S)
        t = s - ks  # (n, P, S) index in the value
        in_value = ~in_key & (t < vs)
        tok = torch.where(
            in_key,
            k_tok.gather(2, s.clamp_max(km - 1).expand(n, P, -1)),
            v_tok.gather(2, t.clamp(0, vm - 1)),
        )  # (n, P, S)
        nxt = v_tok.gather(2, (t + 1).clamp(0, vm - 1))  # (n, P, S) the value token after
        label = torch.where((s == ks - 1) | (in_value & (t < vs - 1)), nxt, IGNORE)
        label = torch.where(repeat[..., None], label, IGNORE)
        keep = fits[..., None] & (in_key | in_value)  # (n, P, S)
        row = torch.arange(n)[:, None, None].expand(n, P, km + vm)[keep]
        col = (start[..., None] + s)[keep]
        x = torch.full((n, T), pad)
        y = torch.full((n, T), IGNORE)
        x[row, col] = tok[keep]
        y[row, col] = label[keep]
        return x, y

    def make(self, seed: int) -> TaskData:
        o = self.options
        K, n_values, pad = self.ids()

        def oracle(x: torch.Tensor) -> torch.Tensor:
            return _tokens.one_hot(fuzzy_recall(x, K, pad), o.vocab)  # (n, T, V)

        info = {
            "key_tokens": [0, K - 1],
            "value_tokens": [K, K + n_values - 1],
            "pad": pad,
            "k_motif": o.k_motif,
            "v_motif": o.v_motif,
            "test_key_size": o.k_motif,
        }
        data = _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info)
        data.info["test_labelled"] = float((data.test.y != IGNORE).double().mean())
        return data
