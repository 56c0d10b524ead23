"""Networks: embedding -> p layers (norm, block, activation, optional residual, optional
feed-forward) -> readout. Vector inputs (B, F) or sequences (B, T, F), read out per position or
mean-pooled.

An `Arm` (`blocklab.specs`) names what a comparison varies; here it becomes layers: a polynomial
degree (integer -> `poly`, real -> `fractional`), a per-layer degree pattern (a mixed stack,
cycled to the depth), or another registered block with its options, such as the `mlp` control or
`poly_attention(n=2)`.

With a token-mixing block the switches give the transformer family: seed 001's analyzed network
(eq. 3: `linearized_attention`, norm none, no feed-forward) and the common one (eq. 1-2:
`softmax_attention`, layer norm, residual, feed-forward relu4x; 12 L D^2 parameters bias-free).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from blocklab.blocks import BLOCKS, make_block, per_member
from blocklab.errors import UserError
from blocklab.options import parse_pairs, split_list
from blocklab.specs import FEED_FORWARD, NORMS, Arm, NetShape, format_degree, parse_degree


def mixes_tokens(arm: Arm) -> bool:
    return not arm.degrees and BLOCKS.get(arm.block).mixes_tokens


def layer_blocks(
    arm: Arm, depth: int, bias: bool = False, seq_len: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The (block name, options) of each of `depth` layers: the degree pattern cycled, or the
    arm's block in every layer."""
    if not arm.degrees:
        kw = dict(arm.kwargs)
        if BLOCKS.get(arm.block).needs_seq_len:
            if seq_len is None:
                raise UserError(f"block {arm.block} needs a sequence task")
            kw["seq_len"] = seq_len
        return [(arm.block, kw)] * depth
    out = []
    for i in range(depth):
        d = arm.degrees[i % len(arm.degrees)]
        if float(d).is_integer():
            out.append(("poly", {"degree": int(d), "bias": bias, **arm.kwargs}))
        elif bias:
            raise UserError(f"degree {d:g} has no bias form (the fractional block is bias-free)")
        else:
            out.append(("fractional", {"degree": float(d), **arm.kwargs}))
    return out


def code_modules(arm: Arm, bias: bool = False) -> list[str]:
    """The modules whose code makes this arm's blocks (`blocklab.fingerprint`)."""
    modules = []
    for name, kwargs in layer_blocks(arm, 1 if not arm.degrees else len(arm.degrees), bias, 1):
        cls = BLOCKS.get(name)
        modules += [cls.__module__, *cls.code_modules(**kwargs)]
    return modules


def block_params(
    arm: Arm,
    depth: int,
    width: int,
    bias: bool = False,
    ff: str = "none",
    seq_len: int | None = None,
) -> int:
    """Parameters of the layers: blocks and feed-forward sublayers (the budgeted part)."""
    blocks = sum(
        BLOCKS.get(name).count_params(width, width, **kw)
        for name, kw in layer_blocks(arm, depth, bias, seq_len)
    )
    return blocks + depth * ff_params(ff, width, bias)


def parse_arm(text: str) -> Arm:
    """'3' | 'e' | '2.5' | '[3,2,3]' -> a polynomial arm; a block name with optional options
    ('mlp', 'softmax_attention(heads=2)', 'poly_attention(n=2)') -> that block."""
    s = str(text).strip().replace(" ", "")
    if s.startswith("[") and s.endswith("]"):
        degrees = tuple(parse_degree(p) for p in s[1:-1].split(",") if p)
        if not degrees:
            raise UserError(f"empty degree list {text!r}")
        return Arm("mix[" + ",".join(format_degree(d) for d in degrees) + "]", "poly", degrees)
    name, _, rest = s.partition("(")
    if rest or (name[:1].isalpha() and name.lower() != "e"):
        if rest and not rest.endswith(")"):
            raise UserError(f"arm {text!r}: options go in parentheses, e.g. poly_attention(n=2)")
        cls = BLOCKS.get(name)  # unknown names fail with "did you mean"
        if name in ("poly", "fractional"):
            raise UserError(f"give the {name} family as a degree ('3', 'e', '[3,2]'), not {s!r}")
        kwargs = {
            k: _literal(v) for k, v in parse_pairs(split_list(rest[:-1]), f"arm {name}").items()
        }
        try:
            probe = cls(4, 4, **kwargs, **({"seq_len": 4} if cls.needs_seq_len else {}))
        except TypeError as exc:
            raise UserError(f"arm {text!r}: {exc}") from None
        return Arm(s, name, (), kwargs, probe.degree)
    d = parse_degree(s)
    return Arm(f"d={format_degree(d)}", "poly", (d,))


