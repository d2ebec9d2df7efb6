"""The flags the command lines share, each written once: ``--insecure``, ``--config`` and the flags over its keys.

``vfl-server``, ``vfl-client`` and ``vfl-serve`` read a TOML config that flags override. A flag
that overrides a key is declared here together with that key (``add_config_flag``), so the table
of which flag sets which key is never written a second time in a ``_document()`` function;
``document(args)`` then lays the given flags over the file. The log flags are
``vflcore.runtime.daemon.add_logging_flags``, next to the ``setup_logging`` that reads them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vflcore.runtime.config import document_with_flags

INSECURE_HELP = "DEVELOPMENT ONLY: plaintext, no certificates"

# Where a parser keeps its table {flag's dest: (section, key)}: a parser default, so that the
# parsed namespace carries it to ``document`` as ``set_defaults(run=...)`` carries a subcommand.
_CONFIG_KEYS = "config_keys"


def add_insecure(parser: argparse.ArgumentParser, *, default: Any = False) -> None:
    """``--insecure``. ``default=argparse.SUPPRESS`` on a subcommand keeps a value given before it."""
    parser.add_argument("--insecure", action="store_true", default=default, help=INSECURE_HELP)


def add_config(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--config FILE``: the TOML file that the flags added by ``add_config_flag`` override."""
    parser.add_argument("--config", type=Path, help=help_text)
    parser.set_defaults(**{_CONFIG_KEYS: {}})


def add_config_flag(parser: argparse.ArgumentParser, flag: str, key: tuple[str, str], **kwargs: Any) -> None:
    """A flag (``add_argument``'s arguments) that overrides ``key``, a (table, key) of the config file."""
    action = parser.add_argument(flag, **kwargs)
    parser.set_defaults(**{_CONFIG_KEYS: {**(parser.get_default(_CONFIG_KEYS) or {}), action.dest: key}})


def add_tls_files(parser: argparse.ArgumentParser, *, ca: str, cert: str, key: str) -> None:
    """``--ca``, ``--cert`` and ``--key``, overriding ``[tls]``; the help of each says whose file it is."""
    add_config_flag(parser, "--ca", ("tls", "ca"), type=Path, help=ca)
    add_config_flag(parser, "--cert", ("tls", "cert"), type=Path, help=cert)
    add_config_flag(parser, "--key", ("tls", "key"), type=Path, help=key)


def document(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's contents with the flags laid on top (flags win).

    A flag that was not given leaves the file's value alone: None for a flag with a value, False
    for a switch (``store_true``), which can only turn a key on.
    """
    keys: dict[str, tuple[str, str]] = getattr(args, _CONFIG_KEYS)
    given = {key: None if getattr(args, dest) is False else getattr(args, dest) for dest, key in keys.items()}
    return document_with_flags(args.config, given)
