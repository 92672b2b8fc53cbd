"""Host-side access to trees and files that sandboxed code wrote.

Sandboxed code can leave symlinks (to the hidden test split, to /proc/self/environ), FIFOs that
hang a reader, sparse files that cost nothing inside and gigabytes once copied, and link loops.
Everything the orchestrator does with such a tree goes through this module, which never follows
a link and never reads anything but a regular file:

- `walk` lstat-walks a tree through directory file descriptors (each step opened with
  O_NOFOLLOW, so a directory swapped for a link mid-walk is not entered);
- `copy_tree` copies only regular files and directories, drops every other kind (reported as
  relative path + kind), and raises `Rejected` past caps on apparent size (the sum of st_size,
  so sparse files count in full) and entry count, before copying the file that crosses them;
- `read_bytes` / `read_json` / `open_in` read one file with O_NOFOLLOW | O_NONBLOCK and a
  regular-file check on the opened descriptor, bounded in size: a FIFO neither hangs nor is read.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20
MB = 1 << 20


class Rejected(OSError):
    """A tree or file that host-side code refuses to take in; `reason` says why (for the agent)."""

    def __init__(self, reason: str, kind: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind  # for a file refused by kind: symlink, fifo, ...

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Caps:
    """Limits on a tree: apparent bytes (sum of st_size) and entries (files, dirs, dropped links)."""

    max_bytes: int | None = None
    max_files: int | None = None

    @classmethod
    def of(cls, max_mb: float | None, max_files: int | None) -> Caps:
        return cls(None if max_mb is None else int(max_mb * MB), max_files)


NO_CAPS = Caps()


def kind(mode: int) -> str:
    """The kind of a file by its lstat mode: file, dir, symlink, fifo, socket, char-device, ..."""
    for test, name in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "char-device"),
        (stat.S_ISBLK, "block-device"),
    ):
        if test(mode):
            return name
    return "other"


def skip_hidden(name: str) -> bool:
    """Names the workspace snapshot and its hash leave out: dotfiles and __pycache__."""
    return name.startswith(".") or name == "__pycache__"


@dataclass
class Entry:
    rel: str  # path relative to the walked root, POSIX separators
    kind: str
    size: int  # st_size from lstat (apparent size: sparse files count in full)
    dir_fd: int  # the open directory that holds it (valid while the walk is at this entry)
    name: str


def is_real_dir(path: Path) -> bool:
    """Whether path is a directory itself (not a link to one)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_regular(path: Path) -> bool:
    """Whether path is a regular file itself (not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def walk(root: Path, skip: Callable[[str], bool] | None = None) -> Iterator[Entry]:
    """Every entry under root, sorted, parents before children; links are reported, never followed.

    A root that is not a real directory (missing, a link, a file) yields nothing.
    """
    try:
        fd = os.open(root, DIR_FLAGS)
    except OSError:
        return
    try:
        yield from _walk_fd(fd, "", skip)
    finally:
        os.close(fd)


def _walk_fd(dfd: int, prefix: str, skip: Callable[[str], bool] | None) -> Iterator[Entry]:
    with os.scandir(dfd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        if skip and skip(name):
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        k = kind(st.st_mode)
        rel = f"{prefix}{name}"
        yield Entry(rel, k, st.st_size, dfd, name)
        if k == "dir":
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # replaced by a link or removed since the lstat: not entered
            try:
                yield from _walk_fd(sub, rel + "/", skip)
            finally:
                os.close(sub)


def _open_regular(name: str, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """An O_NOFOLLOW | O_NONBLOCK read descriptor of a regular file (fstat-checked), else Rejected."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:  # the last component is a symlink
            raise Rejected(f"{name}: a symbolic link (links are not followed)", "symlink") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Rejected(f"{name}: a {kind(st.st_mode)}, not a regular file", kind(st.st_mode))
    return fd, st


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        block = os.read(fd, min(CHUNK, left))
        if not block:
            break
        chunks.append(block)
        left -= len(block)
    return b"".join(chunks)


