"""Spatial NPUs as data: the array, its memories, its DMA engines and their limits.

XDNA 2 is described from `docs/hardware-facts.md` (public figures from Xilinx/mlir-air,
Xilinx/mlir-aie and amd/xdna-driver). Another array is one more instance of
`Hardware`, not new code: the checker and the selection read only these fields.
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
GB = 1e9

# The bandwidth roof of the roofline: the best effective DDR bandwidth an NPU kernel sees
# (docs/hardware-facts.md#dispatch-and-host-costs: ~30-58 GB/s).
DDR_ROOF = 58 * GB


@dataclass(frozen=True)
class DmaPorts:
    """DMA channels of one tile: S2MM (into the tile) and MM2S (out of it)."""

    inputs: int
    outputs: int


@dataclass(frozen=True)
class Hardware:
    name: str
    rows: int                       # compute-tile rows
    cols: int                       # columns; one memory tile and one shim tile each
    l1_bytes: int                   # data memory per compute tile
    l2_bytes: int                   # per memory tile
    compute_dma: DmaPorts
    memory_dma: DmaPorts
    shim_dma: DmaPorts
    compute_bds: int                # buffer descriptors per compute tile
    memory_bds: int                 # per memory tile
    shim_bds: int                   # per shim tile
    max_repeat: int                 # DMA repeat count limit
    max_stride: int                 # DMA stride limit, in elements
    transfer_align: int             # a transfer's length must be a multiple of this (bytes)
    clock_hz: float
    matmul_flops_per_cycle: int     # per compute tile, bf16 through the matmul unit
    mmul_k_block: int               # the block the matmul datapath shares an exponent over
    # hardware contexts one process keeps open at once: one per loaded program (ELF).
    # Upstream finds a process that loads about 10 or more distinct ELFs failing to create
    # the next context (DRM_IOCTL_AMDXDNA_CREATE_HWCTX err=-22), with spurious timeouts
    # before that (programming_examples/llms/smolvla/docs/profile.md); we stay at 8.
    hw_contexts: int = 8

    @property
    def tiles(self) -> int:
        return self.rows * self.cols

    @property
    def peak_flops(self) -> float:
        """The implied peak of the array (never reached:
        docs/hardware-facts.md#clock-and-matmul-datapath)."""
        return self.tiles * self.matmul_flops_per_cycle * self.clock_hz

    @property
    def shim_inputs(self) -> int:
        """DDR -> array streams over the whole array."""
        return self.cols * self.shim_dma.inputs

    @property
    def shim_outputs(self) -> int:
        return self.cols * self.shim_dma.outputs


# docs/hardware-facts.md#array-and-memories, #dma-limits and #clock-and-matmul-datapath:
# 4 x 8 AIE2P tiles, 64 KiB L1, 512 KiB memory tile
# per column, DMA 2+2 / 6+6 / 2+2, BDs 16 / 48 / 16, repeat <= 255, strides in
# [1, 1048576], 4-byte transfers, 1800 MHz (inferred), 8x8x8 BFP16 MMA = 1024 FLOP/cycle.
XDNA2 = Hardware(
    name="XDNA 2 (NPU2, Strix / Ryzen AI 300)", rows=4, cols=8,
    l1_bytes=64 * KiB, l2_bytes=512 * KiB,
    compute_dma=DmaPorts(2, 2), memory_dma=DmaPorts(6, 6), shim_dma=DmaPorts(2, 2),
    compute_bds=16, memory_bds=48, shim_bds=16,
    max_repeat=255, max_stride=1_048_576, transfer_align=4,
    clock_hz=1.8e9, matmul_flops_per_cycle=1024, mmul_k_block=8,
)

# The first-generation array (Phoenix / Hawk Point), as a second instance: 4 x 4 AIE-ML
# tiles with the same memory sizes and DMA layout. Its clock and matmul rate are
# indicative (AIE-ML bf16 4x8x4 MMA = 256 FLOP/cycle; ~1 GHz): nothing here is
# calibrated on it.
XDNA1 = Hardware(
    name="XDNA (NPU1, Phoenix)", rows=4, cols=4,
    l1_bytes=64 * KiB, l2_bytes=512 * KiB,
    compute_dma=DmaPorts(2, 2), memory_dma=DmaPorts(6, 6), shim_dma=DmaPorts(2, 2),
    compute_bds=16, memory_bds=48, shim_bds=16,
    max_repeat=255, max_stride=1_048_576, transfer_align=4,
    clock_hz=1.0e9, matmul_flops_per_cycle=256, mmul_k_block=8,
)

HARDWARE = {"xdna2": XDNA2, "xdna1": XDNA1}
