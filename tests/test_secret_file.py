"""A key file resurrect creates holds a whole key or does not exist (resurrect/secret_file.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from resurrect import secret_file
from resurrect.errors import ConfigError
from resurrect.secret_file import read_or_create_key


def test_a_key_is_created_private_and_read_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "state" / "hold-mark.key"
    key = read_or_create_key(path, "hold-mark key")
    assert len(key) == 64 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_or_create_key(path, "hold-mark key") == key
    assert [p.name for p in path.parent.iterdir()] == ["hold-mark.key"]  # nothing staged left


def test_a_full_disk_leaves_no_key_file_and_the_next_call_makes_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hold-mark.key"
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(secret_file.os, "write", full)
    with pytest.raises(ConfigError, match="No space left on device"):
        read_or_create_key(path, "hold-mark key")
    assert list(tmp_path.iterdir()) == []  # no empty key file to fail every later read
    monkeypatch.setattr(secret_file.os, "write", real_write)
    assert len(read_or_create_key(path, "hold-mark key")) == 64
