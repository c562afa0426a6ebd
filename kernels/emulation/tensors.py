"""How a kernel on the emulator reads its operands and writes its results: FP32 views of the
bf16 tensors it is given, a result cast once to bf16 (into the output buffer when there is
one, as the kernel writes its output buffer), and the layout a plan bound each operand in."""

from __future__ import annotations

import torch

from ..definition.family import Tensors
from .numerics import to_bf16


def f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def bf16_out(value: torch.Tensor, out: Tensors | None, name: str) -> torch.Tensor:
    """`value` (FP32) cast once to bf16: into the kernel's output buffer when there is one."""
    dest = None if out is None else out.get(name)
    if dest is None or dest.dtype != torch.bfloat16:
        return to_bf16(value)
    return dest.copy_(value.reshape(dest.shape))  # the same nearest-even cast as to_bf16


def bound_layout(c: dict, operand: str, default: str) -> str:
    """How the tensor bound to `operand` is stored: a plan passes its bindings' layouts as
    config["layouts"]; alone, an operand has the layout of its dims in the spec."""
    return str(c.get("layouts", {}).get(operand, default))


def to_head_first(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """[L, heads * head_dim] -> [heads, L, head_dim]."""
    rows = t.shape[0]
    return t.reshape(rows, -1, head_dim).transpose(0, 1).contiguous()


def as_head_first(t: torch.Tensor, heads: int, seq: int, d: int, layout: str) -> torch.Tensor:
    """A [heads, seq, d] view of an operand stored in `layout`."""
    if layout == "seq-first":
        return t.reshape(seq, heads, d).transpose(0, 1)
    return t.reshape(heads, seq, d)


def pad_heads(t: torch.Tensor, seq_pad: tuple[int, int], head_dim: int) -> torch.Tensor:
    """A head-first tensor of L positions ([heads, L, head_dim], in any shape of those
    elements) as the device stores a padded sequence: [heads, L_pad, head_dim], zeros after
    each head's L rows (`seq_pad` = (L, L_pad))."""
    length, padded = seq_pad
    rows = t.reshape(-1, length, head_dim)
    out = torch.zeros(rows.shape[0], padded, head_dim, dtype=t.dtype)
    out[:, :length] = rows
    return out


def unpad_heads(stored: torch.Tensor, seq_pad: tuple[int, int], head_dim: int) -> torch.Tensor:
    """The data of a padded head-first tensor (`pad_heads`): a [heads, L, head_dim] view of
    its first L rows per head."""
    length, padded = seq_pad
    return stored.reshape(-1, padded, head_dim)[:, :length]
