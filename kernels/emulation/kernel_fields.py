"""The seam between a weight format and the 4-bit kernels that read it: a `QuantizedMatrix`'s
fields as the kernels take them (`QuantFields`, kernels.emulation.quantized), those fields back
to the format's device bytes through its own `pack`, and a seeded quantized weight for Phase 1.

Which kernel reads which format (upstream's, mlir-air e972f2942d41):

- `q4nx` (additive) and `q4_0-container`: `proj_qmm_*` of
  programming_examples/fused_decode/kernels/proj_qmm.cc; its `-DQ4_0` build reads the signed
  code as the nibble's two's complement, `(u ^ 8) - 8` (q4_k.h), so a Q4_0 code is handed to
  the kernel as its nibble, and the container's unused mins field (zeros, as
  fused_decode/qwen25_3b_requant.py `requant_q4_0` writes it) is not one of its fields.
- `awq-int4`: `matvec_int4_bf16_packed` of programming_examples/matrix_vector_multiplication/
  int4_awq/mv_int4_bf16.cc, whose tile (m_tile rows x k_chunk columns: matvec_int4_packed.py
  `pack_inputs`) is the GEMV's configuration, so its device bytes depend on it (`device_codec`).

The legacy subtractive Q4NX (`w = scale*(q - zero)`) has no kernel: proj_qmm adds `min*sum(x)`,
so an old bundle is re-quantized into the additive form first (upstream reads it only to
de-quantize: llms/llama32_1b_q4nx/llama32_1b_q4nx_weights.py `Q4nxModel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.formats.awq import AwqInt4Codec
from npu_deploy.formats.catalog import QuantizedMatrix, codec
from npu_deploy.formats.layout import QuantParts
from npu_deploy.formats.q4nx import Q4Container

from .quantized import AWQ_GROUP, Q4NX_COLS, Q4NX_GROUP, QuantFields

#: a codec a 4-bit kernel reads
KernelCodec = Q4Container | AwqInt4Codec


@dataclass(frozen=True)
class KernelOf:
    """The 4-bit kernel that reads a format: the registry family, its `codec` tunable (proj_qmm's
    build, or None), the format's group and the name of its offset field in the kernel's
    tensors (`w.min`, `w.zero`, or None when it has none)."""

    kernel: str
    codec: str | None
    group: int
    offset: str | None


#: each device format's kernel, by the format's name (formats.CODECS)
KERNEL_OF = {
    "q4nx": KernelOf("proj_qmm", "q4nx", Q4NX_GROUP, "w.min"),
    "q4_0-container": KernelOf("proj_qmm", "q4_0", Q4NX_GROUP, None),
    "awq-int4": KernelOf("gemv_int4", None, AWQ_GROUP, "w.zero"),
}
#: the columns of a device format's block, which a 4-bit kernel reads whole: Q4NX's 256
#: (model_spec.h Q4NX_COL_BLOCK_SIZE); the AWQ GEMV's K is its k_chunk's business
DEVICE_COLUMNS = {"q4nx": Q4NX_COLS, "q4_0-container": Q4NX_COLS}
#: proj_qmm's `codec` tunable -> the format its weight is stored in
PROJ_QMM_FORMATS = {"q4nx": "q4nx", "q4_0": "q4_0-container"}


def kernel_of(format: str) -> KernelOf:
    """The kernel of `format`, or a one-line ValueError naming the formats a kernel reads."""
    try:
        return KERNEL_OF[format]
    except KeyError:
        raise ValueError(f"no 4-bit kernel reads {format!r}; the kernels read "
                         f"{', '.join(KERNEL_OF)} (re-quantize into one of them)") from None


def quant_fields(m: QuantizedMatrix) -> QuantFields:
    """`m`'s fields as its kernel reads them (see the module docstring), exactly: no value is
    rounded, a signed Q4_0 code becomes its nibble."""
    return _as_fields(m.format, m.parts())


def device_fields(format: str, w: torch.Tensor, shape: tuple[int, int],
                  config: dict[str, Any] | None = None) -> QuantFields:
    """The fields of a weight from its device bytes `w` (any dtype, as a buffer holds them)
    at `config`'s tile: what the kernel itself reads, so a device that runs the emulator's
    numerics on its buffers (tests/fake_npu.py) decodes them the way `to_device` wrote them."""
    data = w.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
    return _as_fields(format, device_codec(format, config).unpack(data, shape))


def _as_fields(format: str, parts: QuantParts) -> QuantFields:
    """A format's stored pieces as its kernel's fields: a signed Q4_0 code as its nibble, the
    offset only where the kernel reads one."""
    k = kernel_of(format)
    q = parts.q
    if q.dtype == torch.int8:                   # Q4_0's signed code, as the nibble
        q = q.view(torch.uint8) & 0xF
    offset = parts.offsets if k.offset is not None else None
    return QuantFields.of(q, parts.scales, offset, k.group)


def device_codec(format: str, config: dict[str, Any] | None = None) -> KernelCodec:
    """The codec whose bytes the kernel reads at `config`: an AWQ GEMV's tile is its m_tile x
    k_chunk (matvec_int4_packed.py `pack_inputs`); the Q4NX container's block is fixed."""
    kernel_of(format)
    c = codec(format)
    assert isinstance(c, (Q4Container, AwqInt4Codec))
    if isinstance(c, AwqInt4Codec) and config is not None:
        return AwqInt4Codec(c.name, c.group, int(config.get("m_tile", c.m_tile)),
                            int(config.get("k_chunk", c.k_chunk)))
    return c


