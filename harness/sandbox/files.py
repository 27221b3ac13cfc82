"""Opening a file a child made, from the parent, without trusting the child: the output files
it exports (harness.sandbox.transfer) and its per-code caches copied for another revision
(harness.sandbox.workspace.seed_code_caches). Free of torch and of the harness's settings: the
child imports it too, through transfer."""

from __future__ import annotations

import errno
import os
import stat

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def open_exported(directory_fd: int, name: str) -> int:
    """A read-only descriptor of the file `name` in the directory open as `directory_fd`, which the
    child may have replaced. The open never follows a symbolic link (O_NOFOLLOW) and never waits
    (O_NONBLOCK: a FIFO opens at once, a file lease fails instead of holding the parent); the file
    must then be a regular file with one link, owned by the parent's user. Raises ValueError with a
    reason that says only what the child did: nothing of any file but its own."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ValueError("the output file is missing") from None
        if exc.errno == errno.ELOOP:
            raise ValueError("the output file was replaced by a symbolic link") from None
        raise ValueError(
            f"the output file could not be opened ({errno.errorcode.get(exc.errno, exc.errno)})"
        ) from None
    facts = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(facts.st_mode):
        problem = (
            f"the output file was replaced by {_KINDS.get(stat.S_IFMT(facts.st_mode), 'a special file')}"
        )
    elif facts.st_nlink != 1:
        problem = "the output file was replaced by a hard link"
    elif facts.st_uid != os.geteuid():
        problem = "the output file was replaced by a file of another user"
    if problem is not None:
        os.close(fd)
        raise ValueError(problem)
    return fd
