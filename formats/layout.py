"""What a weight format is, as data: its block, the fields of a block with their dtypes and
byte offsets, its dequantization formula and the upstream file each fact comes from; and
the pieces a quantized matrix is made of (`QuantParts`), which every codec packs into and
unpacks from its bytes.

The formats themselves are declared in `q4nx.py`, `awq.py` and `gguf_blocks.py`; this module
holds what they share: the dataclasses, the shape checks (one-line `ValueError`s that say
what to do) and the bf16 <-> bit-pattern conversions (numpy has no bfloat16, torch does)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

MLIR_AIR = "Xilinx/mlir-air"
#: The mirrored mlir-air commit every upstream fact here was read at (2026-08-22).
MLIR_AIR_COMMIT = "e972f2942d41123f161276b27f991ef10da2a2e6"


@dataclass(frozen=True)
class Upstream:
    """Where a fact comes from: a file of a repository at a commit (or, for a package read
    as installed, its released version), and the symbol in it."""

    repository: str
    path: str
    commit: str
    symbol: str

    def cite(self) -> str:
        """The citation as one line: `repository:path@commit (symbol)`."""
        return f"{self.repository}:{self.path}@{self.commit[:12]} ({self.symbol})"


def air(path: str, symbol: str) -> Upstream:
    """A file of the mirrored mlir-air commit."""
    return Upstream(MLIR_AIR, path, MLIR_AIR_COMMIT, symbol)


@dataclass(frozen=True)
class BlockField:
    """One field of a block: its element dtype, its shape in elements (outermost first),
    its byte offset inside the block and what each axis indexes."""

    name: str
    dtype: str          # "bf16", "f16", "u8", "i8", "u4 pairs" (two nibbles a byte)
    shape: tuple[int, ...]
    offset: int         # bytes from the start of the block
    nbytes: int
    layout: str         # the axes, outermost first, and how nibbles share a byte


@dataclass(frozen=True)
class WeightFormat:
    """A weight format as data. A matrix of `rows` output rows by `K` input columns is cut
    into blocks of `block_rows` x `block_cols`; each block holds `bytes_per_block` bytes laid
    out as `fields`; `group` columns of one row share a scale (and an offset)."""

    name: str
    block_rows: int
    block_cols: int
    group: int
    bytes_per_block: int
    fields: tuple[BlockField, ...]
    formula: str
    block_order: str
    sources: tuple[Upstream, ...]

    def __post_init__(self) -> None:
        end = max(f.offset + f.nbytes for f in self.fields)
        if end != self.bytes_per_block:
            raise AssertionError(f"{self.name}: fields end at byte {end}, not at "
                                 f"{self.bytes_per_block}")

    def field(self, name: str) -> BlockField:
        """The field called `name`."""
        return next(f for f in self.fields if f.name == name)

    def check_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        """(rows, K) after checking both divide into whole blocks; a one-line ValueError
        saying what to pad otherwise."""
        rows, cols = (int(shape[0]), int(shape[1]))
        if rows <= 0 or cols <= 0:
            raise ValueError(f"{self.name}: shape {rows}x{cols} is empty; give the matrix's "
                             f"(rows, K)")
        if cols % self.block_cols:
            raise ValueError(f"{self.name}: K={cols} is not a multiple of {self.block_cols}; "
                             f"pad K with zero columns to {_round_up(cols, self.block_cols)}")
        if rows % self.block_rows:
            raise ValueError(f"{self.name}: rows={rows} is not a multiple of "
                             f"{self.block_rows}; pad with zero rows to "
                             f"{_round_up(rows, self.block_rows)}")
        return rows, cols

    def nbytes(self, shape: tuple[int, int]) -> int:
        """The bytes a matrix of `shape` takes in this format."""
        rows, cols = self.check_shape(shape)
        return rows * cols // (self.block_rows * self.block_cols) * self.bytes_per_block

    def check_bytes(self, data: bytes | bytearray | memoryview | np.ndarray,
                    shape: tuple[int, int]) -> np.ndarray:
        """`data` as a flat uint8 array after checking it is exactly `shape`'s size."""
        want = self.nbytes(shape)
        buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) \
            else data.reshape(-1).view(np.uint8)
        if buf.size != want:
            raise ValueError(f"{self.name}: {buf.size} bytes given for a {shape[0]}x"
                             f"{shape[1]} matrix, which takes {want}; pass the matrix's own "
                             f"(rows, K) and all of its bytes")
        return buf


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclass(frozen=True)
class QuantParts:
    """A quantized matrix as its pieces, each indexed by output row first.

    `q` is [rows, K]: the stored integer of each weight (uint8 for unsigned nibbles, int8
    for signed ones and for 8-bit codes). `scales` is [rows, K/group] in the format's own
    scale dtype (torch.bfloat16 or torch.float16). `offsets` is the format's second
    per-group number, shaped like `scales`, or None: a min (Q4NX, GGUF Q4_1), an unscaled
    zero point (Q4NX's legacy form, AWQ's uint8 zeros), or the Q4_0 container's unused
    mins field (kept so its bytes round-trip)."""

    q: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, K)."""
        return int(self.q.shape[0]), int(self.q.shape[1])

    def same_bits(self, other: QuantParts) -> bool:
        """Whether every field holds the same bits as `other`'s (NaN-safe, -0 != +0)."""
        def bits(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or not t.is_floating_point():
                return t
            return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)

        pairs = [(self.q, other.q), (bits(self.scales), bits(other.scales)),
                 (bits(self.offsets), bits(other.offsets))]
        for a, b in pairs:
            if (a is None) != (b is None):
                return False
            if a is not None and b is not None and (a.dtype != b.dtype or not torch.equal(a, b)):
                return False
        return True