def _literal(text: str) -> Any:
    """A block option from text: int, float, bool or string."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def ff_params(kind: str, width: int, bias: bool) -> int:
    k = _expansion(kind)
    return 2 * k * width * width + (k * width + width if bias and k else 0)


def _expansion(kind: str) -> int:
    if kind not in FEED_FORWARD:
        raise UserError(f"feed-forward must be one of {', '.join(FEED_FORWARD)}, got {kind!r}")
    return FEED_FORWARD[kind]


# keyed by the names of specs.ACTIVATIONS
ACTIVATIONS = {"none": nn.Identity, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


# x / sqrt(mean(x^2) + eps): the residual stream has unit scale, and without a floor the map
# amplifies without bound near x = 0. At widths of 3 or 4 the stream passes near 0 for some
# inputs, and a fit then leaves spikes between its training points: measured on a 2-input teacher
# at width 3, d=3 at depth 8, test MSE 3.9x its training MSE at torch's default eps, 1.09x at
# 1e-2 (the q50 and q90 errors agreed; the maximum test error was 40x the training one)
RMS_EPS = 1e-2


def make_norm(kind: str, width: int) -> nn.Module:
    # no affine weights: the budget counts blocks only, and norms must not add hidden parameters
    if kind == "layer":
        return nn.LayerNorm(width, elementwise_affine=False)
    if kind == "rms":
        return nn.RMSNorm(width, eps=RMS_EPS, elementwise_affine=False)
    if kind == "none":
        return nn.Identity()
    raise UserError(f"norm must be one of {', '.join(NORMS)}, got {kind!r}")


class Layer(nn.Module):
    """x + act(block(norm(x))) with residual, act(block(norm(x))) without; then, with a
    feed-forward sublayer, the same around W2 relu(W1 norm(x)) (a pre-norm transformer layer).
    `scale` multiplies each residual branch."""

    def __init__(self, block: nn.Module, shape: NetShape, scale: float = 1.0):
        super().__init__()
        # the switches arrive whole and checked (`specs.NetShape`), as nanoGPT's Block(config)
        width = shape.width
        self.norm, self.block = make_norm(shape.norm, width), block
        self.act = ACTIVATIONS[shape.activation]()
        self.residual, self.scale = shape.residual, scale
        k = _expansion(shape.ff)
        self.ff = None
        if k:
            self.ff_norm = make_norm(shape.norm, width)
            self.ff = nn.Sequential(
                nn.Linear(width, k * width, bias=shape.bias),
                nn.ReLU(),
                nn.Linear(k * width, width, bias=shape.bias),
            )

    @torch.no_grad()
    def scale_branches_(self, c: float) -> None:
        """Multiply the residual branches' outputs by `c` > 0 through their parameters."""
        if not isinstance(self.act, (nn.Identity, nn.ReLU)):  # not homogeneous of degree 1
            raise UserError(
                "a depth ladder with scaled residual branches needs activation none or relu"
            )
        self.block.scale_output_(c)
        if self.ff is not None:
            self.ff[-1].weight *= c
            if self.ff[-1].bias is not None:
                self.ff[-1].bias *= c

    @torch.no_grad()
    def silence_(self) -> bool:
        """Zero the residual branches' outputs, gradients kept alive (`Block.silence_`); whether
        exactly (every activation here maps 0 to 0)."""
        exact = self.block.silence_()
        if self.ff is not None:  # W2 relu(W1 x): zero W2, whose gradient relu(W1 x) is not zero
            self.ff[-1].weight.zero_()
            if self.ff[-1].bias is not None:
                self.ff[-1].bias.zero_()
        return exact

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.block(self.norm(x)))  # (B, D) or (B, T, D)
        x = x + self.scale * y if self.residual else y
        if self.ff is not None:
            y = self.ff(self.ff_norm(x))  # position-wise
            x = x + self.scale * y if self.residual else y
        return x


