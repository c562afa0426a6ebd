"""A symbolic evaluator of emitted MLIR-AIR program sources, for the addressing tests
(test_air_addressing.py): it runs the source's syntax tree, enumerates every air.launch,
air.segment and air.herd index and every loop iteration, evaluates the `at(...)` affine helper
(nested too) and the names assigned from it, and records each DMA (ChannelPut, ChannelGet,
dma_memcpy_nd), micro-kernel call and vector store with the flat elements it walks. Scalars a
core keeps in L1 (memref.load / memref.store, i32 arithmetic and comparisons, scf.if) are
run too, in the launch grid's order (its last index fastest), each core's L1 starting at zero
and kept across launch iterations: FlashAttention's causal-mask counter. Helpers build the
launches and the elements a layout puts a slice at. mlir-air is not needed."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import KernelUse
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch

HIERARCHY = ("launch", "segment", "herd")
#: what the evaluator records: DMAs, micro-kernel calls, inline code's vector stores
ISSUED = ("ChannelPut", "ChannelGet", "dma_memcpy_nd", "CallOp", "transfer_write")
#: What the programs' two star imports (air.dialects.air, air.ir) may provide.
STAR = {"launch", "segment", "herd", "Channel", "ChannelGet", "ChannelPut", "dma_memcpy_nd",
        "module_builder", "T", "MemorySpace", "MemRefType", "IntegerAttr", "StringAttr",
        "UnitAttr", "AffineMap", "AffineExpr", "AffineConstantExpr", "AffineSymbolExpr",
        "StridedLayoutAttr", "ShapedType", "IntegerSet", "InsertionPoint"}


# --- building launches -----------------------------------------------------------------------

def make_launch(kernel: str, shape: dict[str, int], config: dict[str, Any] | None = None,
                layouts: dict[str, str] | None = None) -> Launch:
    """A launch of `kernel` whose operands are bound in `layouts` (seq-first otherwise)."""
    spec = SPECS[kernel]
    config = config if config is not None else select(KernelUse(kernel, spec, shape), XDNA2).config
    bindings = tuple(Binding(o.name, f"t.{o.name}", "input" if o.role != "output" else "output",
                             (layouts or {}).get(o.name, "seq-first"))  # type: ignore[arg-type]
                     for o in spec.operands(shape))
    return Launch(kernel, kernel, 0, tuple(sorted(shape.items())),
                  tuple(sorted(config.items())), bindings)


def emit(launch: Launch, head_dim: int | None = None) -> str:
    return emit_dispatch(Dispatch("one", (launch,)), XDNA2, head_dim).source


# --- the evaluator ---------------------------------------------------------------------------

def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _callee(node: ast.AST) -> str | None:
    return ast.unparse(node.func) if isinstance(node, ast.Call) else None


@dataclass
class Memory:
    """The scalars cores keep in L1 (memref.store, memref.load): per allocation, core
    (segment and herd indices) and element. L1 starts at zero when the program is loaded
    and keeps its values across launch iterations."""

    cells: dict[tuple[str, tuple[int, ...], int], int] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def core(env: dict[str, int]) -> tuple[int, ...]:
        return tuple(env.get(k, -1) for k in ("gx", "gy", "tx", "ty"))

    def load(self, node: ast.Call, env: dict[str, int]) -> int:
        buffer, (index,) = node.args[0], node.args[1].elts     # type: ignore[attr-defined]
        assert isinstance(buffer, ast.Name)
        key = (self.refs[buffer.id], self.core(env), value(index, env, self))
        return self.cells.get(key, 0)

    def store(self, node: ast.Call, env: dict[str, int]) -> None:
        what, buffer, (index,) = node.args[0], node.args[1], \
            node.args[2].elts                                    # type: ignore[attr-defined]
        assert isinstance(buffer, ast.Name)
        key = (self.refs[buffer.id], self.core(env), value(index, env, self))
        self.cells[key] = value(what, env, self)


#: i32 arithmetic and comparisons on the scalars (arith.AddIOp(...).result, arith.CmpIOp)
_INTEGER = {"arith.AddIOp": lambda a, b: a + b, "arith.SubIOp": lambda a, b: a - b,
            "arith.MulIOp": lambda a, b: a * b}
_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
            "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b}


def runtime(node: ast.expr) -> bool:
    """An expression of the scalars a core keeps: a load, i32 arithmetic on them, a
    comparison, scf.if's condition."""
    if isinstance(node, ast.Attribute) and node.attr == "result":
        node = node.value
    return _callee(node) in ("load", "arith.CmpIOp", "scf.IfOp", *_INTEGER)


