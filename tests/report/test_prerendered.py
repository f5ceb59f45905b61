"""The parts of the report made ahead of time: the chart specs and the library bundle."""

from __future__ import annotations

from deepledger import paths
from deepledger.report import charts, page


def test_the_prerendered_chart_specs_are_what_altair_renders_now():
    """assets/charts.json is rendered from charts.py; after a chart changes, render it
    again with: python -m deepledger.report.charts"""
    assert page._asset(page.PRERENDERED_CHARTS) == charts.prerendered_text()


def test_the_chart_library_is_made_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path))
    page.chart_library.cache_clear()
    cached = page.bundle_cache_path(page.vega_lite_version())
    assert tmp_path in cached.parents and not cached.exists()
    try:
        made = page.chart_library()
        assert "vegaEmbed" in made and cached.read_text() == made
        page.chart_library.cache_clear()
        cached.write_text("window.vegaEmbed = 'from the cache';")
        assert page.chart_library() == "window.vegaEmbed = 'from the cache';"
        page.chart_library.cache_clear()
        cached.write_text("truncated")  # not a bundle: made again
        assert page.chart_library() == made
    finally:
        page.chart_library.cache_clear()  # later tests get the real bundle
