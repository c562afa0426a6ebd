"""What the real-NPU path needs on a machine, each found (and where) or missing (and the fix).

The XRT backend needs the amdxdna kernel driver and its device node, the NPU firmware, XRT
and its Python bindings (pyxrt), mlir-air's Python package with its compiler driver
`aircc`, Peano (llvm-aie) for the AIE cores, and the micro-kernel objects the programs
link. `npu-deploy doctor` prints the list; `kernels.npu_runtime.xrt_runtime.require` refuses the xrt
backend with what is missing.

Nothing here imports pyxrt or mlir-air into this process. A package named `air` is only
taken for mlir-air after a separate interpreter has imported mlir-air's own modules from it
(`air.ir`, `air.dialects.air`, `air.backend.xrt.XRTBackend`): an unrelated PyPI package
called `air` has none of them. `aircc` and Peano are looked for where mlir-air's own tools
look (mlir-air python/air/tools.py `resolve_tool`: the binary bundled in its wheel, then
PATH; python/air/backend/xrt.py: PEANO_INSTALL_DIR, then the llvm-aie package).

Where a tool says its version, the requirement carries it (`version`), read where the tool
writes it: XRT's install has a `version.json` (XRT src/CMake/version.cmake installs it into
the install directory, BUILD_VERSION), pyxrt is the XRT it was installed with, mlir-air and
llvm-aie are package versions, a Peano build says it in `clang --version`, and the amdxdna
driver shows the running NPU firmware as `fw_version` on its PCI device (xdna-driver
src/driver/amdxdna/amdxdna_sysfs.c). `validate-hardware` records them in its report.

Four checks look past presence: the NPU must be XDNA 2, read from the device
(kernels.npu_runtime.npu_device: an XDNA 1 NPU has a node, a driver and firmware too); the
firmware must be there for this device, with the version it runs; mlir-aie's aie_api
headers must be where upstream finds them (Peano compiles every micro-kernel against them);
and the objects folder must hold objects, each an ELF built for aie2p, and every object the
plans link (kernels.npu_runtime.aie_objects). The machine's paths are a `SystemPaths`, so a
test can point them at a folder of its own.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .aie_objects import AIE_API_HEADER, aie_include_dir, check_folder, default_objects_dir
from .npu_device import XDNA2, firmware_files, identify

DEVICE_NODE = Path("/dev/accel/accel0")
DRIVER_MODULE = Path("/sys/module/amdxdna")
FIRMWARE_DIR = Path("/lib/firmware/amdnpu")
XRT_DIR = Path("/opt/xilinx/xrt")
#: The NPU's PCI device behind the device node, where amdxdna puts vbnv and fw_version.
DEVICE_SYSFS = Path("/sys/class/accel/accel0/device")


@dataclass(frozen=True)
class SystemPaths:
    """Where this machine's driver, device, firmware and XRT are: the constants above, read
    when the paths are made (a test points them, or the constants, at folders of its own)."""

    device_node: Path = field(default_factory=lambda: DEVICE_NODE)
    driver_module: Path = field(default_factory=lambda: DRIVER_MODULE)
    firmware_dir: Path = field(default_factory=lambda: FIRMWARE_DIR)
    device_sysfs: Path = field(default_factory=lambda: DEVICE_SYSFS)
    xrt_dir: Path = field(default_factory=lambda: Path(os.environ.get("XILINX_XRT",
                                                                      XRT_DIR)))


#: What a separate interpreter runs to tell mlir-air from another package named `air`.
_PROBE = """
import json, air
import air.ir, air.dialects.air
from air.backend.xrt import XRTBackend
version = None
try:
    import importlib.metadata as md
    version = md.version("mlir_air")
except Exception:
    pass
