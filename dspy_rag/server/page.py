"""The web page: `/` researches a question as the steps arrive and opens the passages its answer cites,
`/history` plots the metric across recompiles. Plain HTML, CSS and JavaScript shipped with the package (no build
step, nothing from a CDN: it works offline). Its files hold no data, so they alone are open without the token;
the page sends the token on every call for data."""

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.exceptions import HTTPException

FOLDER = Path(__file__).parent / "page"
PAGES = {"/": "index.html", "/history": "index.html"}  # one document, two views: main.js shows the address's
ASSETS = "/page/"
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
# Scripts and styles from these files only, calls to this server only: text in an answer cannot run as a script.
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "cache-control": "no-cache",
}


def shipped() -> dict[str, Path]:
    """The page's files by the path they are served at."""
    files = {ASSETS + path.name: path for path in FOLDER.iterdir() if path.suffix in (".js", ".css")}
    return files | {route: FOLDER / name for route, name in PAGES.items()}


def public_paths() -> frozenset[str]:
    """The paths a browser reads without the token: the page's own files."""
    return frozenset(shipped())


def add_page(app: FastAPI) -> None:
    """The page's routes: its two addresses and, under /page/, its scripts and style."""
    files = shipped()

    def page(path: Path) -> Callable[[], Awaitable[Response]]:
        async def get() -> Response:
            return served(path)
        return get

    for route in PAGES:
        app.add_api_route(route, page(files[route]), methods=["GET"], include_in_schema=False)

    @app.get(ASSETS + "{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if ASSETS + name not in files:
            raise HTTPException(404, "the page has no such file")
        return served(files[ASSETS + name])


def served(path: Path) -> Response:
    """One of the page's files, read when asked for (an edited file shows on reload)."""
    return Response(path.read_bytes(), media_type=f"{TYPES[path.suffix]}; charset=utf-8", headers=HEADERS)
