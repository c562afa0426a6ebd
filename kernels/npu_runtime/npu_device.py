"""Which NPU a machine has, and its firmware, as the amdxdna driver exposes them in sysfs.

The programs are built for XDNA 2 (NPU2: Strix, Strix Halo, Krackan; AIE2P cores). An XDNA 1
NPU (Phoenix, Hawk Point; AIE2 cores) also has a device node, a driver and firmware, so a
check of those alone passes it, and a design built for the other generation loads there
without an error and computes nothing (mlir-air python/air/backend/xrt.py,
`detect_target_device`). So the generation is read from the device itself:

* its PCI device id (`device`, `revision` on the PCI device behind /dev/accel/accel0): the
  driver's table (xdna-driver src/driver/amdxdna/amdxdna_pci_drv.c, `amdxdna_ids`) binds
  1022:1502 to npu1 (XDNA 1) and 1022:17f0 to npu2, npu4 (revision 0x10), npu5 (0x11) and
  npu6 (0x20), the XDNA 2 parts; the other ids there (17f1, 17f3, 1b0a, 1b0c) are the npu3
  family, a later architecture the programs are not built for;
* its name (`vbnv`, xdna-driver src/driver/amdxdna/amdxdna_sysfs.c): "RyzenAI-npu1",
  "RyzenAI-npu4" from older drivers (npu1_regs.c, npu4_regs.c), "NPU Strix", "NPU Krackan 1",
  "NPU Strix Halo", "NPU Gorgon Point 1" from newer ones (npu4_regs.c `npu4_rev_vbnv_tbl`),
  read with the names mlir-air maps to its generations (xrt.py `NPU_MODELS`: npu1 and
  Phoenix are npu1; npu4, npu5, npu6, Strix, Strix Halo and Krackan are npu2).

The running firmware's version is `fw_version` on the same device (amdxdna_sysfs.c); the
firmware file the driver loads is `amdnpu/<device>_<revision>/` under the firmware
directory (each `*_regs.c`'s `fw_path`, e.g. amdnpu/17f0_10/ for npu4).
Facts and sources: docs/hardware-facts.md#the-toolchain-on-the-machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

XDNA1, XDNA2 = "XDNA 1", "XDNA 2"

#: PCI device id (AMD, 0x1022) -> generation, from the driver's device table
PCI_GENERATIONS = {0x1502: XDNA1, 0x17F0: XDNA2}
#: ids the driver binds to the npu3 family: neither generation the programs know
LATER_IDS = {0x17F1, 0x17F3, 0x1B0A, 0x1B0C}
#: "npuN" in a driver's name -> generation, as mlir-air's NPU_MODELS maps them
NPU_NUMBERS = {1: XDNA1, 4: XDNA2, 5: XDNA2, 6: XDNA2}
#: code names in a newer driver's name -> generation
CODENAMES = (("hawk point", XDNA1), ("phoenix", XDNA1), ("strix", XDNA2),
             ("krackan", XDNA2), ("gorgon point", XDNA2))


def _read(path: Path) -> str | None:
    """A sysfs attribute's text, or None."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _hex(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class NpuIdentity:
    """The NPU behind the device node as its driver shows it."""

    vbnv: str | None
    device: int | None            # PCI device id
    revision: int | None
    firmware_version: str | None

    @property
    def pci(self) -> str:
        if self.device is None:
            return "no PCI id"
        rev = "" if self.revision is None else f" rev {self.revision:02x}"
        return f"PCI 1022:{self.device:04x}{rev}"

    @property
    def name(self) -> str:
        return f"{self.vbnv or 'unnamed'}, {self.pci}"

    @property
    def generation(self) -> str | None:
        """XDNA 1 or XDNA 2, from the PCI id, else from the name; None when neither says."""
        if self.device in PCI_GENERATIONS:
            return PCI_GENERATIONS[self.device]
        if self.device in LATER_IDS:
            return None
        text = (self.vbnv or "").lower()
        number = re.search(r"npu(\d+)", text)
        if number:
            return NPU_NUMBERS.get(int(number.group(1)))
        return next((gen for word, gen in CODENAMES if word in text), None)

    @property
    def firmware_folder(self) -> str | None:
        """The folder under amdnpu/ the driver loads this device's firmware from."""
        if self.device is None or self.revision is None:
            return None
        return f"{self.device:04x}_{self.revision:02x}"


def identify(sysfs: Path) -> NpuIdentity | None:
    """The NPU whose PCI device directory is `sysfs`, or None when it is not there."""
    if not sysfs.is_dir():
        return None
    return NpuIdentity(_read(sysfs / "vbnv"), _hex(_read(sysfs / "device")),
                       _hex(_read(sysfs / "revision")), _read(sysfs / "fw_version"))


def firmware_files(firmware_dir: Path, npu: NpuIdentity | None) -> list[Path]:
    """The firmware images for this NPU (its own folder), or for any NPU when the device is
    not visible."""
    if not firmware_dir.is_dir():
        return []
    folder = None if npu is None else npu.firmware_folder
    pattern = f"{folder}/*.sbin*" if folder else "*/*.sbin*"
    return sorted(firmware_dir.glob(pattern))


__all__ = ["XDNA1", "XDNA2", "NpuIdentity", "firmware_files", "identify"]
