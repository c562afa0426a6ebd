"""How a payload class checks the JSON object of an event: each frozen dataclass (nested
ones included) is compiled once into a tree of small checking functions, so validating on
append costs a few microseconds, not a walk over type hints; the builder that turns a
checked object back into the dataclass, the value's JSON form, and the finders of the blob
references in a value. Knows dataclasses and type hints, not event types (payloads.py
registers those and checks a payload by its type's name).
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from .envelope import InvalidEvent

BLOB_REF_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

#: A reference to a content-addressed blob: "sha256:<64 hex digits>".
BlobRef = Annotated[str, "blob"]

Checker = Callable[[Any, str], Any]
_compiled: dict[type, Checker] = {}


def checker_for(cls: type) -> Checker:
    checker = _compiled.get(cls)
    if checker is None:
        checker = _compile_dataclass(cls)
        _compiled[cls] = checker
    return checker


def _compile_dataclass(cls: type) -> Checker:
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for f in fields(cls):
        default: Callable[[], Any] | None = None
        if f.default is not MISSING:
            default = functools.partial(_same, f.default)
        elif f.default_factory is not MISSING:
            default = f.default_factory
        specs.append((f.name, _compile(hints[f.name]), default))
    names = frozenset(name for name, _, _ in specs)
    known = ", ".join(sorted(names))
    cross_check = getattr(cls, "check", None)

    def check(value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise InvalidEvent(f"{path}: expected an object, got {type(value).__name__}")
        if not value.keys() <= names:
            unknown = sorted(set(value) - names, key=str)[0]
            raise InvalidEvent(f"{path}.{unknown}: unknown field (known: {known})")
        out: dict[str, Any] = {}
        for name, checker, default in specs:
            if name in value:
                out[name] = checker(value[name], f"{path}.{name}")
            elif default is not None:
                out[name] = default()
            else:
                raise InvalidEvent(f"{path}.{name}: missing field")
        if cross_check is not None:
            cross_check(builder_for(cls)(out))
        return out
    return check


def _same(value: Any) -> Any:
    return value


_builders: dict[type, Callable[[dict[str, Any]], Any]] = {}


def builder_for(cls: type) -> Callable[[dict[str, Any]], Any]:
    """A function that instantiates `cls` (nested dataclasses included) from its checked
    JSON object."""
    builder = _builders.get(cls)
    if builder is None:
        hints = typing.get_type_hints(cls)
        nested = {name: item for name, tp in hints.items()
                  if (item := _list_item_dataclass(tp)) is not None}

        def build(data: dict[str, Any]) -> Any:
            kwargs = dict(data)
            for name, item in nested.items():
                if name in kwargs:
                    kwargs[name] = [builder_for(item)(v) for v in kwargs[name]]
            return cls(**kwargs)
        builder = _builders[cls] = build
    return builder


def plain(value: Any) -> Any:
    """A payload (or a value inside one) as JSON: dataclasses become objects of every
    field, lists are copied, everything else is kept as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _list_item_dataclass(tp: Any) -> type | None:
    if get_origin(tp) is list:
        (item,) = get_args(tp)
        if is_dataclass(item):
            return item  # type: ignore[return-value]
    return None


def _compile(tp: Any) -> Checker:  # noqa: C901 - one branch per JSON kind
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        inner = _compile(base)
        if "blob" not in meta:
            return inner

        def blob(value: Any, path: str) -> Any:
            value = inner(value, path)
            if not BLOB_REF_RE.match(value):
                raise InvalidEvent(f"{path}: expected a blob reference 'sha256:<64 hex>', "
                                   f"got {value!r}")
            return value
        return blob
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        (inner_tp,) = [o for o in options if o is not type(None)]
        inner = _compile(inner_tp)

        def optional(value: Any, path: str) -> Any:
            return None if value is None else inner(value, path)
        return optional
    if origin is Literal:
        allowed = get_args(tp)
        listed = ", ".join(map(repr, allowed))

        def literal(value: Any, path: str) -> Any:
            if value not in allowed or type(value) is not type(allowed[0]):
                raise InvalidEvent(f"{path}: {value!r} is not one of {listed}")
            return value
        return literal
    if origin is list:
        item = _compile(get_args(tp)[0])

        def a_list(value: Any, path: str) -> Any:
            if type(value) is not list:
                raise InvalidEvent(f"{path}: expected a list, got {type(value).__name__}")
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return a_list
    if origin is dict:
        val = _compile(get_args(tp)[1])

        def a_dict(value: Any, path: str) -> Any:
            if type(value) is not dict:
                raise InvalidEvent(f"{path}: expected an object, got {type(value).__name__}")
            for k in value:
                if type(k) is not str:
                    raise InvalidEvent(f"{path}: object keys must be strings, got {k!r}")
            return {k: val(v, f"{path}.{k}") for k, v in value.items()}
        return a_dict
    if is_dataclass(tp):
        return checker_for(tp)  # type: ignore[arg-type]
    if tp is Any:
        return _check_json
    return _SCALARS[tp]


