"""Files in the executor's state directory, which may sit on a file system others share.

A job directory holds what a job needs (its workload with a token, a SLURM pilot's task lines
with the tasks' environment) and what it says back (its result, its log). So:

- :func:`check_state_dir` refuses a state directory that is not the user's own, or that its
  group or others may write: there anyone could plant a symlink where agora will write.
- :func:`write_private` is the one way to write a file there: :func:`~agora_optimizer.io.atomic.replace_file`
  (a temporary of a name nobody can guess, created ``O_EXCL | O_NOFOLLOW`` with its final mode,
  0600 unless told, fsynced and renamed over the target; removed on failure).
- :func:`open_log` opens a log for appending without following a symlink.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agora_optimizer.errors import InputFileError
from agora_optimizer.io.atomic import replace_file

PRIVATE_MODE = 0o600


def check_state_dir(path: Path) -> None:
    """Refuse ``path`` unless it is a real directory of the current user that no one else may write."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise InputFileError(path, f"[agora] state_dir cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputFileError(
            path, f"[agora] state_dir is a symlink (to {os.readlink(path)}); name the directory itself"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise InputFileError(path, "[agora] state_dir is not a directory")
    if info.st_uid != os.geteuid():
        raise InputFileError(
            path,
            f"[agora] state_dir is owned by uid {info.st_uid}, not by this scheduler's user (uid {os.geteuid()}): "
            "its owner could plant files where agora writes job workloads and results; use a directory of your own",
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputFileError(
            path,
            f"[agora] state_dir may be written by its group or by others (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"anyone could plant a symlink where agora writes; chmod go-w {path}",
        )


def write_private(path: Path, data: str | bytes, mode: int = PRIVATE_MODE) -> None:
    """Replace ``path`` with ``data`` at once, fsynced; the file has ``mode`` (0600 unless told) from its
    creation (:func:`~agora_optimizer.io.atomic.replace_file`). Raises OSError; nothing is left behind."""
    replace_file(path, data, mode)


def open_log(path: Path) -> int:
    """A descriptor appending to the log at ``path`` (created 0600); OSError (ELOOP) if it is a symlink."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_MODE)