def value(node: ast.expr, env: dict[str, int], mem: Memory | None = None) -> int:
    """An index expression of the program: a literal, a name bound to an index, `at(...)` (its
    terms may be `at` calls themselves), or an i32 made from one (arith.ConstantOp,
    arith.index_cast); with `mem`, also a scalar a core keeps (`runtime`)."""
    if isinstance(node, ast.Attribute) and node.attr == "result":
        return value(node.value, env, mem)
    if isinstance(node, ast.Call) and mem is not None and runtime(node):
        name = _callee(node)
        if name == "load":
            return mem.load(node, env)
        if name == "scf.IfOp":
            return value(node.args[0], env, mem)
        if name == "arith.CmpIOp":
            predicate = node.args[0]
            assert isinstance(predicate, ast.Attribute)
            a, b = (value(x, env, mem) for x in node.args[1:])
            return int(_COMPARE[predicate.attr](a, b))
        a, b = (value(x, env, mem) for x in node.args)
        return _INTEGER[name](a, b)             # type: ignore[index]
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -value(node.operand, env, mem)
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Call) and _callee(node) in ("arith.ConstantOp", "arith.index_cast"):
        return value(node.args[1], env, mem)
    if isinstance(node, ast.Call) and _callee(node) == "at":
        # at(terms, constant=0, divisor=1) = (sum(value * multiplier) + constant) floordiv divisor
        params = dict(zip(("terms", "constant", "divisor"), node.args, strict=False))
        params.update({k.arg: k.value for k in node.keywords if k.arg})
        terms = params["terms"]
        assert isinstance(terms, ast.List)
        total = 0
        for term in terms.elts:
            assert isinstance(term, ast.Tuple) and len(term.elts) == 2
            total += value(term.elts[0], env) * value(term.elts[1], env)
        constant = value(params["constant"], env) if "constant" in params else 0
        divisor = value(params["divisor"], env) if "divisor" in params else 1
        assert divisor > 0
        return (total + constant) // divisor
    raise ValueError(f"not an index expression: {ast.unparse(node)}")


@dataclass(frozen=True)
class Op:
    """One DMA or micro-kernel call the program issues, with the index values it is issued at
    and, for each buffer name in scope, the function argument or allocation it is."""

    call: ast.Call
    env: dict[str, int]
    refs: dict[str, str]

    @property
    def kind(self) -> str:
        return ast.unparse(self.call.func)

    def ref(self, i: int) -> str:
        """The buffer positional argument `i` names."""
        arg = self.call.args[i]
        assert isinstance(arg, ast.Name)
        return self.refs[arg.id]

    def channel(self) -> str:
        return ast.literal_eval(self.call.args[0])

    def index(self, name: str) -> list[int]:
        node = _kw(self.call, name)
        assert isinstance(node, ast.List), f"{name} missing in {ast.unparse(self.call)}"
        return [value(e, self.env) for e in node.elts]

    def pattern(self, prefix: str = "", whole: int | None = None) -> torch.Tensor:
        """The flat element indices the [prefix]offsets/sizes/strides pattern walks, in order:
        sum(offset_d * stride_d) + sum(i_d * stride_d) over the sizes. With no pattern, the
        DMA moves the `whole` buffer contiguously."""
        if _kw(self.call, prefix + "sizes") is None:
            assert whole is not None, f"no {prefix}sizes in {ast.unparse(self.call)}"
            return torch.arange(whole)
        sizes, strides = self.index(prefix + "sizes"), self.index(prefix + "strides")
        offsets = self.index(prefix + "offsets") if _kw(self.call, prefix + "offsets") \
            else [0] * len(sizes)
        assert len(sizes) == len(strides) == len(offsets)
        idx = torch.tensor([sum(o * s for o, s in zip(offsets, strides, strict=True))])
        for size, stride in zip(sizes, strides, strict=True):
            idx = (idx[:, None] + torch.arange(size) * stride).reshape(-1)
        return idx


def decorator_of(fn: ast.FunctionDef) -> tuple[str, ast.Call] | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id in HIERARCHY:
            return d.func.id, d
    return None


