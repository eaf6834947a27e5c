"""The console's routes (aiohttp): HTML pages, their JSON endpoints, admin forms.

Pages are rendered on the server (Jinja2, autoescaping on: topic names, keys,
values and headers are untrusted).  Each page's ``#live`` section is fetched
again every few seconds by ``static/console.js`` (``?partial=1`` renders only
that section) and its charts are drawn from ``/api/series/...``, which the
sampler's ring buffer answers.  ``/api/health`` drives the banner shown while
no broker answers.

Cluster calls block, so they run on worker threads; a failure becomes an
error banner (the cluster's error code and message) and the console keeps
serving.  POSTs need the process's CSRF token (a random value made at start
and put in every form) and are refused with ``--read-only``; after one, the
browser is sent back to the page (post/redirect/get) with the outcome.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import jinja2
from aiohttp import web
from annal.webconsole import actions, browser, lag_metrics
from annal.webconsole import sampler as sampling
from annal.webconsole.cluster_view import ClusterView

logger = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Console:
    """The console's state: the cluster view, the sampler, settings."""

    view: ClusterView
    sampler: sampling.Sampler
    read_only: bool = False
    csrf: str = ""
    notices: OrderedDict[str, actions.Outcome] | None = None

    def __post_init__(self) -> None:
        self.csrf = self.csrf or secrets.token_urlsafe(32)
        self.notices = OrderedDict()


CONSOLE = web.AppKey("console", Console)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
PLOTLY = web.AppKey("plotly", bytes)


PAGE_TIMEOUT_S = 20.0  # a page answers within this long, whatever the cluster does


class PageTimeout(Exception):
    """The cluster took longer than a page may wait."""


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn`` on a worker thread, waited for at most ``PAGE_TIMEOUT_S`` (the call
    itself finishes in the background: a client's own timeouts end it)."""
    call = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))
    try:
        return await asyncio.wait_for(call, PAGE_TIMEOUT_S)
    except TimeoutError:
        raise PageTimeout(
            f"REQUEST_TIMED_OUT: the cluster did not answer within {PAGE_TIMEOUT_S:.0f} s"
        ) from None


def _describe(exc: BaseException) -> str:
    """An error as the page shows it: the cluster's code and message."""
    return str(exc) or type(exc).__name__


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def render(request: web.Request, page: str, status: int = 200, **context: Any) -> web.Response:
    console = request.app[CONSOLE]
    template = request.app[TEMPLATES].get_template(page)
    notice = None
    if (key := request.query.get("notice")) and console.notices is not None:
        notice = console.notices.get(key)
    context = {"csrf": console.csrf, "read_only": console.read_only, "notice": notice,
               "path": request.path, **context}  # fmt: skip
    if request.query.get("partial") == "1":
        if context.get("error"):  # the page keeps what it showed; the banner explains
            return web.Response(text=context["error"], status=503)
        html = "".join(template.blocks["live"](template.new_context(context)))
    else:
        html = template.render(context)
    return web.Response(text=html, content_type="text/html", status=status)


async def cluster_page(request: web.Request) -> web.Response:
    view = request.app[CONSOLE].view
    try:
        data = await blocking(view.overview)
    except Exception as exc:
        return render(request, "cluster.html", error=_describe(exc), data=None)
    return render(request, "cluster.html", data=data, error=None)


