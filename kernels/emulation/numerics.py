"""The NPU's numerics, for the emulator backend: bf16 storage, the AIE2P BFP16 matmul, FP32 GEMV.

Every tensor that travels between kernels is bfloat16 (`to_bf16`). A GEMM on XDNA 2 ("NPU2",
AIE2P) does not multiply bf16 directly: each 8x8x8 MMA first converts both operands to the
block-floating-point type bfp16ebs8 and accumulates the products in FP32 (`gemm_bfp16`). A GEMV
runs on the FP32 vector MAC instead, with no block format (`gemv_fp32acc`).

bfp16ebs8, as the cores convert to it (`to_bfp16`):

* 8 values share one 8-bit exponent E: the largest biased exponent field among the 8 (E is a
  plain fp32 exponent field, bias 127). Each value keeps an 8-bit two's-complement mantissa q
  in [-128, 127]; the value is q * 2^(E - 127 - 6), so the block's largest value keeps 7
  magnitude bits (bf16 has 8), and a value 2^k smaller than it loses k more. [S2, S3]
* Blocks run along K for both operands: 8 consecutive K of a row of A, 8 consecutive K of a
  column of B (B is transposed 8x8 before the conversion). [S1]
* Rounding: the core's rounding-mode register decides. Its default is floor (toward -inf,
  "truncation" in two's complement); the mlir-air GEMM kernels behind the measured figures set
  conv_even (round to nearest, ties to even). [S2, S4, S7]
* Overflow: a mantissa that rounds up to +128 does not fit, so the block's exponent goes up by
  one and the block is requantized; -128 fits and keeps the exponent (a one-sided carry).
  mlir-aie's `quantize` models the core this way (its reference matches a mixed bf16 x bfp16
  kernel's bf16 output bit for bit); amd/IRON's host packer saturates to +127 instead
  ("saturate" here). [S2]
* Products of a block pair are accumulated in FP32 (`accum<accfloat>`). [S1, S4]

Where the FP32 partial sums go between K tiles, and how a bf16 output is cast, depends on the
GEMM's method (mlir-air's GEMM examples; the family's `Method` table names them) [S4, S8]:

* the FP32 accumulator stays in the L1 C tile across all of K and is cast to bf16 once, with
  conv_even (mm.o's cast: the `drain` method, and the fp32-out kernels, which skip the cast);
* the same accumulation, cast by a separate launch of compiler-generated `arith.truncf` that
  sets no rounding mode (`fused-cast`); a core that sets none rounds to bf16 toward -inf
  [S7], so the cast here is floor (`gemm_bfp16(cast="floor")`);
* direct codegen with a bf16 output keeps the L1 C tile in bf16: the accumulator is read back
  (extf), takes the MMAs of one L1 K tile in FP32 and is written back (truncf, nearest) once
  per `tile_k_l1` of K (`gemm_bfp16(bf16_partials=True)`).

Not documented publicly, chosen here and exposed as `BFPFormat` fields or arguments:

* Subnormal inputs (exponent field 0): "keep" treats the field as an ordinary exponent, as
  mlir-aie's `quantize` does; "flush" zeroes them first.
* inf/NaN: mlir-aie's encoder rejects them. Here they pass through unchanged; their exponent
  field (255) becomes the block's, so their finite block-mates round against a 2^122 LSB.
* How the MMA adds its 8 products and the FP32 accumulator: `gemm_bfp16` sums each K tile of
  `tile_k` exactly (float64 BLAS: a product of two 8-bit mantissas has 16 bits, and a tile's
  sum stays exact while its blocks' exponent sums differ by under 37 - log2(tile_k) binades),
  rounds that tile sum to FP32 once, then adds the tiles in K order in FP32. tile_k=8 is one
  rounding per MMA; the default 32 is the L1 K tile of the measured mlir-air GEMMs. The result
  does not depend on BLAS summation order.

Calibration. The hardware GEMM figure, mean_rel_L1 = mean|out - ref| / mean|ref| = 9.3e-3 to
9.9e-3 (1.0e-2 to 1.9e-2 for the direct bf16-out method), is measured by mlir-air with inputs
randn/sqrt(K) cast to bf16 and ref = the FP32 matmul of those same bf16 inputs (cast to bf16 for
a bf16 output) [S5]; `gemm_operands` and `fp32_reference` reproduce that protocol. With the
defaults above the emulation gives ~9.3e-3 (fp32 out) on the Llama-3.2-1B shapes; floor
rounding in the block format would give 1.4e-2 to 1.6e-2 (biased, and growing with K), and
rounding to bf16 alone 1.4e-3 (see benchmarks/gemm_fidelity.py). Per method, against every
measured row of the registry: benchmarks/gemm_method_numerics.py.

Sources (read, not copied):
[S1] Xilinx/aie_api include/aie_api/detail/aie2p/mmul_bf16_bf16.hpp (mmul<8,8,8,bfloat16> under
     AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16: accum<accfloat,64> -> to_v64bfp16ebs8 for A and
     transposed B, then mac_8x8_8x8T) and include/aie_api/aie_doc.hpp (bfp16ebs8 x bfp16ebs8
     accumulates in accfloat on XDNA 2).
[S2] Xilinx/mlir-aie python/utils/bfp.py (v8bfp16ebs8: 8 values, one shared 8-bit exponent,
     8-bit two's-complement mantissas, LSB 2^(E-127-6); `quantize(rounding="conv_even")` with
     the one-sided carry; floor = the header's truncation) and test/python/test_bfp.py.
[S3] Xilinx/mlir-aie programming_examples/ml/block_datatypes/helper.h (earlier under basic/;
     floatToBfp16: block max exponent, 7 magnitude bits, two's complement, and "the rounding
     mode for the mantissa in AIE2p is always truncation" -- true of the default register).
[S4] Xilinx/mlir-air programming_examples/matrix_multiplication/bf16_in_fp32_out/mm_aie2p.cc and
     Makefile (set_rounding(conv_even): "without this, BFP16 emulation uses floor rounding";
     -DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16; f32_to_bf16 epilogue under conv_even) and
     programming_examples/kernel_registry/details/GEMM_bf16_in_fp32_out.md (FP32 C across K).
[S5] Xilinx/mlir-air programming_examples/matrix_multiplication/bf16_in_fp32_out/run.py (inputs
     randn/sqrt(K) as bf16, reference = fp32 matmul of the bf16 inputs) and
     python/air/backend/xrt_runner.py (mean_rel_L1 = mean|a-e| / mean|e|).
[S6] Xilinx/mlir-air programming_examples/matrix_vector_multiplication/bf16/mv.cc (GEMV: 64-lane
     accfloat MAC, reduce_add, one conv_even cast to bf16) and
     programming_examples/kernel_registry/details/GEMV_bf16.md (inputs randn*4, reference = fp32
     dot cast to bf16, mean_rel_L1 0 to 2.7e-8).
[S7] Xilinx/mlir-aie python/utils/aie2p_emulation.py (a core rounds to bf16 toward -inf unless
     the kernel sets the rounding register; `tree_sum`: lane running sums, then pairwise halving,
     each add rounded to fp32).
[S8] Xilinx/mlir-air programming_examples/matrix_multiplication/bf16_in_bf16_out/run.py
     (fused-cast: a second launch of vectorized `arith.truncf`, no rounding mode set; drain:
     mm_aie2p.cc's f32_to_bf16 under conv_even; direct: the transform script hoists the bf16 C
     tile's extf/truncf pair out of the innermost loop only, the MMAs of one L1 K tile) and
     programming_examples/kernel_registry/details/GEMM_bf16_in_bf16_out.md (the three methods
     and their measured mean_rel_L1).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Rounding = Literal["nearest_even", "floor"]
Overflow = Literal["carry", "saturate"]
Subnormals = Literal["keep", "flush"]

# The calibration targets this module is tested against (docs/hardware-facts.md#gemm-numerics:
# hardware 9.3e-3 to 9.9e-3 for the GEMMs; GEMV 2.2e-6 at most, most rows 1e-7 or below).
HARDWARE_GEMM_MEAN_REL_L1 = (9.3e-3, 9.9e-3)
GEMM_MEAN_REL_L1_BAND = (7e-3, 1.2e-2)
GEMV_MEAN_REL_L1_MAX = 1e-6

# The L1 K tile of the measured mlir-air GEMMs (kernel registry: tile_k_l1 = 32).
DEFAULT_TILE_K = 32
# mv.cc accumulates in a 64-lane accfloat vector [S6].
GEMV_LANES = 64

_F32_EXPONENT_BIAS = 127
_F32_MANTISSA_BITS = 23


@dataclass(frozen=True)
class BFPFormat:
    """A block-floating-point format: `block` values share the largest exponent field among them
    and keep `mantissa_bits`-bit two's-complement mantissas (see the module docstring)."""

    block: int = 8
    mantissa_bits: int = 8
    rounding: Rounding = "nearest_even"
    overflow: Overflow = "carry"
    subnormals: Subnormals = "keep"

    def __post_init__(self) -> None:
        if self.block < 1 or not 2 <= self.mantissa_bits <= 24:
            raise ValueError(f"BFPFormat: need block >= 1 and 2 <= mantissa_bits <= 24, got "
                             f"block={self.block}, mantissa_bits={self.mantissa_bits}")
        for name, value, allowed in (("rounding", self.rounding, ("nearest_even", "floor")),
                                     ("overflow", self.overflow, ("carry", "saturate")),
                                     ("subnormals", self.subnormals, ("keep", "flush"))):
            if value not in allowed:
                raise ValueError(f"BFPFormat: {name} must be one of {allowed}, got {value!r}")

    @property
    def lsb_offset(self) -> int:
        """LSB = 2^(E - 127 - lsb_offset): the block's largest value keeps mantissa_bits - 1
        magnitude bits, its leading one included."""
        return self.mantissa_bits - 2