class Net(nn.Module):
    """A network of `arm`'s layers at a `shape` (`specs.NetShape`: depth, width, norm, ...).
    The embedding and readout are the same for every arm at a width, so budgets compare the
    layers alone. `seq_len` None: vector inputs (B, ...) flattened to (B, n_in); else sequences
    (B, T, n_in) embedded per position, read out per position or, with `pooled`, after a mean
    over positions. `flatten` feeds a sequence as one vector (B, T * n_in) and reads all T
    outputs at once (unless pooled): the fully connected network that sees every position.
    `vocab` takes token ids (B, T) instead of features: an embedding table and learned positions,
    as in a language model (seed 001's common transformer with its input embedding).
    `bottleneck` reads every position's output from the last position's state alone, by one
    linear map (D -> T * n_out): the layers must compress the whole sequence into one vector
    (the compression task; mad-lab decodes such a vector with a small MLP).
    `scaled_residual` multiplies every residual branch by 1/sqrt(depth), so the residual stream
    keeps its scale as depth grows and a deep stack trains like a shallow one (Hayou et al. 2021,
    "stable ResNet"); without it each of L polynomial layers adds a unit-variance term, and deep
    stacks at a fixed step count fit worse than shallow ones, which a capacity comparison across
    depths must not mistake for expressiveness."""

    def __init__(
        self,
        arm: Arm,
        shape: NetShape,
        n_in: int,
        n_out: int,
        *,
        seq_len: int | None = None,
        pooled: bool = False,
        bottleneck: bool = False,
        vocab: int | None = None,
    ):
        super().__init__()
        # the trial's choices arrive whole (`specs.NetShape`); the rest is the task's
        depth, width, flatten, bias = shape.depth, shape.width, shape.flatten, shape.bias
        if flatten and seq_len is None:
            raise UserError("flatten applies to sequence tasks only")
        if vocab is not None and (seq_len is None or flatten):
            raise UserError("token inputs need a sequence network (seq_len set, not flattened)")
        if bottleneck and (seq_len is None or flatten or pooled):
            raise UserError("a bottleneck readout needs a per-position sequence network")
        self.out_shape = (seq_len, n_out) if (flatten and not pooled) or bottleneck else None
        self.bottleneck = bottleneck
        if flatten:
            n_in, n_out, seq_len, pooled = seq_len * n_in, seq_len * n_out, None, False
        if seq_len is None and mixes_tokens(arm):
            raise UserError(f"{arm.label} mixes positions and needs a sequence task")
        self.seq_len, self.pooled = seq_len, pooled
        self.pos = None
        if vocab is None:
            self.embed = nn.Linear(n_in, width)
        else:
            # token ids: a lookup table, plus learned positions (attention alone is blind to order)
            self.embed = nn.Embedding(vocab, width)
            self.pos = nn.Parameter(torch.randn(seq_len, width))  # (T, D)
        blocks = [
            checked_block(name, width, **kw) for name, kw in layer_blocks(arm, depth, bias, seq_len)
        ]
        scale = 1.0 / math.sqrt(depth) if shape.scaled_residual else 1.0
        self.layers = nn.ModuleList(Layer(b, shape, scale) for b in blocks)
        self.norm_out = make_norm(shape.norm, width)
        self.readout = nn.Linear(width, seq_len * n_out if bottleneck else n_out)
        # name -> size of the parameters left untrained: those built frozen, and after
        # `freeze_unused` those that get no gradient
        self.frozen = {n: p.numel() for n, p in self.named_parameters() if not p.requires_grad}

    def forward(self, x: torch.Tensor, lead: int = 1) -> torch.Tensor:
        """`lead` counts the batch dimensions in front: 1 for (B, ...), 2 for an ensemble's
        (E, B, ...) run on stacked weights (`blocklab.fitting.ensemble`), where the embedding table
        is (E, V, D) and the positions (E, T, D)."""
        h = self.embed(x if self.seq_len else x.flatten(lead))  # (B, D) or (B, T, D)
        if self.pos is not None:
            pos = per_member(self.pos, h, 2)  # (T, D), or (E, 1, T, D) in an ensemble
            h = h + pos[..., : h.shape[-2], :]  # (B, T, D)
        for layer in self.layers:
            h = layer(h)
        h = self.norm_out(h)
        if self.pooled:
            h = h.mean(-2)  # (B, D)
        elif self.bottleneck:
            h = h[..., -1, :]  # (B, D): the sequence's summary
        out = self.readout(h)  # (B, n_out) or (B, T, n_out)
        return out if self.out_shape is None else out.unflatten(-1, self.out_shape)

    def freeze_unused(self, x: torch.Tensor) -> list[tuple[str, int]]:
        """Stop training the parameters that get no gradient from a forward pass on `x` (unused
        ones) or were built frozen (requires_grad False): every training path then leaves them
        out of the optimizer and the trained count. Returns (name, size) of each frozen one."""
        trainable = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        # the probe draws no random numbers that training would otherwise have drawn
        with torch.random.fork_rng(devices=[x.device] if x.is_cuda else []):
            out = self(x).float().sum()
        grads = torch.autograd.grad(out, [p for _, p in trainable], allow_unused=True)
        for (_, p), g in zip(trainable, grads, strict=True):
            if g is None:
                p.requires_grad_(False)
        # by name: an ensemble later swaps every member's parameters for frozen views
        self.frozen = {n: p.numel() for n, p in self.named_parameters() if not p.requires_grad}
        return list(self.frozen.items())

    def param_counts(self) -> dict[str, int]:
        """Trained parameters by part; "blocks" counts whole layers (blocks and feed-forward),
        the budgeted part. Frozen parameters (`freeze_unused`) are not trained and not counted."""

        def n(prefix: str) -> int:
            return sum(
                p.numel()
                for name, p in self.named_parameters()
                if name.startswith(prefix) and name not in self.frozen
            )

        counts = {"embed": n("embed.") + n("pos"), "blocks": n("layers."), "readout": n("readout.")}
        counts["total"] = n("")
        if self.frozen:
            counts["frozen"] = sum(self.frozen.values())
        return counts


