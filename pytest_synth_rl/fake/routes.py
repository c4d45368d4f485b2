"""The fake backend's route table: path shapes, methods, and their names.

Matching splits the path into segments once and compares them against a handful of tuples, which
is both faster than regexes and lets a miss explain itself: an unknown path yields the list of
routes that do exist, a known path with the wrong method yields a 405 with ``Allow``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROUTES", "Route", "RouteMatch", "match_route", "route_listing"]


@dataclass(frozen=True)
class Route:
    """One API route: ``name`` is what faults and the request log call it."""

    method: str
    template: str
    name: str

    @property
    def segments(self) -> tuple[str, ...]:
        return _SEGMENTS[self.template]


@dataclass(frozen=True)
class RouteMatch:
    route: Route | None
    job_id: str | None
    allowed: tuple[str, ...] = ()


# Relative to the API root (``/api`` for ``https://api.usesynth.ai``).
ROUTES: tuple[Route, ...] = (
    Route("POST", "/rl/jobs", "submit"),
    Route("GET", "/rl/jobs", "list"),
    Route("GET", "/rl/jobs/{job_id}", "status"),
    Route("POST", "/rl/jobs/{job_id}/cancel", "cancel"),
    Route("POST", "/rl/jobs/{job_id}/start", "start"),
    Route("GET", "/rl/jobs/{job_id}/events", "events"),
    Route("GET", "/rl/jobs/{job_id}/events/stream", "events_stream"),
    Route("GET", "/rl/jobs/{job_id}/metrics", "metrics"),
    Route("GET", "/rl/jobs/{job_id}/timeline", "timeline"),
    Route("GET", "/learning/jobs/{job_id}", "status"),
    Route("GET", "/learning/jobs/{job_id}/events", "events"),
    Route("GET", "/learning/jobs/{job_id}/metrics", "metrics"),
    Route("GET", "/learning/jobs/{job_id}/timeline", "timeline"),
    Route("GET", "/orchestration/jobs/{job_id}", "status"),
    Route("GET", "/orchestration/jobs/{job_id}/events", "events"),
    Route("POST", "/rl/verify_task_app", "verify_task_app"),
    Route("GET", "/v1/crypto/public-key", "public_key"),
    Route("POST", "/v1/env-keys", "env_keys"),
    Route("GET", "/v1/env-keys/verify", "env_keys_verify"),
)

_SEGMENTS: dict[str, tuple[str, ...]] = {r.template: tuple(r.template.strip("/").split("/")) for r in ROUTES}

# Index by segment count for a quick first cut.
_BY_LENGTH: dict[int, list[Route]] = {}
for _route in ROUTES:
    _BY_LENGTH.setdefault(len(_route.segments), []).append(_route)


def _fit(template: tuple[str, ...], parts: list[str]) -> str | bool:
    """Return the job id (or True when no id) if *parts* fits *template*, else False."""
    job_id: str | None = None
    for want, got in zip(template, parts, strict=True):
        if want == "{job_id}":
            if not got:
                return False
            job_id = got
        elif want != got:
            return False
    return job_id if job_id is not None else True


_CACHE: dict[tuple[str, str], RouteMatch | None] = {}
_CACHE_LIMIT = 4096


def match_route(method: str, relative_path: str) -> RouteMatch | None:
    """Find the route for *relative_path* (below the API root). None if the path is unknown.

    A known path with an unsupported method returns a match with ``route=None`` and the allowed
    methods filled in. Results are memoised: a polling client asks about the same path over and
    over.
    """
    key = (method, relative_path)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    found = _match(method, relative_path)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = found
    return found


def _match(method: str, relative_path: str) -> RouteMatch | None:
    parts = relative_path.strip("/").split("/")
    candidates = _BY_LENGTH.get(len(parts))
    if not candidates:
        return None
    allowed: list[str] = []
    job_for_allowed: str | None = None
    for route in candidates:
        fit = _fit(route.segments, parts)
        if fit is False:
            continue
        job_id = fit if isinstance(fit, str) else None
        if route.method == method:
            return RouteMatch(route, job_id)
        allowed.append(route.method)
        job_for_allowed = job_id
    if allowed:
        return RouteMatch(None, job_for_allowed, tuple(sorted(set(allowed))))
    return None


def route_listing(api_root: str) -> list[str]:
    """Human-readable ``METHOD /path`` lines, for 404 bodies and strict-mode errors."""
    root = api_root.rstrip("/")
    return [f"{r.method} {root}{r.template}" for r in ROUTES]