def to_device(fields: QuantFields, format: str, config: dict[str, Any] | None = None) -> bytes:
    """`fields` packed into `format`'s device bytes by the format's own `pack` (at `config`'s
    tile for the AWQ GEMV): the inverse of `quant_fields`."""
    q = fields.q
    offsets = fields.offset
    if format == "q4_0-container":              # the nibble back to the signed code
        q = ((q ^ 8).to(torch.int8) - 8)
        offsets = torch.zeros_like(fields.scale)     # the unused mins field, as upstream writes
    if offsets is None:
        raise ValueError(f"{format} stores an offset per group; these fields have none")
    return device_codec(format, config).pack(QuantParts(q, fields.scale, offsets))


def kernel_tensors(m: QuantizedMatrix, config: dict[str, Any] | None = None
                   ) -> dict[str, torch.Tensor]:
    """The weight operand `w` of `m`'s kernel as the tensors a plan binds: its device bytes
    (`w`, at `config`'s tile) and the unpacked fields the emulator reads (`w.q`, `w.scale`
    and `w.min` or `w.zero`)."""
    k = kernel_of(m.format)
    f = quant_fields(m)
    data = to_device(f, m.format, config)
    out = {"w": torch.frombuffer(bytearray(data), dtype=torch.uint8), "w.q": f.q,
           "w.scale": f.scale}
    if k.offset is not None and f.offset is not None:
        out[k.offset] = f.offset
    return out


def seeded_matrix(format: str, shape: tuple[int, int], gen: torch.Generator) -> QuantizedMatrix:
    """A quantized weight of `shape` for Phase 1: its scales and offsets drawn as a real
    checkpoint's are (upstream's quantizer for the format run on randn / sqrt(K) weights, so
    the outputs stay at unit scale), its codes uniform random nibbles (every code, the
    extremes included, exercised)."""
    c = device_codec(format)
    rows, cols = shape
    weights = torch.randn(rows, cols, generator=gen) / cols ** 0.5
    parts = c.quantize_parts(weights)
    nibbles = torch.randint(0, 16, (rows, cols), generator=gen, dtype=torch.uint8)
    q = (nibbles ^ 8).to(torch.int8) - 8 if parts.q.dtype == torch.int8 else nibbles
    return QuantizedMatrix(format, shape, c.pack(QuantParts(q, parts.scales, parts.offsets)))


def decode_kernel(format: str) -> tuple[str, dict[str, Any]]:
    """The kernel a decode projection stored in `format` launches, and the configuration its
    format fixes (proj_qmm's build: `codec`)."""
    k = kernel_of(format)
    return k.kernel, ({"codec": k.codec} if k.codec is not None else {})
