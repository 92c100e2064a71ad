"""Checkpoints on disk: ``tinker://`` paths mapped to directories under ``--state-dir``.

``tinker://<run>/weights/<name>`` (training state: adapter + optimizer) and
``tinker://<run>/sampler_weights/<name>`` (adapter only) become
``<state-dir>/<run>/weights/<name>/`` and ``<state-dir>/<run>/sampler_weights/<name>/``.

``<run>`` is a random id the server gives each training client (see ``service.py``), so a path
names nothing else (no session, no model id) and cannot be guessed: whoever holds a path may
load it, as a resumed loop in a new session must, and no one else can find it.

Names come from clients, so they are checked against a strict pattern and the resolved path
must stay inside the state directory; anything else is a :class:`CheckpointPathError` (400).
Checkpoints are written into a temporary sibling directory and renamed into place, so a reader
never sees half a checkpoint.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import BadRequest, NotFound

TINKER_SCHEME = "tinker://"
KINDS = ("weights", "sampler_weights")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class CheckpointPathError(BadRequest):
    """A checkpoint name or ``tinker://`` path that is malformed or would leave the state dir."""


class CheckpointNotFoundError(NotFound):
    """A well-formed ``tinker://`` path with nothing saved under it."""


@dataclass(frozen=True)
class CheckpointRef:
    run_id: str
    kind: str
    name: str

    @property
    def tinker_path(self) -> str:
        return f"{TINKER_SCHEME}{self.run_id}/{self.kind}/{self.name}"


def check_name(name: str, what: str = "checkpoint name") -> str:
    """Accept only plain names: letters, digits, ``.``, ``_``, ``-``; no ``..``, no slashes."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise CheckpointPathError(
            f"invalid {what} {name!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' or '/'"
        )
    return name


def parse_tinker_path(path: str) -> CheckpointRef:
    """Split ``tinker://run/kind/name``, refusing anything that is not exactly that."""
    if not isinstance(path, str) or not path.startswith(TINKER_SCHEME):
        raise CheckpointPathError(f"checkpoint path must start with {TINKER_SCHEME!r}, got {path!r}")
    parts = path[len(TINKER_SCHEME) :].split("/")
    if len(parts) != 3 or parts[1] not in KINDS:
        raise CheckpointPathError(
            f"checkpoint path must look like tinker://<run>/weights/<name> or "
            f"tinker://<run>/sampler_weights/<name>, got {path!r}"
        )
    run_id, kind, name = parts
    return CheckpointRef(check_name(run_id, "run id"), kind, check_name(name))


class CheckpointStore:
    """Maps checkpoint references to directories and writes them atomically."""

    def __init__(self, root: Path):
        self.root = root.expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def directory(self, ref: CheckpointRef) -> Path:
        path = (self.root / ref.run_id / ref.kind / ref.name).resolve()
        if not path.is_relative_to(self.root):
            raise CheckpointPathError(f"checkpoint path {ref.tinker_path!r} leaves the state directory")
        return path

    def existing(self, tinker_path: str) -> Path:
        """The directory of a saved checkpoint, or :class:`CheckpointNotFoundError`."""
        ref = parse_tinker_path(tinker_path)
        path = self.directory(ref)
        if not path.is_dir():
            raise CheckpointNotFoundError(f"no checkpoint saved at {tinker_path}")
        return path

    def write(self, ref: CheckpointRef, fill: Callable[[Path], None], overwrite: bool = True) -> str:
        """Let ``fill`` write files into a fresh directory, then move it to ``ref`` at once."""
        final = self.directory(ref)
        if final.exists() and not overwrite:
            raise CheckpointPathError(f"checkpoint {ref.tinker_path} exists; pass overwrite=True")
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{ref.name}.", dir=final.parent))
        try:
            fill(staging)
            if final.exists():
                # Two renames keep the window without a checkpoint as small as it can be.
                trash = Path(tempfile.mkdtemp(prefix=f".{ref.name}.old.", dir=final.parent))
                os.replace(final, trash / "old")
                os.replace(staging, final)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return ref.tinker_path
