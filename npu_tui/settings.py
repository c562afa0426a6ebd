"""What a person chose in the TUI and finds again at the next launch (the theme), in a small
TOML file beside the keymap: `user_config_path("npu-deploy") / "tui.toml"`, or
`$NPU_DEPLOY_SETTINGS`. Read at startup, written when a choice changes. The keymap's path
(`$NPU_DEPLOY_KEYMAP`, else keymap.toml there) is here too; app.py reads that file."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from platformdirs import user_config_path

HEADER = "# npu-deploy's terminal UI: what you chose in it, kept for the next launch\n"


class SettingsError(ValueError):
    """A settings file that cannot be read: said in one line, and the defaults hold."""


def keymap_path() -> Path:
    env = os.environ.get("NPU_DEPLOY_KEYMAP")
    return Path(env) if env else user_config_path("npu-deploy") / "keymap.toml"


def settings_path() -> Path:
    env = os.environ.get("NPU_DEPLOY_SETTINGS")
    return Path(env) if env else user_config_path("npu-deploy") / "tui.toml"


def read_settings(path: Path) -> dict[str, Any]:
    """The file's settings ({} when there is none); SettingsError when it is not TOML."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as e:
        raise SettingsError(f"{path} is not a settings file ({e}); the TUI starts with its "
                            "defaults, and choosing a theme writes the file anew") from None


def _toml(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)        # a JSON string or number is TOML's too


def write_setting(path: Path, name: str, value: str | int | float | bool) -> None:
    """Set `name` in the file, keeping its other settings (a file that cannot be read is
    written anew); atomically, so a crash leaves the old file or the new one."""
    try:
        settings = read_settings(path)
    except SettingsError:
        settings = {}
    settings[name] = value
    kept = {k: v for k, v in settings.items() if isinstance(v, str | int | float | bool)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(HEADER + "".join(f"{k} = {_toml(v)}\n" for k, v in kept.items()),
                   encoding="utf-8")
    tmp.replace(path)
