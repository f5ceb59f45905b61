"""Whole lines and whole files: what a crash or a full disk leaves readable."""

from __future__ import annotations

import errno
import json
import os

import pytest

from deepledger.errors import RunDirectoryError
from deepledger.store import files
from deepledger.store.files import (
    append_encoded,
    append_whole,
    disk_trouble,
    encode_lines,
    latest_records,
    read_jsonl,
    write_json_atomic,
    write_text_atomic,
)


def _append_line(path, record):
    append_encoded(path, encode_lines([record]))


def test_a_line_a_crash_cut_short_is_skipped_and_the_next_starts_on_its_own_line(tmp_path):
    path = tmp_path / "results.jsonl"
    _append_line(path, {"task_id": "a"})
    with path.open("a") as out:
        out.write('{"task_id": "b", "sta')  # the process died mid-write
    _append_line(path, {"task_id": "c"})
    assert read_jsonl(path) == [{"task_id": "a"}, {"task_id": "c"}]
    assert read_jsonl(tmp_path / "absent.jsonl") == []


def test_the_newest_line_of_each_task_wins_in_first_seen_order():
    lines = [{"task_id": "a", "n": 1}, {"task_id": "b"}, {"no": "id"}, {"task_id": "a", "n": 2}]
    assert latest_records(lines) == {"a": {"task_id": "a", "n": 2}, "b": {"task_id": "b"}}


def test_a_replaced_file_is_whole_private_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"accuracy": 0.5})
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert path.stat().st_mode & 0o777 == 0o600
    write_text_atomic(path, "new\n", mode=0o644)
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_file_replaced_with_sync_is_on_disk_with_its_rename_before_it_returns(
    tmp_path, monkeypatch
):
    flushed: list[str] = []
    real_fsync = os.fsync

    def fsync(handle: int) -> None:
        flushed.append("folder" if os.path.isdir(f"/proc/self/fd/{handle}") else "file")
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", fsync)
    write_text_atomic(tmp_path / "results.jsonl", "kept\n", 0o644, sync=True)
    assert flushed == ["file", "folder"]  # the lines, then the rename that shows them
    assert (tmp_path / "results.jsonl").read_text() == "kept\n"
    flushed.clear()
    write_text_atomic(tmp_path / "summary.json", "{}\n")  # without: as before
    assert flushed == []


def test_a_write_the_disk_takes_only_in_part_is_cut_back(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"event": "a"}\n')
    real_write = os.write

    def half_then_full(handle, data):
        if len(data) > 4:
            return real_write(handle, data[:4])  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", half_then_full)
    handle = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(OSError):
            append_whole(handle, b'{"event": "b"}\n', sync=False)
    finally:
        os.close(handle)
    assert path.read_bytes() == b'{"event": "a"}\n'


@pytest.mark.parametrize("fails", ["fsync", "first write"])
def test_a_line_written_whole_but_not_flushed_is_cut_back_too(tmp_path, monkeypatch, fails):
    path = tmp_path / "results.jsonl"
    _append_line(path, {"task_id": "a"})
    before = path.read_bytes()

    def refuse(*args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files.os, "fsync" if fails == "fsync" else "write", refuse)
    with pytest.raises(OSError):
        _append_line(path, {"task_id": "b"})
    assert path.read_bytes() == before


def test_only_a_full_or_read_only_disk_stops_the_run(tmp_path):
    full = disk_trouble(tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(full, RunDirectoryError) and "the disk is full" in str(full)
    read_only = disk_trouble(tmp_path, OSError(errno.EROFS, "Read-only file system"))
    assert read_only is not None and "read-only" in str(read_only)
    assert disk_trouble(tmp_path, OSError(errno.ENOENT, "No such file")) is None
