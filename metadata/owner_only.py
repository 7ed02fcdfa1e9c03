"""Owner-only files: the embedded store's SQLite file holds every ledger's metadata (and with it
the password checks), so it is created readable and writable by its owner only (0600). SQLite
gives its -wal and -shm files the database file's permissions."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_ONLY_MODE = 0o600


def create_owner_only(path: Path) -> None:
    """Create `path` empty with mode 0600 if it does not exist (O_EXCL: never touches an existing
    file, whatever the umask); warn about an existing one that others may read."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY_MODE)
    except FileExistsError:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("metadata file is accessible to others than its owner (chmod 600 it) path=%s mode=%o",
                        path, stat.S_IMODE(mode))
        return
    os.close(fd)
    os.chmod(path, OWNER_ONLY_MODE)  # exactly 0600: the umask may have removed the owner's write bit
