"""A recording stand-in of mlir-air's Python builder, to run our programs where mlir-air is
not installed.

mlir-air's builder traces a program once: `@launch`, `@segment` and `@herd` call their body
with block arguments (the hierarchy indices, the sizes, then one value per operand), `for_`
yields its induction variable once, and each op call appends an operation at the insertion
point. This module offers the same names with the same signatures (mlir-air e972f29:
python/air/dialects/_air_ops_ext.py for Launch, Segment, Herd, Channel, ChannelGet,
ChannelPut, DmaMemcpyNd and module_builder; the MLIR Python bindings' func, memref, scf,
arith, affine (apply, and affine.if with IntegerSet and InsertionPoint) and vector
builders) and records, instead of IR, what the verifier
(`kernels.air_programs.air_verify`) checks: the regions with their index variables and trip counts,
every allocation, DMA, channel access, micro-kernel call and vector transfer, and where each
value was defined (hierarchy bodies are isolated from above, as in the dialect).

An index value is an affine expression over the variables of the regions around it
(`Ix`): the builder's `affine.apply` composes them, the verifier evaluates them over
every index they can take. A call that upstream's builder would refuse (an unknown keyword,
a non-constant loop bound, a product of two indices) raises `BuildError`.

`installed()` puts the stand-in in `sys.modules` as `air` for the time of a `with` and
restores what was there.

Four modules: the values it computes with (index expressions, types, attributes, affine
maps: kernels.air_programs.recording_values), what it records (the trace:
kernels.air_programs.recording_trace), the func, memref, scf, affine, arith, math and vector
builders (kernels.air_programs.recording_dialects), and here air's own hierarchy, channels
and DMAs, the module tree installed as `air`, and `build`.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .recording_dialects import (
    AffineIfOp,
    AffineYieldOp,
    AllocOp,
    CallOp,
    DeallocOp,
    FuncOp,
    IfOp,
    InsertionPoint,
    IntegerSet,
    YieldOp,
    _unary,
    affine_apply,
    arith,
    broadcast,
    fma,
    for_,
    load,
    reduction,
    store,
    subview,
    transfer_read,
    transfer_write,
    yield_,
)
from .recording_trace import (
    MemRef,
    Op,
    Region,
    Trace,
    Value,
    _Builder,
    _memref,
    _pattern,
    _use,
    index_of,
)
from .recording_values import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
    AffineMapAttr,
    AffineSymbolExpr,
    Attr,
    BuildError,
    IntegerAttr,
    Ix,
    MemorySpace,
    MemRefType,
    ShapedType,
    StridedLayoutAttr,
    StringAttr,
    Type,
    UnitAttr,
    Var,
    VectorType,
    _Types,
)

# --- hierarchy ---------------------------------------------------------------------------------

def _region_op(kind: str, default_sizes: Sequence[int]) -> Callable[..., Any]:
    def op(name: str | None = None, sizes: Sequence[Any] = tuple(default_sizes),
           async_token: Any = None, async_dependencies: Sequence[Any] = (),
           operands: Sequence[Any] = (), attributes: dict[str, Any] | None = None,
           loc: Any = None, ip: Any = None, **extra: Any) -> Callable[[Callable[..., Any]], Any]:
        if kind != "herd" and "link_with" in extra:
            raise TypeError(f"{kind}() got an unexpected keyword argument 'link_with'")
        unknown = set(extra) - {"link_with"}
        if unknown:
            raise TypeError(f"{kind}() got an unexpected keyword argument "
                            f"{sorted(unknown)[0]!r}")
        given = [index_of(s, f"{kind} sizes").constant() for s in sizes]
        counts = [c for c in given if c is not None and c >= 1]
        if len(counts) != len(given):
            raise BuildError(f"{kind} {name or ''}: sizes must be positive constants")
        for o in operands:
            _use(o, f"{kind} {name or ''} operand")

        def build(body: Callable[..., Any]) -> Any:
            parent = _Builder.here()
            label = name or body.__name__
            ids = tuple(Var(f"{label}.{axis}", 0, c) for axis, c in zip("xyzw", counts,
                                                                     strict=False))
            region = Region(kind, label, parent, ids, tuple(c for c in counts if c),
                            extra.get("link_with"))
            args: list[Any] = [Value(Type("index"), region, Ix.var(v), v.name) for v in ids]
            args += [Value(Type("index"), region, Ix.const(c), f"{label} size")
                     for c in counts]
            for o in operands:
                if isinstance(o, MemRef):
                    args.append(MemRef(o.memref, region, o.name, root=o))
                elif isinstance(o, Value):
                    args.append(Value(o.type, region, o.ix, o.what))
                else:
                    raise BuildError(f"{kind} {label}: operand {o!r} is not a value")
            with _Builder.inside(region):
                body(*args)
            return region
        return build
    op.__name__ = kind
    return op


launch = _region_op("launch", ())
segment = _region_op("segment", ())
herd = _region_op("herd", (1, 1))


def module_builder(module_function: Callable[..., Any]) -> Callable[..., Trace]:
    def build(*args: Any, **kwargs: Any) -> Trace:
        saved = _Builder.trace, _Builder.region
        _Builder.trace = Trace()
        _Builder.region = Region("module", "module", None)
        try:
            module_function(*args, **kwargs)
            return _Builder.trace
        finally:
            _Builder.trace, _Builder.region = saved
    build.__name__ = module_function.__name__
    return build


# --- channels and DMAs ---------------------------------------------------------------------

class Channel:
    def __init__(self, sym_name: str, broadcast_shape: Sequence[int] | None = None,
                 size: Sequence[int] | None = None, loc: Any = None, ip: Any = None, *,
                 buffer_resources: int | None = None) -> None:
        if _Builder.trace is None:
            raise BuildError(f"Channel {sym_name!r} declared outside a module")
        if sym_name in _Builder.trace.channels:
            raise BuildError(f"channel {sym_name!r} declared twice (symbol redefinition)")
        self.name = sym_name
        self.size = tuple(size) if size is not None else (1, 1)
        self.broadcast_shape = tuple(broadcast_shape) if broadcast_shape is not None else None
        self.attributes: dict[str, Any] = {}
        _Builder.trace.channels[sym_name] = self

    @property
    def channel_type(self) -> str:
        attr = self.attributes.get("channel_type")
        return attr.value if isinstance(attr, Attr) else "dma_stream"


def _channel_op(kind: str, chan_name: str, memref: Any, offsets: Sequence[Any],
                sizes: Sequence[Any], strides: Sequence[Any], indices: Sequence[Any],
                pad_before: Any, pad_after: Any) -> Op:
    what = f"Channel{'Put' if kind == 'put' else 'Get'}({chan_name!r})"
    if (pad_before is None) != (pad_after is None):
        raise ValueError("pad_before and pad_after must both be specified or both omitted")
    m = _memref(memref, what)
    return _Builder.record(Op(kind, _Builder.here(), (m,),
                              (_pattern(m, offsets, sizes, strides, what),),
                              channel=chan_name,
                              indices=tuple(index_of(i, what) for i in indices)))


def ChannelGet(chan_name: str, dst: Any, offsets: Sequence[Any] = (),  # noqa: N802
               sizes: Sequence[Any] = (), strides: Sequence[Any] = (),
               indices: Sequence[Any] = (), async_token: Any = None,
               async_dependencies: Sequence[Any] = (), pad_before: Any = None,
               pad_after: Any = None, loc: Any = None, ip: Any = None) -> Op:
    return _channel_op("get", chan_name, dst, offsets, sizes, strides, indices, pad_before,
                       pad_after)


def ChannelPut(chan_name: str, src: Any, offsets: Sequence[Any] = (),  # noqa: N802
               sizes: Sequence[Any] = (), strides: Sequence[Any] = (),
               indices: Sequence[Any] = (), dest: Any = None, async_token: Any = None,
               async_dependencies: Sequence[Any] = (), pad_before: Any = None,
               pad_after: Any = None, loc: Any = None, ip: Any = None) -> Op:
    return _channel_op("put", chan_name, src, offsets, sizes, strides, indices, pad_before,
                       pad_after)


def dma_memcpy_nd(dst: Any, src: Any, async_dependencies: Sequence[Any] = (),
                  async_token: Any = None, dst_offsets: Sequence[Any] = (),
                  dst_sizes: Sequence[Any] = (), dst_strides: Sequence[Any] = (),
                  src_offsets: Sequence[Any] = (), src_sizes: Sequence[Any] = (),
                  src_strides: Sequence[Any] = (), pad_before: Any = None,
                  pad_after: Any = None) -> Op:
    if (pad_before is None) != (pad_after is None):
        raise ValueError("pad_before and pad_after must both be specified or both omitted")
    d, s = _memref(dst, "dma_memcpy_nd dst"), _memref(src, "dma_memcpy_nd src")
    return _Builder.record(Op(
        "dma", _Builder.here(), (d, s),
        (_pattern(d, dst_offsets, dst_sizes, dst_strides, "dma_memcpy_nd dst"),
         _pattern(s, src_offsets, src_sizes, src_strides, "dma_memcpy_nd src"))))


# --- installing it as `air` ----------------------------------------------------------------------

def _modules() -> dict[str, types.ModuleType]:
    def module(name: str, **names: Any) -> types.ModuleType:
        m = types.ModuleType(name, "npu-deploy's recording stand-in of mlir-air's " + name)
        m.__dict__.update(names)
        m.__all__ = [n for n in names if not n.startswith("_")]   # type: ignore[attr-defined]
        return m

    ir = module("air.ir", MemRefType=MemRefType, VectorType=VectorType, IntegerAttr=IntegerAttr,
                StringAttr=StringAttr, UnitAttr=UnitAttr, AffineMap=AffineMap,
                AffineMapAttr=AffineMapAttr, AffineExpr=AffineExpr,
                StridedLayoutAttr=StridedLayoutAttr, ShapedType=ShapedType,
                AffineConstantExpr=AffineConstantExpr, AffineSymbolExpr=AffineSymbolExpr,
                AffineDimExpr=AffineDimExpr, IntegerSet=IntegerSet,
                InsertionPoint=InsertionPoint)
    air = module("air.dialects.air", launch=launch, segment=segment, herd=herd,
                 Channel=Channel, ChannelGet=ChannelGet, ChannelPut=ChannelPut,
                 dma_memcpy_nd=dma_memcpy_nd, module_builder=module_builder, T=_Types(),
                 MemorySpace=MemorySpace)
    arith_m = module("air.dialects.arith", **vars(arith))
    mods = {
        "air.ir": ir,
        "air.dialects.air": air,
        "air.dialects.arith": arith_m,
        "air.dialects.affine": module("air.dialects.affine", apply=affine_apply,
                                      AffineIfOp=AffineIfOp, AffineYieldOp=AffineYieldOp),
        "air.dialects.func": module("air.dialects.func", FuncOp=FuncOp, CallOp=CallOp),
        "air.dialects.memref": module("air.dialects.memref", AllocOp=AllocOp,
                                      DeallocOp=DeallocOp, subview=subview, load=load,
                                      store=store),
        "air.dialects.scf": module("air.dialects.scf", for_=for_, yield_=yield_, IfOp=IfOp,
                                   YieldOp=YieldOp),
        "air.dialects.math": module("air.dialects.math", tanh=_unary("math.tanh"),
                                    exp=_unary("math.exp"), rsqrt=_unary("math.rsqrt")),
        "air.dialects.vector": module("air.dialects.vector", broadcast=broadcast, fma=fma,
                                      reduction=reduction,
                                      transfer_read=transfer_read,
                                      transfer_write=transfer_write),
    }
    dialects = module("air.dialects", **{k.rsplit(".", 1)[1]: v for k, v in mods.items()
                                         if k.startswith("air.dialects.")})
    root = module("air", ir=ir, dialects=dialects)
    return {"air": root, "air.dialects": dialects, **mods}


@contextmanager
def installed() -> Iterator[None]:
    """The stand-in as `air` in sys.modules for the time of the `with`."""
    mods = _modules()
    saved = {name: sys.modules.get(name) for name in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def build(source: str, filename: str = "<program>") -> tuple[Trace, dict[str, Any]]:
    """Run a program's source against the stand-in: its trace and its module namespace
    (FUNCTION, OBJECTS, ...). Raises BuildError (or what Python raises) where mlir-air's
    builder would fail."""
    namespace: dict[str, Any] = {"__name__": "npu_deploy_air_program"}
    with installed():
        exec(compile(source, filename, "exec"), namespace)   # noqa: S102 - our own program
        builder = namespace.get("build_module")
        if builder is None:
            raise BuildError("the program defines no build_module")
        trace = builder()
    if not isinstance(trace, Trace):
        raise BuildError("build_module is not decorated with @module_builder")
    return trace, namespace
