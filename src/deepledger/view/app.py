"""The viewer's web app (Starlette): the list of runs, a run's page and its live data,
a question's journal as it grows, and the form that starts a question.

A bench's page is the static report's page (``report/page.py``), made on request and
told where to fetch the run's data again while the run is live; a ``deepledger run``
folder's page streams its journal (server-sent events). Everything is read from the
run folders as the runs write them: the app writes nothing into them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from deepledger.errors import DeepLedgerError
from deepledger.store.layout import RunLayout
from deepledger.store.locate import RunKind, run_kind
from deepledger.store.lock import run_is_live
from deepledger.view import questions
from deepledger.view.live import signature, whole_lines
from deepledger.view.runs import list_runs, run_id

POLL_SECONDS = 0.5  # how often a question's stream looks for new journal lines
_ASSETS = {
    "view.css": "text/css",
    "view-home.js": "text/javascript",
    "view-question.js": "text/javascript",
}
REFUSED = (
    "Asking questions is off: the viewer is bound to a non-loopback address, and a form "
    "that starts processes must not be open to the network. Start it with "
    "--allow-questions to allow it anyway."
)


@dataclass
class Viewer:
    """What the app serves: the logs folder, and whether questions may be started."""

    logs: Path
    allow_questions: bool = True
    asked: dict[str, questions.Question] = field(default_factory=dict)

    def folder(self, rid: str | None) -> tuple[Path, RunKind | None]:
        """The run folder a request names (``?id=``, its path below the logs folder),
        and its kind (None: a question started here whose run has not begun yet)."""
        if rid is None:
            raise _NotFound("no run named (?id=...)")
        root = (self.logs / rid).resolve()
        if not root.is_relative_to(self.logs):
            raise _NotFound(f"{rid} is not below the logs folder")
        kind = run_kind(root) if root.is_dir() else None
        if kind is None and rid not in self.asked:
            raise _NotFound(f"{rid} is not a run folder under {self.logs}")
        return root, kind


class _NotFound(Exception):
    """A run id that names no run under the logs folder: the request gets a 404."""


def asset(name: str) -> str:
    return resources.files("deepledger.view").joinpath("assets", name).read_text("utf-8")


def create_app(
    logs: Path, *, allow_questions: bool = True, hosts: list[str] | None = None
) -> Starlette:
    """The viewer of the runs under ``logs``. ``hosts``: the only names a request may
    address it by (a page elsewhere whose name was made to point at 127.0.0.1 is
    refused: it would otherwise read the runs, and start questions, as the viewer's own
    page does); None: any."""
    viewer = Viewer(logs.resolve(), allow_questions)

    def home(request: Request) -> Response:
        return HTMLResponse(asset("home.html"))

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "favicon.ico":  # none: asked for by every browser
            return Response(status_code=204)
        if name not in _ASSETS:
            return Response("not found", 404)
        return Response(asset(name), media_type=_ASSETS[name])

    def runs(request: Request) -> Response:
        return JSONResponse(
            {
                "logs": str(viewer.logs),
                "runs": list_runs(viewer.logs),
                "questions": viewer.allow_questions,
                "questions_refused": None if viewer.allow_questions else REFUSED,
            }
        )

    routes = [
        Route("/", home),
        Route("/api/runs", runs),
        Route("/run", partial(_run_page, viewer)),
        Route("/api/run/data", partial(_run_data, viewer)),
        Route("/api/run/events", partial(_journal_events, viewer)),
        Route("/api/questions", partial(_ask, viewer), methods=["POST"]),
        Route("/{name:str}", static),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []
    app = Starlette(routes=routes, middleware=middleware)
    app.state.viewer = viewer
    return app


def _run_page(viewer: Viewer, request: Request) -> Response:
    try:
        root, kind = viewer.folder(request.query_params.get("id"))
    except _NotFound as exc:
        return HTMLResponse(
            f"<p>Not found: {_escape(str(exc))}. <a href='./'>All runs</a></p>", 404
        )
    if kind is None or (kind == "run" and request.query_params.get("as") != "report"):
        return HTMLResponse(asset("question.html"))
    if kind == "run":  # the report's page of a question, as `deepledger report` makes it
        from deepledger.bench.report import current_summary
        from deepledger.report.page import render_run_report

        try:
            return HTMLResponse(render_run_report(root, current_summary(root)))
        except (DeepLedgerError, ValueError, KeyError, TypeError) as exc:
            return HTMLResponse(f"<p>Its journal could not be read: {_escape(str(exc))}</p>", 500)
    from deepledger.report.page import render

    try:
        page, marker = _bench_parts(root)
    except DeepLedgerError as exc:
        return HTMLResponse(f"<p>{_escape(str(exc))} <a href='./'>All runs</a></p>", 500)
    title, payload, packed = page
    live = {
        "data": f"api/run/data?id={quote(run_id(viewer.logs, root))}",
        "signature": marker,
        "home": "./",
    }
    html = render(title, payload, packed)
    # The live mode's settings, for report.js: the first </head> is the page's own (the
    # run's data is in the body, and escaped so that it holds no "<").
    tag = f'<script type="application/json" id="report-live">{json.dumps(live)}</script>'
    return HTMLResponse(html.replace("</head>", f"{tag}\n</head>", 1))


def _bench_parts(root: Path) -> tuple[Any, str]:
    """The run page's parts as the run's files say now, and their signature."""
    from deepledger.bench.report import current_summary
    from deepledger.report.page import run_page_parts

    marker = _marker(root)  # before reading: a write meanwhile shows as a change next time
    return run_page_parts(root, current_summary(root)), marker


def _marker(root: Path) -> str:
    return f"{signature(root)}-{'live' if run_is_live(root) else 'still'}"


def _run_data(viewer: Viewer, request: Request) -> Response:
    """A bench's page data again (``?since=``: nothing, 204, when nothing changed)."""
    try:
        root, kind = viewer.folder(request.query_params.get("id"))
    except _NotFound as exc:
        return JSONResponse({"error": str(exc)}, 404)
    if kind != "bench":
        return JSONResponse({"error": "not a bench run: its journal streams (api/run/events)"}, 400)
    if request.query_params.get("since") == _marker(root):
        return Response(status_code=204)
    try:
        (_, payload, packed), marker = _bench_parts(root)
    except DeepLedgerError as exc:
        return JSONResponse({"error": str(exc)}, 500)
    return JSONResponse({"signature": marker, "data": payload, "packed": packed})