class WeightCodec(ABC):
    """A format's four operations on one weight matrix of (rows, K). Bytes never carry
    their own shape (like upstream's I8 bundle header), so unpacking takes it."""

    format: WeightFormat

    @abstractmethod
    def pack(self, parts: QuantParts) -> bytes:
        """The device bytes of `parts`, bit for bit."""

    @abstractmethod
    def unpack(self, data: bytes, shape: tuple[int, int]) -> QuantParts:
        """The pieces stored in `data`, a matrix of `shape` = (rows, K)."""

    @abstractmethod
    def dequantize(self, data: bytes, shape: tuple[int, int]) -> torch.Tensor:
        """The float32 [rows, K] weights `data` stands for, by the format's formula."""

    @abstractmethod
    def quantize(self, weights: torch.Tensor) -> bytes:
        """`weights` [rows, K] quantized the way upstream quantizes into this format."""


def bf16_bits(t: torch.Tensor) -> np.ndarray:
    """The uint16 bit patterns of a bfloat16 tensor (rounded to bf16 first, to nearest
    even, if it is not one)."""
    if t.dtype != torch.bfloat16:
        t = t.to(torch.float32).to(torch.bfloat16)
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def owned(a: np.ndarray) -> torch.Tensor:
    """A tensor of its own holding a copy of `a`: never a view of the caller's bytes (read
    only when they are a `bytes`) nor of a buffer the caller may change later."""
    return torch.from_numpy(np.array(a, order="C", copy=True))


def bf16_from_bits(bits: np.ndarray) -> torch.Tensor:
    """A bfloat16 tensor of its own holding the given uint16 bit patterns."""
    return owned(np.asarray(bits).view(np.int16)).view(torch.bfloat16)


def as_float32(weights: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    """`weights` as a 2-D float32 CPU tensor, or a one-line ValueError."""
    t = torch.as_tensor(weights)
    if t.dim() != 2:
        raise ValueError(f"{name}: weights must be a 2-D [rows, K] matrix, got shape "
                         f"{tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name}: weights must be floating point, got {t.dtype}")
    t = t.detach().to("cpu", torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: weights hold inf or NaN; quantize finite weights only")
    return t


def check_parts(fmt: WeightFormat, parts: QuantParts, q_dtype: torch.dtype,
                scale_dtype: torch.dtype, offsets_dtype: torch.dtype | None) -> tuple[int, int]:
    """(rows, K) after checking `parts` has the shapes and dtypes `fmt` stores."""
    rows, cols = fmt.check_shape(parts.shape)
    groups = (rows, cols // fmt.group)
    if parts.q.dtype != q_dtype:
        raise ValueError(f"{fmt.name}: q must be {q_dtype}, got {parts.q.dtype}")
    if parts.scales.dtype != scale_dtype or tuple(parts.scales.shape) != groups:
        raise ValueError(f"{fmt.name}: scales must be {scale_dtype} {list(groups)}, got "
                         f"{parts.scales.dtype} {list(parts.scales.shape)}")
    offs = parts.offsets
    if offsets_dtype is None:
        if offs is not None:
            raise ValueError(f"{fmt.name}: this format has no offsets; pass offsets=None")
    elif offs is None or offs.dtype != offsets_dtype or tuple(offs.shape) != groups:
        got = "None" if offs is None else f"{offs.dtype} {list(offs.shape)}"
        raise ValueError(f"{fmt.name}: offsets must be {offsets_dtype} {list(groups)}, "
                         f"got {got}")
    return rows, cols
