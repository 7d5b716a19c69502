"""Model fingerprints: the whole file counts (a byte changed anywhere changes it), the name does not, and a
file replaced in place is hashed again rather than served from the per-process memo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ragopt.errors import InputError
from ragopt.gguf_meta import model_fingerprint

MiB = 2**20


def _weights(path: Path, size: int = 5 * MiB) -> Path:
    path.write_bytes((bytes(range(251)) * (size // 251 + 1))[:size])
    return path


def _flip(path: Path, offset: int) -> None:
    """Change one byte in place, keeping size and mtime: only the content differs."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_byte_changed_in_the_middle_changes_the_fingerprint(tmp_path: Path) -> None:
    a = _weights(tmp_path / "a.gguf")
    b = _weights(tmp_path / "b.gguf")
    _flip(b, 5 * MiB // 2)  # far from the first and last MiB, which is all the old fingerprint read
    assert model_fingerprint(a) != model_fingerprint(b)


def test_the_same_bytes_under_another_name_have_the_same_fingerprint(tmp_path: Path) -> None:
    a = _weights(tmp_path / "a.gguf")
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    copy.write_bytes(a.read_bytes())
    assert model_fingerprint(a) == model_fingerprint(copy)
    # an independent implementation of "sha256 of the whole file": coreutils' sha256sum
    sha = subprocess.run(["sha256sum", str(a)], capture_output=True, text=True, check=True).stdout.split()[0]
    assert model_fingerprint(a) == sha[:16]


def test_a_file_replaced_in_place_is_hashed_again(tmp_path: Path) -> None:
    path = _weights(tmp_path / "m.gguf")
    before = model_fingerprint(path)
    assert model_fingerprint(path) == before  # memoized, same answer
    _flip(path, 3 * MiB)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # what a rewrite does to mtime
    assert model_fingerprint(path) != before


def test_a_missing_model_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        model_fingerprint(tmp_path / "absent.gguf")
    assert err.value.path == str(tmp_path / "absent.gguf")