def _copy_fd(src: int, size: int, dst: int) -> None:
    """Copy at most size bytes (the size seen at open: a file growing meanwhile is cut there).

    Sparse-aware: only the source's data extents are read and written (SEEK_DATA / SEEK_HOLE),
    holes stay holes, so a file that is mostly hole costs the host what it costs inside, not
    its apparent size. Where the file system cannot say, the whole range is copied.
    """
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
            end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past pos: the rest is a hole
                break
            start, end = pos, size  # no SEEK_DATA here: copy it all
        if start >= size:
            break
        os.lseek(src, start, os.SEEK_SET)
        os.lseek(dst, start, os.SEEK_SET)
        left = end - start
        while left > 0:
            block = os.read(src, min(CHUNK, left))
            if not block:
                break
            os.write(dst, block)  # a regular file: full writes
            left -= len(block)
        pos = end
    os.ftruncate(dst, size)  # a trailing hole keeps the apparent size


def copy_tree(
    src: Path,
    dst: Path,
    caps: Caps = NO_CAPS,
    skip: Callable[[str], bool] | None = None,
    link: bool = False,
    keep: Callable[[str], bool] | None = None,
    dense: bool = False,
) -> list[dict]:
    """Copy the regular files and directories of src to dst (which must not exist); the dropped rest.

    Returns [{"path": rel, "kind": kind}] for every link, FIFO, socket or device left out, and
    every regular file whose name `keep` refuses ("not kept": never opened, not counted in the
    caps). Past caps it raises Rejected and leaves no dst. link=True hard-links files instead of copying
    them (for host-written trees only, such as the checkpoint cache), copying where it cannot.
    A src that is not a real directory gives an empty dst (a link in its place is reported).
    dense=True refuses (Rejected) a file with a hole: for trees whose files host code later
    rewrites in full (a checkpoint's null model), where a hole would be expanded on the host.
    """
    dst = Path(dst)
    dst.mkdir(parents=True)
    dropped: list[dict] = []
    try:
        src_st = os.lstat(src)
    except FileNotFoundError:
        return dropped
    if not stat.S_ISDIR(src_st.st_mode):
        return [{"path": ".", "kind": kind(src_st.st_mode)}]
    total = count = 0
    try:
        for e in walk(src, skip):
            count += 1
            if caps.max_files is not None and count > caps.max_files:
                raise Rejected(f"{src.name}/ has more than {caps.max_files} entries")
            target = dst / e.rel
            if e.kind == "dir":
                target.mkdir()
                continue
            if e.kind != "file":
                dropped.append({"path": e.rel, "kind": e.kind})
                continue
            if keep is not None and not keep(e.name):
                dropped.append({"path": e.rel, "kind": "not kept"})
                continue
            try:
                fd, st = _open_regular(e.name, e.dir_fd)
            except Rejected as r:  # swapped for a link or a FIFO since the lstat
                dropped.append({"path": e.rel, "kind": r.kind or "other"})
                continue
            try:
                total += st.st_size
                if caps.max_bytes is not None and total > caps.max_bytes:
                    raise Rejected(
                        f"{src.name}/ is over {caps.max_bytes / MB:.0f} MB (apparent size, sparse files "
                        f"count in full; {e.rel} is {st.st_size / MB:.1f} MB)"
                    )
                if dense and (hole := _first_hole(fd, st.st_size)) is not None:
                    raise Rejected(
                        f"{e.rel} is a sparse file ({st.st_size / MB:.1f} MB apparent, a hole at byte "
                        f"{hole}): model files are written in full (safetensors, JSON and tokenizer "
                        "writers never leave holes); write it with its bytes, not a seek or truncate"
                    )
                if link and _link_fd(fd, e.name, e.dir_fd, target):
                    continue
                out = os.open(
                    target,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o755 if st.st_mode & 0o111 else 0o644,
                )
                try:
                    _copy_fd(fd, st.st_size, out)
                finally:
                    os.close(out)
            finally:
                os.close(fd)
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        raise
    return dropped


def _first_hole(fd: int, size: int) -> int | None:
    """Where fd's first hole starts, or None if it has none before its end (or the file system
    cannot say). The implicit hole at EOF does not count."""
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:
        return None
    finally:
        os.lseek(fd, 0, os.SEEK_SET)
    return hole if hole < size else None