def _walk(body: list[ast.stmt], env: dict[str, int], refs: dict[str, str],
          out: list[Op], mem: Memory) -> None:
    env, refs = dict(env), dict(refs)
    for stmt in body:
        mem.refs = refs
        if isinstance(stmt, ast.FunctionDef) and (deco := decorator_of(stmt)) is not None:
            # launch, segment, herd: isolated from above, so only the operands pass in
            _, call = deco
            operands = _kw(call, "operands")
            assert isinstance(operands, ast.List)
            names = [e.id for e in operands.elts if isinstance(e, ast.Name)]
            assert len(names) == len(operands.elts)
            params = [a.arg for a in stmt.args.args]
            ids = params[:len(params) - len(names)]
            sizes_node = _kw(call, "sizes")
            sizes: list[int] = ast.literal_eval(sizes_node) if sizes_node is not None else []
            assert len(ids) == 2 * len(sizes)      # (x, y, size_x, size_y) when sized
            inner_refs = {p: refs[n] for p, n in zip(params[len(ids):], names, strict=True)
                          if n in refs}
            passed = {p: env[n] for p, n in zip(params[len(ids):], names, strict=True)
                      if n not in refs}
            for point in itertools.product(*(range(s) for s in sizes)):
                inner = {**passed, **dict(zip(ids, [*point, *sizes], strict=True))}
                _walk(stmt.body, inner, inner_refs, out, mem)
        elif isinstance(stmt, ast.For):
            loop = stmt.iter
            assert isinstance(loop, ast.Call) and _callee(loop) == "range_"
            assert isinstance(stmt.target, ast.Name)
            lo, hi = (value(a, env) for a in loop.args)
            for i in range(lo, hi):
                _walk(stmt.body, {**env, stmt.target.id: i}, refs, out, mem)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if _callee(stmt.value) == "at" or runtime(stmt.value):
                env[name] = value(stmt.value, env, mem)
            elif _callee(stmt.value) == "AllocOp":
                refs[name] = name
            elif _callee(stmt.value) == "subview":
                # a core's slab of a buffer allocated outside the herd: a buffer of its own
                source = stmt.value.args[0]             # type: ignore[attr-defined]
                assert isinstance(source, ast.Name)
                refs[name] = f"{refs[source.id]}[slab]"
        elif isinstance(stmt, ast.Expr) and _callee(stmt.value) in ISSUED:
            assert isinstance(stmt.value, ast.Call)
            out.append(Op(stmt.value, env, refs))
        elif isinstance(stmt, ast.Expr) and _callee(stmt.value) == "store":
            assert isinstance(stmt.value, ast.Call)
            mem.store(stmt.value, env)
        elif isinstance(stmt, ast.With) and (branch := _scf_branch(stmt)) is not None \
                and branch[0] in env:
            taken, block = branch
            if env[taken] == (block == "then_block"):
                _walk(stmt.body, env, refs, out, mem)
            mem.refs = refs


def _scf_branch(stmt: ast.With) -> tuple[str, str] | None:
    """`with InsertionPoint(x.then_block)` (or else_block): x's name and the branch. The
    walk follows it when x is an scf.if (a name `runtime` bound), not an affine.if's."""
    (item,) = stmt.items
    call = item.context_expr
    if _callee(call) != "InsertionPoint":
        return None
    block = call.args[0]                                         # type: ignore[attr-defined]
    if not (isinstance(block, ast.Attribute) and isinstance(block.value, ast.Name)):
        return None
    return block.value.id, block.attr


def _function(source: str) -> ast.FunctionDef:
    module = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)
                  and n.name == "build_module")
    return next(n for n in module.body if isinstance(n, ast.FunctionDef)
                and any(_callee(d) == "FuncOp.from_py_func" for d in n.decorator_list))


def trace(source: str) -> tuple[list[str], list[Op]]:
    """The function's arguments (one per operand, in the spec's order for one launch) and
    every DMA and call the program issues, over all indices and iterations."""
    func = _function(source)
    args = [a.arg for a in func.args.args]
    ops: list[Op] = []
    _walk(func.body, {}, {a: a for a in args}, ops, Memory())
    return args, ops


def follow(source: str) -> int:
    """Evaluate every index every DMA and call of the program is issued with (a name that does
    not reach its region raises KeyError); how many there are."""
    _, ops = trace(source)
    for op in ops:
        for k in op.call.keywords:
            if isinstance(k.value, ast.List) and k.arg:
                op.index(k.arg)
        if op.kind == "CallOp":
            args = op.call.args[1]
            assert isinstance(args, ast.List)
            for a in args.elts:
                if isinstance(a, ast.Call):
                    value(a, op.env)
    return len(ops)


def touching(ops: list[Op], kind: str, buffer: str, position: int) -> list[Op]:
    """The ops of `kind` whose positional argument `position` is `buffer`."""
    return [op for op in ops if op.kind == kind and op.ref(position) == buffer]


def attention_elements(heads: int, length: int, hd: int, layout: str) -> torch.Tensor:
    """[heads, length, hd]: where each element of an attention operand is, as a flat index
    into its DDR buffer, stored [heads, length, hd] (head-first) or [length, heads * hd]."""
    n = heads * length * hd
    if layout == "head-first":
        return torch.arange(n).reshape(heads, length, hd)
    return torch.arange(n).reshape(length, heads, hd).transpose(0, 1)


def c_elements(M: int, N: int, layout: str, head_dim: int | None) -> torch.Tensor:
    """[M, N]: where each element of a GEMM's C is in DDR, stored [M, N] or, head-first,
    [N / head_dim, M, head_dim]."""
    if layout == "head-first":
        assert head_dim is not None
        return torch.arange(M * N).reshape(N // head_dim, M, head_dim).transpose(0, 1) \
            .reshape(M, N)
    return torch.arange(M * N).reshape(M, N)


def covers_once(patterns: list[torch.Tensor], numel: int) -> bool:
    """The patterns together touch each of the buffer's `numel` elements exactly once."""
    every = torch.cat(patterns).sort().values
    return torch.equal(every, torch.arange(numel))
