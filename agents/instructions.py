"""What the autopilot understands in a person's redirect, parsed from the text.

    use TUNABLE VALUE for KERNEL     phase 1: the configuration of the kernel uses whose key
                                     or role contains KERNEL (e.g. "use tile_n 64 for
                                     q_proj"); TUNABLE is one of that kernel's tunables
    skip transform NAME              phases 4 and 5: do not try that plan transform
                                     (kernels.plans.transforms.TRANSFORMS)
    retry with seed N                phase 1: validate the kernels on inputs drawn with seed N

The table `INSTRUCTIONS` is the one home of that list: the parser, the refusal that lists
what the autopilot can do, and docs/conductor.md's section on redirects read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from npu_deploy.kernels.definition.specs import SPECS
from npu_deploy.kernels.plans.transforms import TRANSFORMS


@dataclass(frozen=True)
class Instruction:
    """A redirect as the autopilot understood it: what it changes in which phases."""

    kind: str                      # tile | skip | seed
    phases: tuple[int, ...]
    kernel: str = ""
    tunable: str = ""
    value: Any = None
    transform: str = ""
    seed: int = 0

    def text(self) -> str:
        if self.kind == "tile":
            return f"{self.tunable} = {self.value} for the kernel uses matching {self.kernel!r}"
        if self.kind == "skip":
            return f"the transform {self.transform} is not tried"
        return f"the kernels are validated with seed {self.seed}"


#: What the autopilot understands: its form, an example, and the phases it applies to.
INSTRUCTIONS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("use TUNABLE VALUE for KERNEL", "use tile_n 64 for q_proj", (1,)),
    ("skip transform NAME", "skip transform merge_dispatches", (4, 5)),
    ("retry with seed N", "retry with seed 7", (1,)),
)

_TILE = re.compile(r"^use\s+(\w+)\s*(?:=\s*)?(\S+)\s+for\s+(\S+)$", re.I)
_SKIP = re.compile(r"^(?:skip|do not try|don't try)\s+(?:the\s+)?transform\s+(\w+)$", re.I)
_SEED = re.compile(r"^retry\s+with\s+seed\s+(\d+)$", re.I)


def what_it_understands() -> str:
    return "; ".join(f"{form} (phase {', '.join(map(str, ph))}; e.g. {ex!r})"
                     for form, ex, ph in INSTRUCTIONS)


def forms_at(phase: int) -> str:
    """The forms the autopilot follows at `phase`, short (an input's placeholder)."""
    here = [form for form, _, ph in INSTRUCTIONS if phase in ph]
    if not here:
        return f"the autopilot follows no instruction at phase {phase}"
    return "the autopilot follows: " + " · ".join(here)


def understood_at(phase: int) -> str:
    """What the autopilot follows in a redirect of `phase`, in one line, for the person
    about to type one."""
    here = [f"{form} (e.g. {ex!r})" for form, ex, ph in INSTRUCTIONS if phase in ph]
    if here:
        return f"The autopilot follows, at phase {phase}: " + "; ".join(here) + "."
    return (f"The autopilot follows no instruction at phase {phase}; at other phases: "
            f"{what_it_understands()}.")


def _value(text: str) -> Any:
    return int(text) if text.lstrip("-").isdigit() else text


def parse(text: str, phase: int, *, brief: bool = False) -> Instruction | str:
    """The instruction `text` says for `phase`, or why the autopilot cannot follow it (with
    what it does understand, unless `brief`: shown where that list already is)."""
    understands = "" if brief else f"; the autopilot understands: {what_it_understands()}"
    said = " ".join(text.strip().rstrip(".").split())
    if m := _TILE.match(said):
        tunable, value, kernel = m.group(1).lower(), _value(m.group(2)), m.group(3)
        names = sorted({t for s in SPECS.values() for t in s.tunables})
        if tunable not in names:
            return f"{tunable!r} is no kernel tunable; tunables: {', '.join(names)}"
        got = Instruction("tile", (1,), kernel=kernel, tunable=tunable, value=value)
    elif m := _SKIP.match(said):
        name = m.group(1)
        if name not in TRANSFORMS:
            return f"no transform {name!r}; transforms: {', '.join(TRANSFORMS)}"
        got = Instruction("skip", (4, 5), transform=name)
    elif m := _SEED.match(said):
        got = Instruction("seed", (1,), seed=int(m.group(1)))
    else:
        return f"the autopilot does not understand {said!r}{understands}"
    if phase not in got.phases:
        return (f"{said!r} applies to phase {', '.join(map(str, got.phases))}, not phase "
                f"{phase}{understands}")
    return got


def tile_overrides(ins: Instruction, uses: dict[str, dict[str, Any]]
                   ) -> dict[str, dict[str, Any]] | str:
    """The configurations a `tile` instruction sets, by kernel use; or why none match."""
    hit = {key: {ins.tunable: ins.value} for key, u in uses.items()
           if (ins.kernel in key or any(ins.kernel in r for r in u["roles"]))
           and ins.tunable in SPECS[u["kernel"]].tunables}
    if not hit:
        return (f"no kernel use matching {ins.kernel!r} has the tunable {ins.tunable}; uses: "
                f"{', '.join(sorted(uses))}")
    return hit
