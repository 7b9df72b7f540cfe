"""Help text as a terminal shows it: no reST markup, every option with its default.

Command descriptions are the modules' docstrings, written for Sphinx-style
readers (``code``, :class:`x`); ``lb --help`` shows them as plain text.
"""

from __future__ import annotations

import argparse
import re

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """``text`` without reST roles and literal markup."""
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    return text.replace("::\n", ":\n")


class LbHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the descriptions' paragraphs; adds "(default: X)" where the help omits it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = plain(action.help or "")
        default = action.default
        shows_default = "default" in text or "%(default)" in text
        if (
            not shows_default
            and action.option_strings
            and default not in (None, False, argparse.SUPPRESS)
            and action.nargs != 0
        ):
            shown = " ".join(map(str, default)) if isinstance(default, list) else default
            text = f"{text} (default: {shown})" if text else f"default: {shown}"
        return text.replace("%", "%%").replace("%%(default)s", "%(default)s")