def _check_bool(value: Any, path: str) -> Any:
    if type(value) is not bool:
        raise InvalidEvent(f"{path}: expected true or false, got {value!r}")
    return value


def _check_int(value: Any, path: str) -> Any:
    if type(value) is not int:
        raise InvalidEvent(f"{path}: expected an integer, got {value!r}")
    return value


def _check_float(value: Any, path: str) -> Any:
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidEvent(f"{path}: {value} is not a finite number")
        return value
    if type(value) is int:
        return float(value)
    raise InvalidEvent(f"{path}: expected a number, got {value!r}")


def _check_str(value: Any, path: str) -> Any:
    if type(value) is not str:
        raise InvalidEvent(f"{path}: expected a string, got {value!r}")
    return value


_SCALARS: dict[Any, Checker] = {bool: _check_bool, int: _check_int, float: _check_float,
                                str: _check_str}


def _check_json(value: Any, path: str) -> Any:
    """Free-form fields (tool arguments, results, config) must still be plain finite JSON."""
    if value is None or type(value) in (str, bool, int):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidEvent(f"{path}: {value} is not a finite number")
        return value
    if isinstance(value, (list, tuple)):
        return [_check_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise InvalidEvent(f"{path}: object keys must be strings, got {k!r}")
        return {k: _check_json(v, f"{path}.{k}") for k, v in value.items()}
    raise InvalidEvent(f"{path}: {type(value).__name__} is not JSON")


RefFinder = Callable[[Any, set[str]], None]


def _nothing(_value: Any, _found: set[str]) -> None:
    return None


def ref_finder(tp: Any) -> RefFinder:  # noqa: C901 - one branch per kind of type
    """A function adding the declared blob references in a value of type `tp` to a set;
    values of the wrong shape are passed over (validation is not its job)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        if "blob" in meta:
            def blob(value: Any, found: set[str]) -> None:
                if isinstance(value, str) and BLOB_REF_RE.match(value):
                    found.add(value)
            return blob
        return ref_finder(base)
    if origin in (Union, types.UnionType):
        inners = [ref_finder(o) for o in get_args(tp) if o is not type(None)]

        def either(value: Any, found: set[str]) -> None:
            for inner in inners:
                inner(value, found)
        return either
    if origin in (list, dict):
        item = ref_finder(get_args(tp)[-1])
        if item is _nothing:
            return _nothing

        def each(value: Any, found: set[str]) -> None:
            items = value.values() if isinstance(value, dict) else value
            for v in items if isinstance(value, list | dict) else ():
                item(v, found)
        return each
    if is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp, include_extras=True)
        parts = [(f.name, finder) for f in fields(tp)
                 if (finder := ref_finder(hints[f.name])) is not _nothing]
        if not parts:
            return _nothing

        def record(value: Any, found: set[str]) -> None:
            if isinstance(value, dict):
                for name, finder in parts:
                    finder(value.get(name), found)
        return record
    return _nothing


def blob_refs(value: Any) -> set[str]:
    """Every string anywhere in a payload shaped like a blob reference: the blobs an export
    carries along when the store holds them (a tool's free-form result may name one).
    `declared_blob_refs` is what must be there."""
    found: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v.startswith("sha256:") and BLOB_REF_RE.match(v):
                found.add(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found
