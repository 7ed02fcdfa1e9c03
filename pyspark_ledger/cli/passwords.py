"""The ledger password of `ledger` commands, kept off the command line (docs/security.md).

Where it comes from, first found wins: --password (still accepted, with a warning: other users
see it in `ps` and it stays in shell history), --password-prompt (asked on the terminal, not
echoed), $LEDGER_PASSWORD, the file $LEDGER_PASSWORD_FILE names (one trailing newline dropped),
else empty. A ledger created with an empty password gets a warning (its master key is public:
anyone who reaches a bookie may write to it or delete it), and digest "mac" with an empty password
is refused (its key would be public too, so the MAC would prove nothing).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError

ENV_PASSWORD = "LEDGER_PASSWORD"
ENV_PASSWORD_FILE = "LEDGER_PASSWORD_FILE"
PASSWORD_BYTES_MAX = 4096
VISIBLE_WARNING = ("ledger: warning: --password is visible to other users in `ps` and stays in your shell history; "
                   f"use {ENV_PASSWORD}, {ENV_PASSWORD_FILE} or --password-prompt")
EMPTY_WARNING = ("ledger: warning: creating a ledger with an empty password: its master key is public, so anyone "
                 "who can reach a bookie may write to or delete it; set a password (LEDGER_PASSWORD)")


class PasswordError(PySparkLedgerError, ValueError):
    """A password that cannot be used; the message never contains it."""


def add_password_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--password", default=None,
                   help=f"ledger password (visible in ps and history: prefer ${ENV_PASSWORD}, ${ENV_PASSWORD_FILE} "
                        "or --password-prompt)")
    p.add_argument("--password-prompt", action="store_true", help="ask for the ledger password on the terminal")


def resolve_password(args: argparse.Namespace, environ: dict[str, str] | None = None) -> bytes:
    env = os.environ if environ is None else environ
    if getattr(args, "password", None) is not None:
        print(VISIBLE_WARNING, file=sys.stderr)
        return _checked(str(args.password).encode())
    if getattr(args, "password_prompt", False):
        return _checked(getpass.getpass("ledger password: ").encode())
    if env.get(ENV_PASSWORD):
        return _checked(env[ENV_PASSWORD].encode())
    path = env.get(ENV_PASSWORD_FILE)
    if path:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise PasswordError(f"cannot read {ENV_PASSWORD_FILE} file {path}: {exc.strerror}") from None
        return _checked(raw[:-1] if raw.endswith(b"\n") else raw)
    return b""


def _checked(password: bytes) -> bytes:
    if len(password) > PASSWORD_BYTES_MAX:
        raise PasswordError(f"the ledger password is longer than {PASSWORD_BYTES_MAX} bytes")
    return password


def check_new_ledger_password(password: bytes, digest_type: str) -> None:
    """Before creating a ledger: refuse an empty password with "mac", warn about any other."""
    if password:
        return
    if str(digest_type).lower() == "mac":
        raise PasswordError('digest "mac" with an empty password: the MAC key would be public; set a password '
                            f"(${ENV_PASSWORD}, ${ENV_PASSWORD_FILE} or --password-prompt)")
    print(EMPTY_WARNING, file=sys.stderr)