async def _journal_events(viewer: Viewer, request: Request) -> Response:
    rid = request.query_params.get("id")
    try:
        root, kind = viewer.folder(rid)
    except _NotFound as exc:
        return JSONResponse({"error": str(exc)}, 404)
    if kind == "bench":
        return JSONResponse({"error": "a bench run: its page refetches api/run/data"}, 400)
    asked = viewer.asked.get(rid or "")
    return EventSourceResponse(_stream(root, asked))


async def _stream(root: Path, asked: questions.Question | None) -> AsyncIterator[dict[str, str]]:
    """The journal's whole lines as they come, then how the run ended."""
    from deepledger.report.collect import compact_event

    journal = RunLayout(root).run_journal
    offset, status = 0, None
    while True:
        lines, offset = await asyncio.to_thread(whole_lines, journal, offset)
        for line in lines:
            if line.get("event") == "journal_opened":
                continue
            yield {"event": "line", "data": json.dumps(compact_event(line))}
        live = await asyncio.to_thread(run_is_live, root)
        running = live or (asked is not None and asked.process.poll() is None)
        if running and status is None:  # how it ended is the "end" event's
            status = "running"
            yield {"event": "status", "data": status}
        if not running and not lines:
            yield {"event": "end", "data": json.dumps(_ending(root, asked))}
            return
        await asyncio.sleep(POLL_SECONDS)


def _ending(root: Path, asked: questions.Question | None) -> dict[str, str | None]:
    lines, _ = whole_lines(RunLayout(root).run_journal)
    finished = any(line.get("event") == "task_finished" for line in lines)
    detail = asked.failure() if asked is not None else None
    return {"status": "finished" if finished else "stopped", "detail": detail}


async def _ask(viewer: Viewer, request: Request) -> Response:
    if not viewer.allow_questions:
        return JSONResponse({"error": REFUSED}, 403)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return JSONResponse({"error": "send the question as JSON (application/json)"}, 415)
    origin = request.headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
        return JSONResponse({"error": "questions are taken from the viewer's own page"}, 403)
    try:
        body = await request.json()
        started = questions.start(
            viewer.logs, str(body["question"]), str(body.get("overrides") or "")
        )
    except DeepLedgerError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    except (ValueError, KeyError, TypeError) as exc:
        return JSONResponse({"error": f"a JSON object with a question is expected ({exc})"}, 400)
    rid = run_id(viewer.logs, started.run_dir)
    viewer.asked[rid] = started
    return JSONResponse({"id": rid, "url": f"run?id={quote(rid)}"}, 201)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