def continue_from(new: Net, old: Net) -> bool:
    """Start `new`, the same network with more layers, from the fitted `old`: every parameter of
    `old` copied by name (its layers become `new`'s first ones), the added layers silenced
    (`Layer.silence_`), so the function is unchanged and a fit of `new` cannot end above `old`'s
    loss. With scaled residual branches (1/sqrt(depth)) the copied branches are rescaled by the
    ratio of the scales, which keeps the function too. Returns whether the function is unchanged
    exactly (False: a block that silences only to O(`mlp.SILENT`))."""
    if len(new.layers) < len(old.layers):
        raise ValueError(f"cannot continue {len(old.layers)} layers into {len(new.layers)}")
    own = new.state_dict()
    with torch.no_grad():
        for name, value in old.state_dict().items():
            own[name].copy_(value)
        ratio = old.layers[0].scale / new.layers[0].scale
        if ratio != 1.0:
            for layer in list(new.layers)[: len(old.layers)]:
                layer.scale_branches_(ratio)
        added = list(new.layers)[len(old.layers) :]
        return all([layer.silence_() for layer in added])  # a list: silence every one


def checked_block(name: str, width: int, **kwargs: Any) -> nn.Module:
    """A block of width -> width whose trainable parameters must number what its `count_params`
    declares: every budget and every verdict rests on that count."""
    block = make_block(name, width, width, **kwargs)
    real = sum(p.numel() for p in block.parameters() if p.requires_grad)
    declared = BLOCKS.get(name).count_params(width, width, **kwargs)
    if real != declared:
        raise UserError(
            f"block {name}: count_params declares {declared} parameters at width {width}, "
            f"but the built block has {real} trainable ones"
        )
    return block
