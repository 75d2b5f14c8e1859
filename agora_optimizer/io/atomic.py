"""Durable writes: a file or a whole directory replaced in one step, or not at all.

:func:`replace_file` writes a file through a temporary of a name nobody can guess, created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` and its final mode from the start, then renamed over the target
(a rename replaces a symlink, never writes through it); the temporary is removed on failure.

:func:`replaced_directory` gives a fresh sibling directory to fill; once it is complete and
flushed to disk it takes the target's place. On Linux the two are exchanged with
``renameat2(RENAME_EXCHANGE)``, so at every instant the target path holds either the old
directory or the new one; elsewhere the old one is renamed aside first and put back by the
next save if a crash came in between. A failure while filling removes the new directory and
leaves the old one as it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from agora_optimizer.errors import InputFileError

NEW_INFIX = ".new-"
OLD_INFIX = ".old-"
STALE_AFTER_S = 3600.0


def fsync_directory(path: Path) -> None:
    """Flush a directory's entries (a rename or a new file in it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: str | bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` at once; the file has ``mode`` whatever the umask, from its creation.

    ``durable``: the file is on disk before it takes the name (its directory is the caller's to
    flush). Raises OSError as the file system does; nothing of the attempt is left behind.
    """
    payload = data.encode() if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have taken bits the caller asked for (a script's x)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


@contextmanager
def replaced_directory(target: str | Path, own_files: Collection[str], mode: int = 0o755) -> Iterator[Path]:
    """Yield an empty sibling directory of ``target``; when the block ends, it replaces ``target``.

    ``target`` may be missing, or a directory holding only ``own_files`` (and hidden ``*.tmp``
    leftovers): anything else is refused, so that a save never deletes what it did not write.
    Every file of the new directory is fsynced, it gets ``mode`` (whatever the umask), and the
    parent is fsynced after the swap. Raises :class:`InputFileError` naming the target.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _recover(target)
        _check_replaceable(target, set(own_files))
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{NEW_INFIX}"))
    except OSError as exc:
        raise InputFileError(target, f"cannot be written: {exc.strerror or exc}") from None
    try:
        yield staging
        for path in staging.iterdir():
            fsync_file(path)
        staging.chmod(mode)
        fsync_directory(staging)
        _swap_in(staging, target)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise InputFileError(target, f"cannot be written: {exc.strerror or exc}") from None
        raise


def _check_replaceable(target: Path, own_files: set[str]) -> None:
    if not target.exists() and not target.is_symlink():
        return
    if not target.is_dir():
        raise InputFileError(target, "exists and is not a directory")
    foreign = sorted(
        p.name for p in target.iterdir() if p.name not in own_files and not (p.name[:1] == "." and p.suffix == ".tmp")
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise InputFileError(
            target, f"holds files that are not this model's ({shown}): give an empty or a model directory"
        )


def _swap_in(staging: Path, target: Path) -> None:
    if not target.exists() and not target.is_symlink():
        os.rename(staging, target)
        fsync_directory(target.parent)
        return
    if _exchange(staging, target):  # staging now holds the old directory
        fsync_directory(target.parent)
        _remove(staging)
        return
    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{OLD_INFIX}"))
    os.rmdir(aside)
    os.rename(target, aside)
    os.rename(staging, target)
    fsync_directory(target.parent)
    _remove(aside)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _recover(target: Path) -> None:
    """Put back an old directory that a crash left renamed aside; drop new ones a crash left half-written.

    A new directory is only dropped an hour after it was last changed: another process may be
    filling it right now.
    """
    for leftover in target.parent.glob(f".{target.name}{NEW_INFIX}*"):
        if time.time() - leftover.lstat().st_mtime > STALE_AFTER_S:
            _remove(leftover)
    asides = sorted(target.parent.glob(f".{target.name}{OLD_INFIX}*"))
    if asides and not target.exists() and not target.is_symlink():
        os.rename(asides.pop(), target)
    for leftover in asides:
        _remove(leftover)