print(json.dumps({"file": air.__file__, "version": version}))
"""


@dataclass(frozen=True)
class Requirement:
    """One thing the real-NPU path needs: where it was found, or why not and what to do."""

    key: str                 # pyxrt | air | aircc | peano | aie_api | driver | npu |
    #                          firmware | xrt | objects
    what: str
    found: str | None        # where it is
    problem: str = ""        # why it is not usable, when it is not
    fix: str = ""
    version: str | None = None   # as the tool reports it, where it does

    @property
    def ok(self) -> bool:
        return self.found is not None

    def line(self) -> str:
        if self.ok:
            return f"found    {self.what}: {self.found}" + (
                f" (version {self.version})" if self.version else "")
        return f"missing  {self.what}: {self.problem}; {self.fix}"


def _mlir_air(python: str = sys.executable) -> tuple[Requirement, Path | None]:
    what = "mlir-air's Python package (air)"
    fix = ("build github.com/Xilinx/mlir-air with its Python bindings (or install its wheel) "
           "and put it on PYTHONPATH")
    spec = importlib.util.find_spec("air")
    if spec is None:
        return Requirement("air", what, None, "no package named air", fix), None
    done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONSAFEPATH": "1"})
    where = spec.origin or ", ".join(spec.submodule_search_locations or [])
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Requirement("air", what, None, f"the package named air at {where} is not "
                           f"mlir-air ({last})", "remove it (pip uninstall air) and " + fix), \
            None
    probed = json.loads(done.stdout.strip().splitlines()[-1])
    path = Path(probed["file"]).resolve()
    return Requirement("air", what, str(path.parent), version=probed.get("version")), path


def _aircc(air_init: Path | None) -> Requirement:
    """mlir-air's wheel bundles it in mlir_air/bin (air/__init__.py is in
    mlir_air/python/air); a source build puts it on PATH."""
    what = "mlir-air's compiler driver aircc"
    if air_init is not None:
        bundled = air_init.parents[2] / "bin" / "aircc"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return Requirement("aircc", what, str(bundled))
    on_path = shutil.which("aircc")
    if on_path:
        return Requirement("aircc", what, on_path)
    return Requirement("aircc", what, None, "not in mlir-air's wheel (mlir_air/bin) nor on "
                       "PATH", "install mlir-air's wheel, or add the bin directory of an "
                       "mlir-air build to PATH")


def peano() -> Requirement:
    """Peano (llvm-aie): where mlir-air's XRT backend looks for it, with its version."""
    what = "Peano (llvm-aie), the AIE cores' compiler"
    fix = "pip install llvm-aie, or set PEANO_INSTALL_DIR to a Peano build"
    given = os.environ.get("PEANO_INSTALL_DIR", "")
    if given:
        if Path(given).is_dir():
            return Requirement("peano", what, given, version=_clang_version(Path(given)))
        return Requirement("peano", what, None, f"PEANO_INSTALL_DIR={given} is not a "
                           "directory", fix)
    try:
        dist = importlib.metadata.distribution("llvm-aie")
        located = Path(str(dist.locate_file("llvm-aie")))
        if located.is_dir():
            return Requirement("peano", what, str(located), version=dist.version)
    except importlib.metadata.PackageNotFoundError:
        pass
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    for d in dirs:
        for match in glob.glob(os.path.join(d, "llvm-aie")):
            if os.path.isdir(match):
                return Requirement("peano", what, match, version=_clang_version(Path(match)))
    return Requirement("peano", what, None, "PEANO_INSTALL_DIR is not set and no llvm-aie "
                       "package is installed", fix)


