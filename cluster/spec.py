"""A matrix of deployments: models x prompt lengths x backends x agents, with the options
every cell shares, from the command line's flags or a small TOML file:

    name = "nightly"
    models = ["tiny-llama", "tiny-qwen2"]
    seq_lens = [16, 128]
    backends = ["emulator"]
    agents = ["autopilot"]
    [options]            # optional; these are the defaults
    steps = 32
    budget = 3
    auto_approve = true
    pause_at = []
    weights = "bf16"

Each cell is one deployment, run as `npu-deploy deploy` would run it, under a run id made
from the matrix's name and the cell (so a matrix run again finds its cells' runs).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from npu_deploy.deploy_request import (
    AGENTS,
    BACKENDS,
    DEFAULT_SEQ_LEN,
    Deployment,
    DeployRequest,
    Refused,
    checked,
)
from npu_deploy.events import PHASE_NAMES
from npu_deploy.models.quantization import CHOICES as WEIGHT_CHOICES
from npu_deploy.models.quantization import split_spec, with_weights

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")
_KEYS = {"name", "models", "seq_lens", "backends", "agents", "options"}
_OPTIONS = {"steps", "budget", "auto_approve", "pause_at", "weights"}


class SpecRefused(ValueError):
    """A matrix spec that cannot run; the message is one line that says what to change."""


@dataclass(frozen=True)
class Cell:
    """One deployment of a matrix."""

    model: str
    seq_len: int
    backend: str
    agent: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.seq_len} {self.backend} {self.agent}"

    def run_id(self, matrix: str) -> str:
        """The cell's run: readable, and unique in the matrix (a digest when too long)."""
        text = f"{matrix}.{self.model}.s{self.seq_len}.{self.backend}.{self.agent}"
        text = re.sub(r"[^A-Za-z0-9._-]", "_", text)
        if len(text) <= 64:
            return text
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        return f"{text[:53]}.{digest}"


@dataclass(frozen=True)
class MatrixSpec:
    name: str
    models: tuple[str, ...]
    seq_lens: tuple[int, ...] = (DEFAULT_SEQ_LEN,)
    backends: tuple[str, ...] = ("emulator",)
    agents: tuple[str, ...] = ("autopilot",)
    steps: int = 32
    budget: int = 3
    auto_approve: bool = True
    pause_at: tuple[int, ...] = ()
    weights: str = "bf16"
    extra: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        return [Cell(with_weights(m, self.weights), s, b, a) for m, s, b, a in
                itertools.product(self.models, self.seq_lens, self.backends, self.agents)]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("extra")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def request(self, cell: Cell) -> DeployRequest:
        """The cell as `npu-deploy deploy` takes it."""
        return DeployRequest(cell.model, backend=cell.backend, agent=cell.agent,
                             seq_len=cell.seq_len, steps=self.steps,
                             auto_approve=self.auto_approve, pause_at=frozenset(self.pause_at),
                             budget=self.budget)

    def deployment(self, cell: Cell, with_model: bool) -> Deployment:
        """The cell checked as `deploy` checks a request (SpecRefused says what is wrong)."""
        try:
            return checked(self.request(cell), with_model)
        except Refused as e:
            raise SpecRefused(f"cell {cell.label}: {e}") from None

    def check(self, with_model: bool = False) -> None:
        """Every cell checked on the head before any runs: one bad cell refuses the matrix."""
        if not NAME_RE.match(self.name):
            raise SpecRefused(f"matrix name {self.name[:40]!r}: use 1-24 letters, digits, "
                              "'_' or '-'")
        for what, values, allowed in (("backend", self.backends, BACKENDS),
                                      ("agent", self.agents, AGENTS)):
            bad = [v for v in values if v not in allowed]
            if bad:
                raise SpecRefused(f"{what} {bad[0]!r}: one of {', '.join(allowed)}")
        if self.weights not in ("bf16", *WEIGHT_CHOICES):
            raise SpecRefused(f"weights {self.weights!r}: one of bf16, "
                              f"{', '.join(WEIGHT_CHOICES)}")
        if self.weights != "bf16" and any(split_spec(m)[1] for m in self.models):
            raise SpecRefused("a model names its weights (@) and the options give weights too")
        bad_phase = [p for p in self.pause_at if p not in range(len(PHASE_NAMES))]
        if bad_phase:
            raise SpecRefused(f"pause_at: no phase {bad_phase[0]}")
        if not self.models:
            raise SpecRefused("the matrix has no model: give --model (or models = [...])")
        # The head checks what does not depend on the machine (the model, the prompt length);
        # a node checks the rest as it starts the cell (an NPU for xrt, Claude's key).
        for cell in self.cells():
            portable = replace(self.request(cell), backend="emulator", agent="autopilot")
            try:
                checked(portable, with_model)
            except Refused as e:
                raise SpecRefused(f"cell {cell.label}: {e}") from None


def from_toml(path: Path) -> MatrixSpec:
    """A spec file (the module's docstring), or SpecRefused naming what is wrong in it."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecRefused(f"cannot read {path} ({e.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecRefused(f"{path} is not TOML ({e})") from None
    unknown = sorted(set(raw) - _KEYS) + sorted(set(raw.get("options", {})) - _OPTIONS)
    if unknown:
        raise SpecRefused(f"{path}: unknown key {unknown[0]!r}; a matrix has "
                          f"{', '.join(sorted(_KEYS))} and options {', '.join(sorted(_OPTIONS))}")
    options = raw.get("options", {})
    try:
        return MatrixSpec(
            name=_typed(raw, "name", str, path.stem),
            models=tuple(_typed(raw, "models", list, [])),
            seq_lens=tuple(_typed(raw, "seq_lens", list, [DEFAULT_SEQ_LEN])),
            backends=tuple(_typed(raw, "backends", list, ["emulator"])),
            agents=tuple(_typed(raw, "agents", list, ["autopilot"])),
            steps=_typed(options, "steps", int, 32), budget=_typed(options, "budget", int, 3),
            auto_approve=_typed(options, "auto_approve", bool, True),
            pause_at=tuple(_typed(options, "pause_at", list, [])),
            weights=_typed(options, "weights", str, "bf16"))
    except TypeError as e:
        raise SpecRefused(f"{path}: {e}") from None


def _typed(table: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = table.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{key} must be a {kind.__name__}, not {value!r}")
    return value
