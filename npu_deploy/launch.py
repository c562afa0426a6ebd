"""The `npu-deploy` command's entry point: say what is loading (loading.py), then import
and run the command line. Nothing here may import more than the standard library (and
platformdirs, for where the store is) before the line is written."""

from __future__ import annotations

import sys

from npu_deploy import loading


def main() -> None:
    line = loading.loading_line(sys.argv)
    if line is not None:
        loading.say(line)
    from npu_deploy.cli import main as cli

    cli()
