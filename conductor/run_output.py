"""Where a run's outputs go: ``{output.dir}/{run_name}/``, on a local disk or at any fsspec URL (``s3://``).

Why not just ``runs/``: a Ray job runs in a temporary copy of its working directory on the head node,
which is lost with the cluster; and learner ranks on other nodes cannot write into the driver's disk.
Every entry point therefore writes through a ``RunOutput``. A local root is used in place. A remote one
goes through a local staging directory: a writer fills ``staged(...)`` and calls ``publish(...)``
(whole files or directories, uploaded as they are); a reader calls ``fetch(...)`` and gets a local copy.
Small files (JSON, the audit log) are read and written directly.

A ``RunOutput`` pickles (URL and options only), so learner ranks and engines on any node use the same
one; each process stages under its own temporary directory.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import fsspec


class RunOutput:
    def __init__(self, root: str, run_name: str, storage_options: Optional[dict[str, Any]] = None):
        self.root, self.run_name = root.rstrip("/") or "/", run_name
        self.storage_options = dict(storage_options or {})
        self.remote = "://" in root and not root.startswith("file://")
        self.url = posixpath.join(self.root, run_name) if self.remote else str(Path(root).absolute() / run_name)
        self._fs: Any = None

    def __repr__(self) -> str:
        return f"RunOutput({self.url!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fs"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _fs=None)

    @property
    def fs(self):
        if self._fs is None:
            self._fs = fsspec.core.url_to_fs(self.url, **self.storage_options)[0]
        return self._fs

    def path(self, *parts: str) -> str:
        """The URL (or absolute local path) of ``parts`` under the run."""
        return posixpath.join(self.url, *parts) if self.remote else str(Path(self.url, *parts))

    # -- small files --------------------------------------------------------------------------------------

    def exists(self, *parts: str) -> bool:
        """A file, or a directory holding at least one file (some S3 servers keep listing a prefix whose
        objects were all deleted). Not cached: another process (a rank) may have written since."""
        return bool(self._files(self.path(*parts)))

    def _files(self, path: str) -> list[str]:
        self.fs.invalidate_cache()
        found = self.fs.find(path, detail=True)
        return [name for name, info in found.items() if info.get("type") == "file"]

    def read_text(self, *parts: str) -> str:
        with self.fs.open(self.path(*parts), "r") as handle:
            return handle.read()

    def write_text(self, *parts: str, text: str) -> None:
        """Whole-file write; atomic on a local disk (temp + rename), and an S3 object appears whole."""
        target = self.path(*parts)
        if self.remote:
            with self.fs.open(target, "w") as handle:
                handle.write(text)
            return
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(target).with_name(f".{Path(target).name}.tmp")
        temporary.write_text(text)
        os.replace(temporary, target)

    def list_dirs(self, *parts: str) -> list[str]:
        """Names of the non-empty directories directly under ``parts`` (from the files found under it:
        some S3 servers keep listing a prefix whose objects were all deleted)."""
        base = self.path(*parts)
        if not self.exists(*parts):
            return []
        prefix = self.fs._strip_protocol(base).rstrip("/") + "/"
        inside = [path[len(prefix):] for path in self._files(base) if path.startswith(prefix)]
        return sorted({rest.split("/", 1)[0] for rest in inside if "/" in rest})

    def remove(self, *parts: str) -> None:
        if self.exists(*parts):
            self.fs.rm(self.path(*parts), recursive=True)

    def move(self, source: tuple[str, ...], target: tuple[str, ...]) -> None:
        """Move a file or directory within the run (on S3: copy every object found, then delete)."""
        if not self.remote:
            Path(self.path(*target)).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(self.path(*source), self.path(*target))
            return
        prefix = self.fs._strip_protocol(self.path(*source)).rstrip("/")
        destination = self.fs._strip_protocol(self.path(*target)).rstrip("/")
        for path in self._files(prefix):
            self.fs.copy(path, destination + path[len(prefix):])
        self.fs.rm(prefix, recursive=True)

    # -- whole files and directories ------------------------------------------------------------------------

    def staged(self, *parts: str) -> Path:
        """Where to write ``parts`` locally before ``publish``: the real place for a local root."""
        if not self.remote:
            return Path(self.path(*parts))
        return self._staging().joinpath(*parts)

    def publish(self, *parts: str) -> str:
        """Upload what was written at ``staged(*parts)`` (a file or a directory); a no-op locally."""
        target = self.path(*parts)
        if self.remote:
            local = self.staged(*parts)
            if local.is_dir():
                self.fs.put(str(local) + "/", target + "/", recursive=True)
            else:
                self.fs.put_file(str(local), target)
        return target

    def fetch(self, *parts: str) -> Path:
        """A local copy of ``parts`` (a file or a directory): the real place for a local root."""
        if not self.remote:
            return Path(self.path(*parts))
        local = self.staged(*parts)
        if local.exists():
            shutil.rmtree(local) if local.is_dir() else local.unlink()
        local.parent.mkdir(parents=True, exist_ok=True)
        if self.fs.isdir(self.path(*parts)):
            self.fs.get(self.path(*parts) + "/", str(local) + "/", recursive=True)
        else:
            self.fs.get_file(self.path(*parts), str(local))
        return local

    def discard_staged(self, *parts: str) -> None:
        """Free the local copy of ``parts`` once published or loaded (remote roots only)."""
        if self.remote:
            shutil.rmtree(self.staged(*parts), ignore_errors=True)

    def _staging(self) -> Path:
        key = hashlib.sha256(self.url.encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / "conductor-staging" / f"{key}-{os.getpid()}"


def local_copy(uri: str, storage_options: Optional[dict[str, Any]] = None) -> str:
    """A local directory holding ``uri`` (a model directory): the path itself when local, else a copy
    cached under the temp dir by URI, made once per node (vLLM and transformers load from local paths)."""
    if "://" not in uri or uri.startswith("file://"):
        return uri.removeprefix("file://")
    cache = Path(tempfile.gettempdir()) / "conductor-models" / hashlib.sha256(uri.encode()).hexdigest()[:16]
    if (cache / ".complete").exists():
        return str(cache)
    shutil.rmtree(cache, ignore_errors=True)  # an interrupted copy
    fs = fsspec.core.url_to_fs(uri, **(storage_options or {}))[0]
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    fs.get(uri.rstrip("/") + "/", str(partial) + "/", recursive=True)
    (partial / ".complete").touch()
    try:
        os.replace(partial, cache)
    except OSError:  # another process on this node finished first
        shutil.rmtree(partial, ignore_errors=True)
    return str(cache)