# bfp16ebs8 as the mlir-air GEMM kernels run it (conv_even set by the kernel).
BFP16EBS8 = BFPFormat()


# --- bf16 storage -----------------------------------------------------------------------------

def to_bf16(x: torch.Tensor, rounding: Rounding = "nearest_even") -> torch.Tensor:
    """`x` rounded to bfloat16 (inf and NaN kept): to nearest, ties to even, or toward -inf
    (`rounding="floor"`, what a core does when no kernel sets its rounding mode [S7]).

    float32 and float16 convert directly. float64 (and integers) go through float32 rounded to
    odd first: torch's own float64 -> bf16 cast rounds twice and can miss the nearest value.
    Floor takes float32 or narrower input only (the FP32 accumulator a core casts)."""
    if x.dtype == torch.bfloat16:
        return x
    if rounding == "floor":
        return _to_bf16_floor(x)
    if rounding != "nearest_even":
        raise ValueError(f"to_bf16: rounding must be 'nearest_even' or 'floor', got {rounding!r}")
    if x.dtype in (torch.float32, torch.float16):
        return x.to(torch.bfloat16)
    return _to_float32_round_to_odd(x.to(torch.float64)).to(torch.bfloat16)


def _to_bf16_floor(x: torch.Tensor) -> torch.Tensor:
    """float32 (or float16) -> bf16 toward -inf: drop the 16 low bits of the float32 pattern
    (toward zero), then step a negative value that lost bits one bf16 ulp down (sign-magnitude:
    +1 on the kept bits). A value below the most negative bf16 becomes -inf; NaN stays NaN."""
    if x.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"to_bf16(rounding='floor'): need float32 or float16, got {x.dtype}")
    f = x.to(torch.float32).contiguous()
    bits = f.view(torch.int32)
    down = (bits < 0) & ((bits & 0xFFFF) != 0)
    floored = ((bits & -0x10000) + down.to(torch.int32) * 0x10000).view(torch.float32)
    return torch.where(torch.isnan(f), f, floored).to(torch.bfloat16)  # exact: 16 low bits 0