async def topics_page(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    try:
        topics = await blocking(console.view.topics)
    except Exception as exc:
        return render(request, "topics.html", error=_describe(exc), topics=[])
    return render(request, "topics.html", topics=topics, error=None)


async def topic_page(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        topic = await blocking(request.app[CONSOLE].view.topic, name)
    except Exception as exc:
        return render(request, "topic.html", name=name, topic=None, error=_describe(exc))
    return render(request, "topic.html", name=name, topic=topic, error=None)


def _group_lags(console: Console) -> dict[str, int]:
    latest = console.sampler.samples.latest()
    if latest is None:
        return {}
    return {g: sampling.total_lag(latest.end_offsets, c) for g, c in latest.committed.items()}


async def groups_page(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    try:
        groups = await blocking(console.view.groups)
    except Exception as exc:
        return render(request, "groups.html", groups=[], error=_describe(exc), lags={})
    return render(request, "groups.html", groups=groups, error=None, lags=_group_lags(console))


async def group_page(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        group = await blocking(request.app[CONSOLE].view.group, name)
    except Exception as exc:
        return render(request, "group.html", name=name, group=None, error=_describe(exc))
    return render(request, "group.html", name=name, group=group, error=None)


def _browse_args(query: Any) -> dict[str, Any]:
    """The message browser's query (ValueError for a bad one)."""
    out: dict[str, Any] = {"topic": query.get("topic", "").strip()}
    out["partition"] = int(query.get("partition") or 0)
    out["limit"] = int(query.get("limit") or 20)
    out["fmt"] = query.get("format") or "text"
    if (offset := query.get("offset", "").strip()) and query.get("from", "offset") == "offset":
        out["offset"] = int(offset)
    if (when := query.get("timestamp", "").strip()) and query.get("from") == "timestamp":
        out["timestamp_ms"] = browser.parse_time(when)
    return out


async def messages_page(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    result, error = None, None
    try:
        topics = [t["name"] for t in await blocking(console.view.topics)]
    except Exception as exc:
        topics, error = [], _describe(exc)
    if request.query.get("topic") and error is None:
        try:
            args = _browse_args(request.query)
            result = await blocking(browser.browse, console.view.bootstrap, args.pop("topic"),
                                    args.pop("partition"), timeout_s=console.view.timeout_s,
                                    **args)  # fmt: skip
        except Exception as exc:
            error = _describe(exc)
    return render(request, "messages.html", topics=topics, result=result, error=error,
                  query=request.query, formats=browser.FORMATS)  # fmt: skip


# -- JSON ----------------------------------------------------------------------------


def _json_endpoint(fn: Callable[[web.Request], Any]) -> Handler:
    """A GET answering ``fn``'s value as JSON; a failure is ``{"error": ...}`` (502)."""

    async def handler(request: web.Request) -> web.Response:
        try:
            return web.json_response(await blocking(fn, request))
        except Exception as exc:
            return web.json_response({"error": _describe(exc)}, status=502)

    return handler


def _health(request: web.Request) -> dict[str, Any]:
    console = request.app[CONSOLE]
    try:
        console.view.ping()
    except Exception as exc:
        return {"ok": False, "error": _describe(exc), "sampler_error": console.sampler.error}
    return {"ok": True, "error": None, "sampler_error": console.sampler.error}


def _api_groups(request: web.Request) -> list[dict[str, Any]]:
    console = request.app[CONSOLE]
    lags = _group_lags(console)
    return [{**g, "lag": lags.get(g["group"])} for g in console.view.groups()]


def _api_messages(request: web.Request) -> dict[str, Any]:
    view = request.app[CONSOLE].view
    args = _browse_args(request.query)
    return browser.browse(view.bootstrap, args.pop("topic"), args.pop("partition"),
                          timeout_s=view.timeout_s, **args)  # fmt: skip


def _trace(name: str, points: list[sampling.Point]) -> dict[str, Any]:
    return {"name": name, "x": [round(t * 1000) for t, _ in points], "y": [v for _, v in points]}


def _topic_series(request: web.Request) -> dict[str, Any]:
    name = request.match_info["name"]
    samples = request.app[CONSOLE].sampler.samples.items()
    return {"title": f"{name}: produce rate (records/s)",
            "traces": [_trace("produce", sampling.produce_series(samples, name))]}  # fmt: skip


def _group_series(request: web.Request) -> dict[str, Any]:
    name, kind = request.match_info["name"], request.match_info["kind"]
    samples = request.app[CONSOLE].sampler.samples.items()
    if kind == "lag":
        return {"title": f"{name}: total lag (records)",
                "traces": [_trace("lag", sampling.lag_series(samples, name))]}  # fmt: skip
    return {"title": f"{name}: consume rate (records/s)",
            "traces": [_trace("consume", sampling.consume_series(samples, name))]}  # fmt: skip


# -- admin actions ----------------------------------------------------------------------


def _action(page: Callable[[dict[str, str]], str], act: Callable[[Console, Any], Any]) -> Handler:
    """A POST form: CSRF-checked, refused when read-only; the outcome shown on ``page``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        console = request.app[CONSOLE]
        form = await request.post()
        fields = {k: str(v) for k, v in form.items()}
        if not hmac.compare_digest(fields.get("csrf", ""), console.csrf):
            return web.Response(text="403: missing or wrong CSRF token", status=403)
        if console.read_only:
            outcome = actions.Outcome(False, "The console is read-only (--read-only): "
                                      "no changes are made.")  # fmt: skip
        else:
            try:
                outcome = await blocking(act, console, fields)
            except Exception as exc:
                outcome = actions.refused(exc)
        key = secrets.token_urlsafe(8)
        assert console.notices is not None
        console.notices[key] = outcome
        while len(console.notices) > 200:
            console.notices.popitem(last=False)
        logger.info("action %s: %s", request.path, "done" if outcome.ok else "refused")
        raise web.HTTPSeeOther(f"{page(fields)}?notice={key}")

    return handler


def _int(fields: dict[str, str], name: str, default: int | None = None) -> int:
    text = fields.get(name, "").strip()
    if not text:
        if default is None:
            raise ValueError(f"{name} is needed")
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {text!r}") from None


def _create(console: Console, f: dict[str, str]) -> actions.Outcome:
    partitions, rf = _int(f, "partitions", -1), _int(f, "replication_factor", -1)
    return actions.create_topic(console.view.actions_admin, f.get("name", ""), partitions, rf,
                                f.get("configs", ""))  # fmt: skip


def _alter(console: Console, f: dict[str, str]) -> actions.Outcome:
    return actions.alter_config(console.view.actions_admin, f["topic"], f.get("config", ""),
                                f.get("value", ""), f.get("delete") == "1")  # fmt: skip


def _reset(console: Console, f: dict[str, str]) -> actions.Outcome:
    offset = _int(f, "offset") if f.get("to") == "offset" else None
    return actions.reset_offsets(console.view.bootstrap, console.view.zk(), f["group"],
                                 f.get("topic", ""), f.get("to", ""), offset)  # fmt: skip


def _elect(console: Console, f: dict[str, str]) -> actions.Outcome:
    return actions.elect_preferred(console.view.actions_admin, f.get("topic", "").strip() or None)


def _topic_url(f: dict[str, str]) -> str:
    return f"/topics/{quote(f['topic'], safe='')}" if f.get("topic") else "/topics"


def _group_url(f: dict[str, str]) -> str:
    return f"/groups/{quote(f.get('group', ''), safe='')}"


# -- the application ---------------------------------------------------------------------


async def metrics(request: web.Request) -> web.Response:
    """Consumer-group lag for Prometheus (``lag_metrics.py``)."""
    body = lag_metrics.exposition(request.app[CONSOLE].sampler)
    return web.Response(body=body, content_type="text/plain", charset="utf-8",
                        headers={"X-Prometheus-Format": "0.0.4"})  # fmt: skip


async def plotly_js(request: web.Request) -> web.Response:
    return web.Response(body=request.app[PLOTLY], content_type="application/javascript",
                        headers={"Cache-Control": "max-age=86400"})  # fmt: skip


@web.middleware
async def headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def make_app(console: Console) -> web.Application:
    from plotly.offline import get_plotlyjs

    app = web.Application(middlewares=[headers])
    app[CONSOLE] = console
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined,
    )  # fmt: skip
    env.filters["bytes"] = fmt_bytes
    env.filters["q"] = lambda text: quote(str(text), safe="")
    app[TEMPLATES] = env
    app[PLOTLY] = get_plotlyjs().encode("utf-8")
    app.router.add_get("/", cluster_page)
    app.router.add_get("/topics", topics_page)
    app.router.add_get("/topics/{name}", topic_page)
    app.router.add_get("/groups", groups_page)
    app.router.add_get("/groups/{name}", group_page)
    app.router.add_get("/messages", messages_page)
    app.router.add_get("/api/health", _json_endpoint(_health))
    app.router.add_get("/api/cluster", _json_endpoint(lambda r: r.app[CONSOLE].view.overview()))
    app.router.add_get("/api/topics", _json_endpoint(lambda r: r.app[CONSOLE].view.topics()))
    app.router.add_get("/api/topics/{name}", _json_endpoint(
        lambda r: r.app[CONSOLE].view.topic(r.match_info["name"])))  # fmt: skip
    app.router.add_get("/api/groups", _json_endpoint(_api_groups))
    app.router.add_get("/api/groups/{name}", _json_endpoint(
        lambda r: r.app[CONSOLE].view.group(r.match_info["name"])))  # fmt: skip
    app.router.add_get("/api/messages", _json_endpoint(_api_messages))
    app.router.add_get("/api/series/topic/{name}", _json_endpoint(_topic_series))
    app.router.add_get("/api/series/group/{name}/{kind:lag|consume}",
                       _json_endpoint(_group_series))  # fmt: skip
    app.router.add_post("/actions/create-topic", _action(lambda f: "/topics", _create))
    app.router.add_post("/actions/alter-config", _action(_topic_url, _alter))
    app.router.add_post("/actions/elect-leaders", _action(_topic_url, _elect))
    app.router.add_post("/actions/reset-offsets", _action(_group_url, _reset))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/static/plotly.js", plotly_js)
    app.router.add_static("/static", HERE / "static")
    return app
