"""The GEMM's MLIR-AIR program: a launch over C blocks, A and B panels staged in the memory
tiles (L2), C accumulated in L1 by mlir-air's matmul micro-kernel (mm_aie2p.cc, one compiled
variant per tile shape), drained to DDR; with fused-cast, the second launch that casts the
FP32 scratch to the bf16 C. The GEMM family (kernels.families.gemm) declares it as its
`PROGRAM`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..air_programs.air_parts import (
    Buffer,
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    alloc_l1,
    buf,
    call,
    cdiv,
    dims,
    extern,
    free,
    memref,
    open_herd,
    stored_length,
)
from ..definition.family import (
    BF16,
    FP32,
    AirProgram,
)
from ..definition.hardware import Hardware
from .gemm_numerics import method_name

if TYPE_CHECKING:
    from ..plans.plan import Launch

#: The GEMM core's stack (the stack_size its programs ask aircc for), beside its L1 buffers.
STACK_BYTES = 2048
#: The matmul microkernel (mm_aie2p.cc) asserts m % (2 r) == 0, k % s == 0 and n % (2 t) == 0
#: for its r x s x t = 8 x 8 x 8 MMA: tile_m and tile_n multiples of 16, tile_k_l1 of 8.
MMUL = 8
# --- the program: launch over C blocks, A and B panels in L2, C in L1 ---------------------

#: mlir-air's matmul micro-kernel (programming_examples/matrix_multiplication/*/mm_aie2p.cc),
#: compiled with Peano once per tile shape: DIM_M, DIM_K, DIM_N are baked in, and SYM_SUFFIX
#: renames its symbols so that objects of two tile shapes never clash in one module
#: (llms/shared/infra/external_kernels.py compile_gemm_mm, which builds mm_m64.o with `_m64`).
MM_SOURCE = "programming_examples/matrix_multiplication/bf16_in_fp32_out/mm_aie2p.cc"


@dataclass(frozen=True)
class MicroKernel:
    """One compiled variant of mm_aie2p.cc: its object, symbols and L1 element types."""

    obj: str
    suffix: str
    acc: str                          # the C tile's element type: f32, or bf16 (direct)
    defines: tuple[tuple[str, str], ...]

    @property
    def matmul(self) -> str:
        return f"op_has_no_registered_library_name{self.suffix}"

    @property
    def zero(self) -> str:
        return f"zero_f32_mn{self.suffix}"

    @property
    def cast(self) -> str:
        return f"f32_to_bf16_mn{self.suffix}"


def micro_kernel(kernel: str, method: str, tm: int, tk1: int, tn: int, hn: int,
                 datapath: str = "bfp16") -> MicroKernel:
    """The object a GEMM launch links. The FP32-accumulating methods share one per tile shape
    and herd_n (`mm_64x32x128_n4.o`, symbols `..._64x32x128_n4`): a core's C slab is declared
    with its strides within the [herd_m, herd_n, ...] accumulator (upstream's
    StridedLayoutAttr), and the first of them is herd_n x tile_m x tile_n, so two herd_n
    need two declarations, hence two symbols. The direct method of a bf16 output keeps its
    C tile in bf16 (rounded once per call, i.e. per L1 K tile), so its object is the same
    source compiled with bf16 C (`combos`); the native bf16 datapath leaves out the BFP16
    emulation."""
    bf16_acc = kernel == "gemm_bf16" and method == "direct"
    tag = ("bf16acc_" if bf16_acc else "") + ("native_" if datapath == "bf16" else "")
    shape = f"{dims(tm, tk1, tn)}_n{hn}"
    defines = [("BIT_WIDTH", "8"), ("DIM_M", str(tm)), ("DIM_K", str(tk1)),
               ("DIM_N", str(tn)), ("DIM_M_DIV_4", str(tm // 4)),
               ("DIM_M_DIV_8", str(tm // 8)), ("DIM_N_DIV_4", str(tn // 4)),
               ("DIM_N_DIV_8", str(tn // 8)), ("SYM_SUFFIX", f"_{tag}{shape}")]
    if datapath != "bf16":
        defines.append(("AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16", "1"))
    if bf16_acc:
        defines.append(("combos(X)", f"X(bfloat16, bf16, bfloat16, bf16, {MMUL}, {MMUL}, "
                                     f"{MMUL})"))
    return MicroKernel(f"mm_{tag}{shape}.o", f"_{tag}{shape}", "bf16" if bf16_acc else "f32",
                       tuple(defines))


def zero_symbol(mk: MicroKernel, tm: int, tn: int) -> str:
    """zero_f32_mn zeroes an FP32 C; a bf16 C has only the shape-named fill of the file's
    `zero_vectorized_c_func` (no SYM_SUFFIX: two bf16-C objects of one tile_m x tile_n in a
    module would share it)."""
    return mk.zero if mk.acc == "f32" else \
        f"linalg_fill_bf16_view1x1x{tn // MMUL}x{tm // MMUL}x{MMUL}x{MMUL}xbf16as2"


def blocked_a(tm: int, tk1: int) -> tuple[int, ...]:
    """A [tile_m, tile_k_l1] as mm_aie2p.cc reads it: [k / s][m / r][r][s] (r = s = 8), after
    upstream's [1, 1] herd dimensions."""
    return (1, 1, tk1 // MMUL, tm // MMUL, MMUL, MMUL)


def blocked_b(tk1: int, tn: int) -> tuple[int, ...]:
    """B [tile_k_l1, tile_n] as the kernel reads it: [n / t][k / s][s][t]."""
    return (1, 1, tn // MMUL, tk1 // MMUL, MMUL, MMUL)


def blocked_c(tm: int, tn: int) -> tuple[int, ...]:
    """C [tile_m, tile_n] as the kernel reads and writes it: [n / t][m / r][r][t]."""
    return (tn // MMUL, tm // MMUL, MMUL, MMUL)


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tk1, tn, hm, hn = (int(c[k]) for k in
                                ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n"))
    out = launch.spec.output(s).elem_bytes
    method = method_name(launch.kernel, s, c)
    mk = micro_kernel(launch.kernel, method, tm, tk1, tn, hn, str(c.get("datapath", "bfp16")))
    # mlir-air GEMM: launch over output blocks, A and B panels staged in the memory tiles
    # per K2 step, tiles of K1 moved into L1 in the kernel's blocked layout, C accumulated
    # in L1 (one slab per core of a segment-scope buffer) and drained.
    # fused-cast: the GEMM drains an FP32 C into a device scratch, and a second launch casts
    # it to bf16 (upstream's build_module_gemm_cast; its drain herd has no room for a cast
    # buffer at tile_m 64: 72 KiB)
    fused = method == "fused-cast"
    l2 = (buf("a_l2", (hm, tm, tk2), BF16, "L2", True), buf("b_l2", (tk2, hn * tn), BF16,
          "L2", True), buf("c_l2", (hm, tm, hn * tn), FP32 if fused else out, "L2"))
    l1: tuple[Buffer, ...] = (
        buf("a_l1", blocked_a(tm, tk1), BF16, "L1", True, "compute"),
        buf("b_l1", blocked_b(tk1, tn), BF16, "L1", True, "compute"),
        buf("c_l1", (hm, hn, *blocked_c(tm, tn)), mk.acc, "L1", herd_axes=2))
    tail = (Extern(mk.cast, mk.obj, ("c_l1", "c_out_l1")),) \
        if out == BF16 and mk.acc == "f32" and not fused else ()
    if tail:
        # drain's bf16 buffer stays beside the accumulator and A and B (upstream's 72 KiB at
        # tile_m 64); for the other methods it lives in the drain phase only
        l1 += (buf("c_out_l1", (1, 1, *blocked_c(tm, tn)), BF16, "L1",
                   phase="all" if method == "drain" else "drain"),)
    # M rounds up to whole rounds of tile_m x herd_m rows: A is read and C written past the
    # data, row-major to the end of the buffer (the host pads), head-first to each head's
    # padded length (`kernels.air_programs.air.pad_sequences`, a multiple of the rounds)
    head_first = launch.binding("c").layout == "head-first"
    rows = stored_length(launch, "c", cdiv(M, tm * hm) * tm * hm) if head_first \
        else cdiv(M, tm * hm) * tm * hm
    padded = {"a": rows * K} if rows > M else {}
    if rows > M and not head_first:
        padded["c"] = rows * N
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(rows // (tm * hm), cdiv(N, tn * hn)), segment=None, herd=(hm, hn), l2=l2, l1=l1,
        loop=cdiv(K, tk2), inner=tk2 // tk1,
        externs=(Extern(zero_symbol(mk, tm, tn), mk.obj, ("c_l1",)),
                 Extern(mk.matmul, mk.obj, ("a_l1", "b_l1", "c_l1")), *tail),
        kernels=(KernelSource(mk.obj, MM_SOURCE, mk.defines),),
        # upstream's GEMM builds and its LLM ELFs pass [2, 2] (BD-ID recycling)
        flags={"stack_size": STACK_BYTES, "runtime_loop_tiling_sizes": [2, 2]}, padded=padded,
        sequence=(M, tm * hm) if head_first else None,
        scratch=(("c_f32", "c", "f32"),) if fused else (),
        imports=CAST_IMPORTS if fused else ())


def _slab(w: Writer, c_l1: Buffer) -> str:
    """This core's slab of the accumulator: memref.subview at [tx, ty, 0, ...]."""
    rest = len(c_l1.shape) - c_l1.herd_axes
    w(f"c_tile = subview({c_l1.name}, [tx, ty{', 0' * rest}], {list(c_l1.slab)}, "
      f"{[1] * len(c_l1.shape)})")
    return "c_tile"


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    """mlir-air GEMM (matrix_multiplication/*/run.py): the C accumulator is allocated in the
    segment, [herd_m, herd_n, ...] in L1, and each core works on its slab; a herd zeroes
    them; per K2 step the segment stages A and B panels in L2 and a herd multiplies them K1
    by K1, its DMAs re-blocking A and B into the kernel's layout; a last herd casts (bf16
    out) and drains C, un-blocked, through L2 to DDR."""
    s = launch.shape_dict
    K, N = s["K"], s["N"]
    a_l2, b_l2, c_l2 = layout.l2
    a_l1, b_l1, c_l1 = layout.l1[:3]
    rest = layout.l1[3:]
    hm, hn = layout.herd           # upstream's sizes=[herd_m, herd_n]: tx splits M, ty N
    tk1, tm = a_l1.shape[2] * MMUL, a_l1.shape[3] * MMUL
    tn, tk2 = b_l1.shape[2] * MMUL, a_l2.shape[2]
    span = hn * tn
    w(f"{c_l1.name} = AllocOp({memref(c_l1.shape, c_l1.dtype, 'L1')}, [], [])  "
      "# a slab per core, kept across the K loop")
    open_herd(w, p, layout, [c_l1.name], "zero the accumulators")
    call(w, layout.externs[0], names={c_l1.name: _slab(w, c_l1)})
    w.dedent()
    w(f"for k2 in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({a_l2.name}, {arg['a']}, src_offsets=[0, at([(lx, {hm * tm * K}), "
      f"(k2, {tk2})])], src_sizes=[{hm * tm}, {tk2}], src_strides=[{K}, 1])")
    # B is stored as b_parts column blocks [b_parts, K, N / b_parts]: launch column ly is
    # block ly // (blocks per part), and a K step moves tile_k_l2 rows of one block.
    parts = int(launch.config_dict.get("b_parts", 1))
    np_ = N // parts
    if parts > 1:
        w(f"part = at([(ly, 1)], divisor={np_ // span})")
        w(f"dma_memcpy_nd({b_l2.name}, {arg['b']}, src_offsets=[0, at([(part, {K * np_ - np_}), "
          f"(k2, {tk2 * np_}), (ly, {span})])], src_sizes=[{tk2}, {span}], "
          f"src_strides=[{np_}, 1])")
    else:
        w(f"dma_memcpy_nd({b_l2.name}, {arg['b']}, src_offsets=[0, at([(k2, {tk2 * N}), "
          f"(ly, {span})])], src_sizes=[{tk2}, {span}], src_strides=[{N}, 1])")
    open_herd(w, p, layout, [a_l2.name, b_l2.name, c_l1.name], f"multiply one K2 step of {tk2}")
    alloc_l1(w, (a_l1, b_l1))
    tile = _slab(w, c_l1)
    w(f"for k1 in range_(0, {layout.inner}):")
    w.indent()
    # A [tile_m, tile_k_l1] at (tx, k1) of the panel [herd_m, tile_m, tile_k_l2], walked in
    # the kernel's order [k / 8][m / 8][8][8]
    w(f"dma_memcpy_nd({a_l1.name}, {a_l2.name}, src_offsets=[tx, 0, 0, 0, at([(k1, {tk1})])], "
      f"src_sizes=[1, {tk1 // MMUL}, {tm // MMUL}, {MMUL}, {MMUL}], "
      f"src_strides=[{tm * tk2}, {MMUL}, {MMUL * tk2}, {tk2}, 1])")
    # B [tile_k_l1, tile_n] at (k1, ty) of the panel [tile_k_l2, herd_n x tile_n], walked
    # [n / 8][k / 8][8][8]
    w(f"dma_memcpy_nd({b_l1.name}, {b_l2.name}, src_offsets=[0, 0, at([(k1, {tk1})]), "
      f"at([(ty, {tn})])], src_sizes=[{tn // MMUL}, {tk1 // MMUL}, {MMUL}, {MMUL}], "
      f"src_strides=[{MMUL}, {MMUL * span}, {span}, 1])")
    call(w, layout.externs[1], names={c_l1.name: tile})
    w("yield_([])")
    w.dedent()
    free(w, (a_l1, b_l1))
    w.dedent()
    w("yield_([])")
    w.dedent()
    open_herd(w, p, layout, [c_l2.name, c_l1.name], "drain C to the memory tile")
    out = _slab(w, c_l1)
    if rest:
        alloc_l1(w, rest)
        call(w, extern(layout, "f32_to_bf16"), names={c_l1.name: out})
        out = rest[0].name
    # the blocked tile [n / 8][m / 8][8][8] read back in row order (m / 8, 8, n / 8, 8) into
    # the core's [tile_m, tile_n] of the herd row's C tiles
    w(f"dma_memcpy_nd({c_l2.name}, {out}, dst_offsets=[tx, 0, at([(ty, {tn})])], "
      f"dst_sizes=[1, {tm}, {tn}], dst_strides=[{tm * span}, {span}, 1], "
      f"src_offsets=[0, 0, 0, 0], src_sizes=[{tm // MMUL}, {MMUL}, {tn // MMUL}, {MMUL}], "
      f"src_strides=[{MMUL * MMUL}, {MMUL}, {tm * MMUL}, 1])")
    free(w, rest)
    w.dedent()
    drain_c(w, launch, arg.get("c_f32", arg["c"]), c_l2.name, hm * tm, span, head_dim)
    w(f"DeallocOp({c_l1.name})")


# --- fused-cast's second launch: the FP32 scratch cast to the bf16 C -----------------------

CAST_IMPORTS = ("from air.dialects.vector import transfer_read, transfer_write",
                "from air.ir import AffineMapAttr, VectorType")
CAST_LANES = 16          # upstream's cast: arith.truncf over 16-wide vectors
CAST_TILE = 2048         # its default tile_n: elements per DMA block


def cast_launch(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
                names: list[str], head_dim: int | None) -> None:
    """Upstream's `_build_cast_module` (matrix_multiplication/bf16_in_bf16_out/run.py): the
    C scratch and C taken as flat buffers (the cast is element-wise, so the scratch holds C
    in C's own layout), a [herd_x, 1] herd of cores each owning a contiguous chunk, moved
    into L1 a block at a time and truncated to bf16 by vectors."""
    if "c_f32" not in arg:
        return
    c = next(o for o in layout.operands if o.name == "c")
    n = max(c.numel, layout.padded.get("c", 0))
    herd_x = next(h for h in (8, 4, 2, 1) if n % (h * CAST_LANES) == 0)
    chunk = n // herd_x
    block = math.gcd(chunk, CAST_TILE)
    s_, c_ = arg["c_f32"], arg["c"]
    w(f"# launch {p}c: fused-cast's cast of launch {p}'s FP32 C to bf16, "
      f"herd {herd_x}x1")
    w(f"@launch(operands=[{s_}, {c_}], sizes=[1, 1])")
    w(f"def {p}c_launch(lx, ly, lsx, lsy, {s_}, {c_}):")
    w.indent()
    w(f"@segment(name='{p}c_segment', operands=[{s_}, {c_}])")
    w(f"def {p}c_segment({s_}, {c_}):")
    w.indent()
    w(f"@herd(name='{p}c_herd', sizes=[{herd_x}, 1], operands=[{s_}, {c_}])")
    w(f"def {p}c_herd(tx, ty, hsx, hsy, {s_}, {c_}):")
    w.indent()
    w(f"f_l1 = AllocOp(MemRefType.get([{block}], f32, memory_space=L1), [], [])")
    w(f"b_l1 = AllocOp(MemRefType.get([{block}], bf16, memory_space=L1), [], [])")
    w(f"vf, vb = VectorType.get([{CAST_LANES}], f32), VectorType.get([{CAST_LANES}], bf16)")
    w("identity = AffineMapAttr.get(AffineMap.get_identity(1))")
    w("zero = arith.ConstantOp(f32, 0.0)")
    w(f"for i in range_(0, {chunk // block}):")
    w.indent()
    w(f"offset = at([(tx, {chunk}), (i, {block})])")
    w(f"dma_memcpy_nd(f_l1, {s_}, src_offsets=[offset], src_sizes=[{block}], "
      "src_strides=[1])")
    w(f"for j in range_(0, {block // CAST_LANES}):")
    w.indent()
    w(f"lane = at([(j, {CAST_LANES})])")
    w("x = transfer_read(vf, f_l1, [lane], identity, zero, [True])")
    w("transfer_write(None, arith.truncf(vb, x), b_l1, [lane], identity, [True])")
    w("yield_([])")
    w.dedent()
    w(f"dma_memcpy_nd({c_}, b_l1, dst_offsets=[offset], dst_sizes=[{block}], "
      "dst_strides=[1])")
    w("yield_([])")
    w.dedent()
    w("DeallocOp(f_l1)")
    w("DeallocOp(b_l1)")
    w.dedent()
    w.dedent()
    w.dedent()
    w("")


def drain_c(w: Writer, launch: Launch, c: str, c_l2: str, rows: int, span: int,
             head_dim: int | None) -> None:
    """The C block [rows, span] at (lx, ly) from the memory tile to DDR: row-major [M, N],
    or head-first [N / head_dim, M, head_dim] when C is bound head-first (the DMA does the
    transpose the host would otherwise do)."""
    N = launch.shape_dict["N"]
    M = stored_length(launch, "c", launch.shape_dict["M"])    # rows per head on the device
    if launch.binding("c").layout != "head-first":
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(lx, {rows * N}), (ly, {span})])], "
          f"dst_sizes=[{rows}, {span}], dst_strides=[{N}, 1])")
        return
    if M % rows:
        raise EmitError(f"{launch.label}: C is bound head-first with {M} rows per head, not a "
                        f"multiple of tile_m x herd_m ({rows}): the last block of a head would "
                        "write into the next; pad the sequence "
                        "(kernels.air_programs.air.pad_sequences)")
    hd = head_dim
    if hd is None or N % hd:
        raise EmitError(f"{launch.label}: C is bound head-first; the program needs the "
                        f"model's head_dim (got {hd}) dividing N={N}")
    if span % hd == 0:      # whole heads per block: a 3-D pattern on both sides
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, 0, at([(ly, {span // hd * M * hd}), "
          f"(lx, {rows * hd})])], dst_sizes=[{span // hd}, {rows}, {hd}], "
          f"dst_strides=[{M * hd}, {hd}, 1], src_offsets=[0, 0, 0], "
          f"src_sizes=[{span // hd}, {rows}, {hd}], src_strides=[{hd}, {span}, 1])")
    elif hd % span == 0:    # a slice of one head: head = n0 // hd, column n0 mod hd
        w(f"head = at([(ly, {span})], divisor={hd})")
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(head, {M * hd - hd}), "
          f"(ly, {span}), (lx, {rows * hd})])], dst_sizes=[{rows}, {span}], "
          f"dst_strides=[{hd}, 1])")
    else:
        raise EmitError(f"{launch.label}: a head-first C needs tile_n x herd_n ({span}) and "
                        f"head_dim ({hd}) to divide one another")


PROGRAM = AirProgram(launch_layout, segment, after=cast_launch)