def _to_float32_round_to_odd(x: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounded toward zero, with the last bit set when inexact. float32 keeps
    more than two bits beyond bf16's, so a following nearest-even cast rounds exactly once."""
    f = x.to(torch.float32)
    toward_zero = torch.where(f.to(torch.float64).abs() > x.abs(),
                              torch.nextafter(f, torch.zeros_like(f)), f)
    inexact = toward_zero.to(torch.float64) != x  # true for NaN too, which stays NaN
    bits = toward_zero.view(torch.int32)
    return torch.where(inexact, bits | 1, bits).view(torch.float32)


# --- bfp16ebs8 ----------------------------------------------------------------------------------

def to_bfp16(x: torch.Tensor, dim: int = -1, fmt: BFPFormat = BFP16EBS8) -> torch.Tensor:
    """The values a core reads of `x` after converting it to `fmt` in blocks along `dim`.

    Returns float32 (every bfp16ebs8 value is exact in float32), same shape as `x`. The input
    is taken as float32 (the accumulator the core converts from). A length along `dim` that is
    not a multiple of the block is padded with zeros, which change no block exponent. The one
    bfp16ebs8 value float32 lacks, +-2^128 (+-128 LSB at the top exponent), comes back as +-inf."""
    moved = x.to(torch.float32).movedim(dim, -1)
    return _quantize_last_dim(moved, fmt).movedim(-1, dim)


def _quantize_last_dim(x: torch.Tensor, fmt: BFPFormat) -> torch.Tensor:
    """`to_bfp16` along the last dim of a float32 tensor."""
    n = x.shape[-1]
    pad = -n % fmt.block
    xp = torch.nn.functional.pad(x, (0, pad)) if pad else x
    blocks = xp.contiguous().view(*xp.shape[:-1], (n + pad) // fmt.block, fmt.block)
    out = _quantize_blocks(blocks, fmt).view(xp.shape)
    return out[..., :n] if pad else out


def _quantize_blocks(xb: torch.Tensor, fmt: BFPFormat) -> torch.Tensor:
    """Quantize contiguous float32 blocks [..., nblocks, block], one exponent per block."""
    if fmt == BFP16EBS8 and xb.numel() >= _FAST_MIN_ELEMS:
        fast = _quantize_bfp16ebs8_fast(xb)
        if fast is not None:
            return fast
    return _quantize_blocks_torch(xb, fmt)


# Below this many elements the torch ops are as quick as calling the compiled loop.
_FAST_MIN_ELEMS = 1 << 12

# The compiled loops (_bfp_kernel) are imported inside the functions that call them, on
# purpose: importing numba and loading its cache costs seconds, which only a caller of a
# fast path pays. Not a cycle: _bfp_kernel imports nothing of ours.


def _quantize_bfp16ebs8_fast(xb: torch.Tensor) -> torch.Tensor | None:
    """The default format (nearest-even, carry, subnormals kept) in one compiled pass over
    the blocks; None when a block holds an inf or a NaN (the torch path handles those).
    Bit-identical to `_quantize_blocks_torch` (tested)."""
    from ._bfp_kernel import quantize_bfp16ebs8

    flat = xb.reshape(-1, xb.shape[-1]).numpy()
    out = torch.empty_like(xb)
    ok = quantize_bfp16ebs8(flat, out.view(-1, xb.shape[-1]).numpy(), _bfp16ebs8_tables(),
                            BFP16EBS8.lsb_offset)
    return out if ok else None


@functools.cache
def _bfp16ebs8_tables() -> np.ndarray:
    from ._bfp_kernel import scale_tables

    return scale_tables(BFP16EBS8.lsb_offset)


def _quantize_blocks_torch(xb: torch.Tensor, fmt: BFPFormat) -> torch.Tensor:
    """Any format, in torch ops: the reference the compiled path is checked against."""
    bits = xb.view(torch.int32)
    if fmt.subnormals == "flush":
        xb = torch.where((bits & 0x7F800000) == 0, torch.zeros_like(xb), xb)
        bits = xb.view(torch.int32)
    # Magnitude bits order like magnitudes, so the largest one carries the largest exponent
    # field: the shared exponent [S2, S3] (255 when the block holds an inf or a NaN).
    exponent = (bits & 0x7FFFFFFF).amax(dim=-1, keepdim=True) >> _F32_MANTISSA_BITS
    lsb = _exact_pow2(exponent - _F32_EXPONENT_BIAS - fmt.lsb_offset)
    q = xb / lsb  # exact unless subnormal (far below 1 LSB); |q| < 2^(mantissa_bits - 1)
    if fmt.rounding == "nearest_even":
        q.round_()
    else:
        q.floor_()
        # A tiny negative value can underflow to -0.0 in the division; it floors to -1 LSB.
        q = torch.where((q == 0) & (xb < 0), -1.0, q)
    top = 2 ** (fmt.mantissa_bits - 1)  # only nearest-even can reach +top; -top fits [S2]
    if fmt.overflow == "carry":
        over = (q == top).any(dim=-1)
        if bool(over.any()):  # the block's exponent goes up by one and it is requantized
            lsb[over] *= 2
            q[over] = (xb[over] / lsb[over]).round_()
    else:
        q.clamp_(max=top - 1)
    q.add_(0.0)  # -0.0 -> +0.0: a two's-complement mantissa has no negative zero
    q.mul_(lsb)  # exact: q has mantissa_bits bits, lsb is a power of two
    if bool((exponent == 0xFF).any()):  # inf/NaN pass through (not documented; see above)
        q = torch.where(torch.isfinite(xb), q, xb)
    return q


def _exact_pow2(e: torch.Tensor) -> torch.Tensor:
    """2.0**e as float32, built from its bits (exact for -149 <= e <= 127)."""
    normal = ((e.clamp(min=-126) + _F32_EXPONENT_BIAS) << _F32_MANTISSA_BITS).to(torch.int32)
    subnormal = (torch.ones_like(e) << (e.clamp(-149, -127) + 149)).to(torch.int32)
    return torch.where(e >= -126, normal, subnormal).view(torch.float32)


# --- GEMM: the BFP16 MMA with FP32 accumulation --------------------------------------------

def gemm_bfp16(a: torch.Tensor, b: torch.Tensor, *, tile_k: int = DEFAULT_TILE_K,
               out_dtype: torch.dtype = torch.bfloat16,
               fmt: BFPFormat = BFP16EBS8, exact_tiles: bool = True,
               bf16_partials: bool = False, cast: Rounding = "nearest_even",
               b_quantized: torch.Tensor | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B as the AIE2P GEMM computes it: A [..., K] and B [K, N] bf16, both converted to
    `fmt` along K, tile sums (`tile_k` of K each, exact) added in K order in FP32, then one cast
    to `out_dtype` (bf16, or float32 for the fp32-out kernels).

    `exact_tiles=False` leaves the FP32 accumulation to BLAS in its own order: the same
    quantized operands, a different FP32 summation order. That can move a result by FP32
    rounding only (the products of 8-bit mantissas are exact; on the tests' inputs the two
    agree bit for bit), against the ~1e-2 of the block format, and runs 2-3x faster.
    Whole-model emulation uses it (through `bf16_blas.gemm_bfp16_blas`, which takes a bf16
    output from a bf16 matmul); kernel validation keeps the exact tile order.

    The method's accumulation (see the module docstring): `bf16_partials` rounds the
    accumulator to bf16 (nearest even) after every `tile_k` of K, as direct codegen's bf16 L1
    C tile does (the fast path then makes one BLAS call per K tile); `cast` is the rounding
    of the final cast to bf16: "nearest_even" (mm.o's conv_even) or "floor" (the fused-cast
    method's cast launch).

    `b_quantized`, `quantize_gemm_b(b)` computed earlier: a static weight converted once.
    `out`, a contiguous [..., N] tensor of `out_dtype`: C is written there (as the kernel
    writes its output buffer) and returned."""
    _check_gemm("gemm_bfp16", a, b, tile_k, fmt.block, out_dtype)
    k, n = b.shape
    shape = (*a.shape[:-1], n)
    if out is not None and (tuple(out.shape) != shape or out.dtype != out_dtype
                            or not out.is_contiguous()):
        raise ValueError(f"gemm_bfp16: out must be a contiguous {out_dtype} tensor of shape "
                         f"{shape}, got {out.dtype} {tuple(out.shape)}")
    a_q = _quantize_last_dim(a.reshape(-1, k).to(torch.float32), fmt)
    b_q = quantize_gemm_b(b, fmt) if b_quantized is None else b_quantized
    if out is not None and out_dtype == torch.float32 and not exact_tiles and not bf16_partials:
        torch.mm(a_q, b_q, out=out.view(-1, n))
        return out
    c = _accumulate(a_q, b_q, tile_k, exact_tiles, bf16_partials)
    return _write_c(c, shape, out_dtype, cast, out)


def gemm_bf16_native(a: torch.Tensor, b: torch.Tensor, *, tile_k: int = DEFAULT_TILE_K,
                     out_dtype: torch.dtype = torch.bfloat16, exact_tiles: bool = True,
                     bf16_partials: bool = False, cast: Rounding = "nearest_even"
                     ) -> torch.Tensor:
    """C = A @ B on AIE2P's native bf16 MMA (aie_api's mmul<4, 8, 8, bfloat16> when
    AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16 is not set): bf16 products, exact in FP32, tile
    sums added in K order in FP32, one cast to `out_dtype`. No block format, so none of its
    ~1e-2 error; the instruction does 4x8x8 MACs where the BFP16 one does 8x8x8, half the rate
    (see kernels.performance.model). `bf16_partials` and `cast` as in `gemm_bfp16`."""
    _check_gemm("gemm_bf16_native", a, b, tile_k, 1, out_dtype)
    k, n = b.shape
    a2, b2 = a.reshape(-1, k).to(torch.float32), b.to(torch.float32)
    c = _accumulate(a2, b2, tile_k, exact_tiles, bf16_partials)
    return _write_c(c, (*a.shape[:-1], n), out_dtype, cast, None)


def _check_gemm(fn: str, a: torch.Tensor, b: torch.Tensor, tile_k: int, block: int,
                out_dtype: torch.dtype) -> None:
    _check_bf16(fn, a=a, b=b)
    if b.dim() != 2 or a.dim() < 1 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"{fn}: need a [..., K] and b [K, N], got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if tile_k < block or tile_k % block:
        raise ValueError(f"{fn}: tile_k must be a positive multiple of the block ({block}), "
                         f"got {tile_k}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"{fn}: out_dtype must be torch.bfloat16 or torch.float32, "
                         f"got {out_dtype}")


def _write_c(c: torch.Tensor, shape: tuple[int, ...], out_dtype: torch.dtype, cast: Rounding,
             out: torch.Tensor | None) -> torch.Tensor:
    """The FP32 accumulator C [rows, N] as the kernel writes it: cast once to bf16 (rounding
    `cast`) or kept FP32, into `out` when given."""
    if out_dtype == torch.bfloat16:
        c = to_bf16(c, cast)
    if out is not None:
        out.view(-1, c.shape[-1]).copy_(c)
        return out
    return c.view(shape)


def quantize_gemm_b(b: torch.Tensor, fmt: BFPFormat = BFP16EBS8) -> torch.Tensor:
    """B [K, N] as the GEMM reads it: blocks run down its columns, along K [S1]."""
    return _quantize_last_dim(b.t().to(torch.float32), fmt).t()


# Rows of C per pass of the K-tile loop: 2**20 float64 partial sums (8 MiB) stay in the L3, so a
# tile's sum, rounding and FP32 add do not stream C through memory. Measured on the 2-core
# development machine (2048x8192x2048, tile_k 32): 2**16 -> 2.1 s, 2**17 -> 1.6 s, 2**19 to 2**22
# -> 0.9-1.3 s.
_ROWS_TARGET_ELEMS = 1 << 20
# The fast path's BLAS calls take at least this many rows: with fewer, float32 addmm fell off a
# cliff on the same machine (direct method, tile_k 32: 2048x8192x2048 in 12 s at 128-row
# blocks, 0.7 s at 256; 2048x4096x12288 in ~130 s at the 85 rows of _ROWS_TARGET_ELEMS, 2.1 s
# at 256).
_FAST_MIN_ROWS = 256


def _accumulate(a: torch.Tensor, b: torch.Tensor, tile_k: int, exact_tiles: bool,
                bf16_partials: bool) -> torch.Tensor:
    """The FP32 accumulator C = A @ B (float32 [rows, K] and [K, N], exactly representable
    products): K tile by K tile when the tile order or a per-tile rounding matters, else one
    BLAS call."""
    if exact_tiles or bf16_partials:
        return _accumulate_k_tiles(a, b, tile_k, exact=exact_tiles, bf16_partials=bf16_partials)
    return a @ b


def _accumulate_k_tiles(a_q: torch.Tensor, b_q: torch.Tensor, tile_k: int, *,
                        exact: bool = True, bf16_partials: bool = False) -> torch.Tensor:
    """Sum over K tiles, in order, into an FP32 accumulator. `exact`: each tile's sum exact
    (float64) and rounded to FP32 once, then added; otherwise each tile is one float32 BLAS
    call adding into the accumulator. `bf16_partials`: after each tile the accumulator is
    rounded to bf16 (nearest even) and read back."""
    m, k = a_q.shape
    n = b_q.shape[1]
    a, b = (a_q.to(torch.float64), b_q.to(torch.float64)) if exact else (a_q, b_q)
    c = torch.zeros(m, n, dtype=torch.float32)
    if m == 0 or n == 0:
        return c
    rows = max(1, min(m, max(_ROWS_TARGET_ELEMS // n, 1 if exact else _FAST_MIN_ROWS)))
    part64 = torch.empty(rows, n, dtype=torch.float64) if exact else None
    part32 = torch.empty(rows, n, dtype=torch.float32) if exact else None
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        acc = c[r0:r1]
        for k0 in range(0, k, tile_k):
            if part64 is not None and part32 is not None:
                p64, p32 = part64[: r1 - r0], part32[: r1 - r0]
                torch.mm(a[r0:r1, k0:k0 + tile_k], b[k0:k0 + tile_k], out=p64)
                p32.copy_(p64)  # the tile sum, rounded to FP32 once
                acc.add_(p32)   # the FP32 accumulator, in K order
            else:
                acc.addmm_(a[r0:r1, k0:k0 + tile_k], b[k0:k0 + tile_k])
            if bf16_partials:  # the bf16 C tile's round trip (truncf, then extf)
                acc.copy_(acc.to(torch.bfloat16))
    return c


# --- GEMV: FP32 vector accumulation -------------------------------------------------------------

def gemv_fp32acc(w: torch.Tensor, x: torch.Tensor, *, lanes: int = GEMV_LANES,
                 out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """y = W @ x as mv.cc computes it [S6]: W [M, K] and x [K] bf16, exact bf16 products added
    into `lanes` FP32 lanes (lane j takes every lanes-th k, in order), the lanes summed by
    pairwise halving in FP32 [S7], then one cast to `out_dtype` (the kernel writes bf16)."""
    _check_bf16("gemv_fp32acc", w=w, x=x)
    if w.dim() != 2 or x.dim() != 1 or w.shape[1] != x.shape[0]:
        raise ValueError(f"gemv_fp32acc: need w [M, K] and x [K], got {tuple(w.shape)} and "
                         f"{tuple(x.shape)}")
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"gemv_fp32acc: lanes must be a power of two, got {lanes}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"gemv_fp32acc: out_dtype must be torch.bfloat16 or torch.float32, "
                         f"got {out_dtype}")
    if w.shape[0] * w.shape[1] >= _FAST_MIN_ELEMS and w.stride(-1) == 1:
        y = _gemv_fp32acc_fast(w, x, lanes)
    else:
        y = _gemv_fp32acc_torch(w, x, lanes)
    return to_bf16(y) if out_dtype == torch.bfloat16 else y


def _gemv_fp32acc_fast(w: torch.Tensor, x: torch.Tensor, lanes: int) -> torch.Tensor:
    """`_gemv_fp32acc_torch` in one compiled pass over W's rows, reading W's bf16 bits in
    place (no float32 copy of W, no temporaries per lane block): bit-identical (tested)."""
    from ._bfp_kernel import gemv_lanes, gemv_lanes_serial

    m, k = w.shape
    x32 = torch.nn.functional.pad(x.to(torch.float32), (0, -k % lanes))
    y = torch.empty(m, dtype=torch.float32)
    run = gemv_lanes if m * k >= _GEMV_THREADED_ELEMS else gemv_lanes_serial
    run(w.view(torch.int16).numpy(), x32.numpy(), lanes, y.numpy())
    return y


# From this many elements of W a GEMV spreads its rows over numba's threads (rows are
# independent: the same bits on any number of threads). From 2^18 (SmolLM2-135M's 576 x 576
# projections and up) two threads take a 32-token greedy run from 4.18 s to 3.62 s; from
# 2^16 they save no more (measured on the CPU, 2 cores, 2026-12-02).
_GEMV_THREADED_ELEMS = 1 << 18


def _gemv_fp32acc_torch(w: torch.Tensor, x: torch.Tensor, lanes: int) -> torch.Tensor:
    """The definition of `gemv_fp32acc`'s FP32 result, in torch ops: what the compiled
    path is checked against."""
    m, k = w.shape
    pad = -k % lanes  # zero products: adding +0.0 changes no sum
    w32 = torch.nn.functional.pad(w.to(torch.float32), (0, pad))
    x32 = torch.nn.functional.pad(x.to(torch.float32), (0, pad))
    acc = torch.zeros(m, lanes, dtype=torch.float32)
    for k0 in range(0, k + pad, lanes):
        acc.add_(w32[:, k0:k0 + lanes] * x32[k0:k0 + lanes])  # bf16 x bf16 is exact in fp32
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        acc = acc[:, :half] + acc[:, half:]
    return acc[:, 0]


def _check_bf16(fn: str, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{fn}: {name} must be bfloat16 (the NPU's storage format), got "
                            f"{t.dtype}; convert it with kernels.emulation.numerics.to_bf16")


# --- the measurement protocol of the hardware figures -----------------------------------------

def gemm_operands(m: int, k: int, n: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A [M, K] and B [K, N] as mlir-air's GEMM tests draw them [S5]: randn / sqrt(K), as bf16."""
    gen = torch.Generator().manual_seed(seed)
    scale = 1.0 / math.sqrt(k)
    a = torch.randn(m, k, generator=gen) * scale
    b = torch.randn(k, n, generator=gen) * scale
    return to_bf16(a), to_bf16(b)


def fp32_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The reference of the hardware figures [S5, S6]: the FP32 matmul (or matvec) of the same
    bf16 inputs. Cast it with `to_bf16` to compare a bf16 output, as mlir-air does."""
    return a.to(torch.float32) @ b.to(torch.float32)


def gemv_operands(m: int, k: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """W [M, K] and x [K] as mlir-air's GEMV test draws them [S6]: randn * 4, as bf16."""
    gen = torch.Generator().manual_seed(seed)
    return to_bf16(torch.randn(m, k, generator=gen) * 4), to_bf16(torch.randn(k, generator=gen) * 4)
