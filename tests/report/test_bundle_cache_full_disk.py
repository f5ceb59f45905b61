"""The chart library's cache on a full disk: a warning, and the report gets the bundle
made for it (write_text_atomic says "disk full" with a RunDirectoryError)."""

from __future__ import annotations

import logging
import sys
import types

from deepledger import paths
from deepledger.errors import RunDirectoryError
from deepledger.report import page


def test_a_cache_the_disk_refuses_is_a_warning_and_the_bundle_is_still_used(
    tmp_path, monkeypatch, caplog
):
    def full_disk(path, text, mode=None):
        raise RunDirectoryError(f"Could not write {path}: the disk is full.")

    fake = types.ModuleType("vl_convert")
    fake.javascript_bundle = lambda vl_version: "window.vegaEmbed = 'made now';"
    monkeypatch.setitem(sys.modules, "vl_convert", fake)
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(page, "write_text_atomic", full_disk)
    page.chart_library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=page.log.name):
            assert page.chart_library() == "window.vegaEmbed = 'made now';"
    finally:
        page.chart_library.cache_clear()  # later tests get the real bundle
    assert "could not be cached" in caplog.text and "the disk is full" in caplog.text