def _link_fd(fd: int, name: str, dir_fd: int, target: Path) -> bool:
    """Hard-link the entry name (never a link's target) at target, if it is still the open file fd."""
    try:
        os.link(name, target, src_dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    st, now = os.fstat(fd), os.lstat(target)
    if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
        return True
    os.unlink(target)  # swapped since it was opened: copy the bytes instead
    return False


def prune(root: Path, skip: Callable[[str], bool] | None = None) -> list[dict]:
    """Remove every link and special file under root in place; what was removed (path + kind)."""
    removed = []
    for e in walk(root, skip):
        if e.kind not in ("file", "dir"):
            try:
                os.unlink(e.name, dir_fd=e.dir_fd)
                removed.append({"path": e.rel, "kind": e.kind})
            except OSError:
                pass
    return removed


def tree_size(root: Path, skip: Callable[[str], bool] | None = None) -> tuple[int, int]:
    """(apparent bytes of the regular files, entries) under root, links not followed."""
    total = count = 0
    for e in walk(root, skip):
        count += 1
        total += e.size if e.kind == "file" else 0
    return total, count


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file (no link followed at its last component), at most max_bytes.

    A larger file, a link, a FIFO or a device raises Rejected; a FIFO is never waited on.
    """
    fd, st = _open_regular(str(path))
    try:
        if st.st_size > max_bytes:
            raise Rejected(f"{Path(path).name}: {st.st_size} bytes, over the {max_bytes}-byte limit")
        data = _read_fd(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Rejected(f"{Path(path).name}: over the {max_bytes}-byte limit")
    return data


def read_chunks(name: str, dir_fd: int | None, limit: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """The first `limit` bytes of a regular file, in blocks of at most `chunk` (for scanning).

    Opened like read_bytes (no link followed, a FIFO or device raises Rejected before any read);
    a larger file is cut at `limit` rather than refused, so a caller can scan the head of a huge
    or sparse file within its own byte budget. `dir_fd` is a `walk` entry's directory.
    """
    fd, _ = _open_regular(name, dir_fd)
    try:
        left = limit
        while left > 0:
            block = os.read(fd, min(chunk, left))
            if not block:
                return
            left -= len(block)
            yield block
    finally:
        os.close(fd)


def read_json(path: Path, max_bytes: int = MB) -> object:
    """A bounded read_bytes parsed as JSON; malformed content raises Rejected."""
    try:
        return json.loads(read_bytes(path, max_bytes))
    except (ValueError, RecursionError) as e:
        raise Rejected(f"{Path(path).name}: not valid JSON ({type(e).__name__})") from None


def relative_parts(relpath: str) -> list[str]:
    """The components of a workspace-relative path; absolute paths and '..' are refused."""
    p = PurePosixPath(relpath)
    if p.is_absolute() or ".." in p.parts:
        raise PermissionError(f"{relpath!r} is outside the workspace")
    parts = [x for x in p.parts if x not in ("", ".")]
    if not parts:
        raise IsADirectoryError(f"{relpath!r} is the workspace itself")
    return parts


def open_in(root: Path, relpath: str, flags: int, mode: int = 0o644, make_dirs: bool = False) -> int:
    """A descriptor of root/relpath, every component looked up without following a link.

    Intermediate components must be real directories (created when make_dirs); the last one
    is opened with flags | O_NOFOLLOW | O_NONBLOCK and must turn out a regular file.
    """
    parts = relative_parts(relpath)
    dfd = os.open(root, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            if make_dirs:
                try:
                    os.mkdir(part, 0o755, dir_fd=dfd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(part, DIR_FLAGS, dir_fd=dfd)
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP):  # a file or a link in the way
                    raise PermissionError(
                        f"{relpath!r}: {part!r} is not a directory of the workspace"
                    ) from None
                raise
            os.close(dfd)
            dfd = sub
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO opened for writing
                raise Rejected(f"{relpath!r} is a link or a special file (not followed)") from None
            raise
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Rejected(f"{relpath!r} is a {kind(st.st_mode)}, not a regular file")
    return fd


def read_in(root: Path, relpath: str, max_bytes: int) -> bytes:
    """Bounded read of root/relpath through open_in (no link followed anywhere on the path)."""
    fd = open_in(root, relpath, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise Rejected(f"{relpath!r}: {st.st_size} bytes, over the {max_bytes}-byte limit")
        return _read_fd(fd, max_bytes)
    finally:
        os.close(fd)


def write_in(root: Path, relpath: str, data: bytes) -> None:
    """Create or replace root/relpath's content (parents made; no link followed anywhere on the path)."""
    fd = open_in(root, relpath, os.O_WRONLY | os.O_CREAT, make_dirs=True)
    try:
        os.ftruncate(fd, 0)  # only after the regular-file check (O_TRUNC would act before it)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Remove whatever is at path (a directory tree, a file, a link, a FIFO) without following links."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # fd-based: does not follow links inside
    else:
        os.unlink(path)