def _clang_version(peano: Path) -> str | None:
    """The first line of a Peano build's `clang --version`."""
    clang = peano / "bin" / "clang"
    if not clang.is_file():
        return None
    try:
        done = subprocess.run([str(clang), "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def _read(path: Path) -> str | None:
    """A one-line file's text (a sysfs attribute), or None."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def xrt_version(directory: Path) -> str | None:
    """BUILD_VERSION of the XRT installed in `directory` (its version.json)."""
    try:
        value = json.loads((directory / "version.json").read_text()).get("BUILD_VERSION")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def npu_name(sysfs: Path | None = None) -> str | None:
    """The NPU as its driver names it ("RyzenAI-npu4", "NPU Strix"): vbnv on the device."""
    return _read((sysfs or DEVICE_SYSFS) / "vbnv")


def _path(key: str, what: str, path: Path, problem: str, fix: str,
          version: str | None = None) -> Requirement:
    return Requirement(key, what, str(path), fix=fix, version=version) if path.exists() \
        else Requirement(key, what, None, problem, fix)


def _npu(paths: SystemPaths, driver: str) -> Requirement:
    """The device node, and an NPU of the generation the programs are built for."""
    what = "an XDNA 2 NPU (Strix, Strix Halo, Krackan)"
    fix = driver + " on a Ryzen AI 300 machine (an XDNA 2 NPU)"
    if not paths.device_node.exists():
        return Requirement("npu", what, None, f"{paths.device_node} does not exist", fix)
    npu = identify(paths.device_sysfs)
    if npu is None or (npu.vbnv is None and npu.device is None):
        return Requirement("npu", what, None, f"{paths.device_node} exists but its device "
                           f"({paths.device_sysfs}) does not say which NPU it is (no vbnv, "
                           "no PCI id)", fix)
    if npu.generation != XDNA2:
        told = ("an XDNA 1 NPU (Phoenix, Hawk Point)" if npu.generation
                else "an NPU of a generation this project does not build for")
        return Requirement("npu", what, None, f"{paths.device_node} is {told} ({npu.name}): "
                           "the programs are built for XDNA 2 (aie2p), and a design built "
                           "for another generation loads and computes nothing",
                           "run on a Ryzen AI 300 machine (an XDNA 2 NPU)", npu.vbnv)
    return Requirement("npu", what, f"{paths.device_node} ({npu.name})", version=npu.vbnv)


def _firmware(paths: SystemPaths) -> Requirement:
    """The firmware image the driver loads for this NPU, and the version it runs."""
    what = "the NPU firmware"
    fix = "install the NPU firmware (linux-firmware's amdnpu/, or xdna-driver's packages)"
    npu = identify(paths.device_sysfs)
    version = None if npu is None else npu.firmware_version
    if not paths.firmware_dir.is_dir():
        return Requirement("firmware", what, None, f"{paths.firmware_dir} does not exist",
                           fix)
    images = firmware_files(paths.firmware_dir, npu)
    if not images:
        folder = None if npu is None else npu.firmware_folder
        where = paths.firmware_dir / folder if folder else paths.firmware_dir
        return Requirement("firmware", what, None, f"no firmware image (*.sbin) in {where}"
                           + (f" for {npu.name}" if npu is not None else ""), fix, version)
    return Requirement("firmware", what, str(images[0]), version=version)


def _aie_api() -> Requirement:
    what = "mlir-aie's aie_api headers, which Peano compiles the micro-kernels against"
    found, looked = aie_include_dir()
    if found is None:
        return Requirement("aie_api", what, None, f"no {AIE_API_HEADER} found ({looked})",
                           "put mlir-aie's aie-opt on PATH (its wheel's bin/, or an "
                           "install's) or set MLIR_AIE_INSTALL_DIR to an mlir-aie install")
    return Requirement("aie_api", what, str(found))


def _objects(objects: str | None, needed: set[str] | None) -> Requirement:
    """The objects folder: there, not empty, every object an aie2p ELF, and every object
    the plans link (`needed`) in it."""
    what = "the micro-kernel objects (mm_*.o, ...)"
    directory = Path(objects) if objects else default_objects_dir()
    fix = (f"`npu-deploy build-objects --out {directory}` builds them with Peano "
           "(--air-objects DIR or $NPU_DEPLOY_AIR_OBJECTS names another folder)")
    check = check_folder(directory, needed)
    problem = check.problem
    if problem:
        return Requirement("objects", what, None, problem, fix)
    return Requirement("objects", what, f"{directory} ({len(check.objects)} object(s)"
                       + (f", all {len(needed)} the plans link" if needed else "") + ")")


def requirements(objects: str | None = "", *, needed: set[str] | None = None,
                 paths: SystemPaths | None = None) -> list[Requirement]:
    """Every requirement of the xrt backend on this machine, in the order to fix them.
    `objects` is the micro-kernel directory to check ("" leaves it out; None: the default,
    $NPU_DEPLOY_AIR_OBJECTS or the user's data directory); `needed` the objects a model's
    plans link (kernels.npu_runtime.needed_objects), checked to be there."""
    paths = paths or SystemPaths()
    driver = "install the amdxdna driver (github.com/amd/xdna-driver, or Linux >= 6.14)"
    pyxrt = importlib.util.find_spec("pyxrt")
    air, air_init = _mlir_air()
    # pyxrt is installed in XRT's python/ directory: it is the version of that XRT
    pyxrt_xrt = None if pyxrt is None or not pyxrt.origin else \
        Path(pyxrt.origin).resolve().parent.parent
    out = [
        Requirement("pyxrt", "XRT's Python bindings (pyxrt)",
                    None if pyxrt is None else str(pyxrt.origin), "no module named pyxrt",
                    "`source /opt/xilinx/xrt/setup.sh` (it puts pyxrt on PYTHONPATH)",
                    version=None if pyxrt_xrt is None else xrt_version(pyxrt_xrt)),
        air, _aircc(air_init), peano(), _aie_api(),
        _path("driver", "the amdxdna kernel driver", paths.driver_module,
              f"{paths.driver_module} does not exist (the module is not loaded)", driver,
              _read(paths.driver_module / "version")),
        _npu(paths, driver),
        _firmware(paths),
        _path("xrt", "XRT", paths.xrt_dir, "neither $XILINX_XRT nor /opt/xilinx/xrt exists",
              "install XRT >= 2.19 and `source /opt/xilinx/xrt/setup.sh`",
              xrt_version(paths.xrt_dir)),
    ]
    if objects is None or objects:
        out.append(_objects(objects, needed))
    return out


# --- the toolchain's identity, for the compile cache's key ------------------------------------

#: Our own AIE kernel sources, compiled into the micro-kernel objects the programs link.
AIE_SOURCES = Path(__file__).resolve().parent.parent / "aie"

_IDENTITY: dict[str, str] | None = None


def _stamp(path: Path) -> str:
    """name:size:mtime of a file, from one stat (two could straddle a rebuild), or
    "missing"."""
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{path.name}:{st.st_size}:{int(st.st_mtime)}"


def _dist_version(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "missing"


def _air_identity() -> tuple[str, str, Path | None]:
    """mlir-air's compiled passes (`_mlir_libs/_air*.so` in each of the package's search
    locations: it may be a namespace package), found without importing it; and its
    `__init__.py`, where there is one (aircc's wheel location is relative to it)."""
    try:
        spec = importlib.util.find_spec("air")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "missing", "missing", None
    roots = [Path(p) / "_mlir_libs" for p in spec.submodule_search_locations or []]
    libs = sorted(lib for root in roots for lib in root.glob("_air*.so"))
    init = Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    return (_dist_version("mlir_air", "mlir-air"),
            ";".join(_stamp(lib) for lib in libs) or "missing", init)


def _peano_identity() -> str:
    """The Peano mlir-air's backend compiles with: PEANO_INSTALL_DIR's clang (a local build
    says nothing in a package version), else the llvm-aie package's version."""
    given = os.environ.get("PEANO_INSTALL_DIR", "")
    if given:
        return _stamp(Path(given) / "bin" / "clang")
    version = _dist_version("llvm-aie", "llvm_aie")
    return f"llvm-aie {version}" if version != "missing" else "unset"


def _sources_digest(directory: Path = AIE_SOURCES) -> str:
    import hashlib  # here, so that this part of the module stands alone

    h = hashlib.sha256()
    files = sorted(directory.glob("*.cc"))
    for source in files:
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    return h.hexdigest() if files else "missing"


def toolchain_identity(refresh: bool = False) -> dict[str, str]:
    """What compiled a program, as the compile cache keys it: mlir-air's package version and
    a stamp of its compiled `_air*.so` (the piece an mlir-air rebuild changes), aircc's path
    and stamp, Peano, XRT's version and a digest of our AIE kernel sources. The idea is
    upstream's (programming_examples/llms/shared/infra/cache.py, `KernelCache._toolchain_id`:
    a cache built by another mlir-air or Peano must not be served); a part this machine lacks
    is "missing" (or "unset"), never an error. Computed once per process (`refresh` again)."""
    global _IDENTITY
    if _IDENTITY is None or refresh:
        version, libs, init = _air_identity()
        aircc = _aircc(init)
        xrt = xrt_version(Path(os.environ.get("XILINX_XRT", XRT_DIR)))
        _IDENTITY = {
            "mlir_air": version, "air_libs": libs,
            "aircc": f"{aircc.found} {_stamp(Path(aircc.found))}" if aircc.found else "missing",
            "peano": _peano_identity(), "xrt": xrt or "missing",
            "aie_sources": _sources_digest()}
    return dict(_IDENTITY)
