"""The command line lists its commands without importing them (npu_deploy/cli/group.py
COMMANDS, issue 39): what it lists is what it defines."""

from __future__ import annotations

import click

from npu_deploy.cli.group import COMMANDS, main


def test_the_commands_listed_are_the_commands_defined():
    """`--help` lists each command from COMMANDS without importing it: its line there is the
    command's own (the first sentence of its docstring), and the command exists."""
    for name, (_module, _attr, line) in COMMANDS.items():
        command = main.commands[name]
        assert isinstance(command, click.Command) and command.name == name
        assert command.get_short_help_str(10_000) == line, name
