"""The command that serves the assistant over HTTP (the application is dspy_rag.server)."""

import socket
from typing import Annotated, Any

import typer

from dspy_rag.cli.console import progress
from dspy_rag.cli.options import ConfigOption, IndexOption, ModelOption, config_of
from dspy_rag.config import Config
from dspy_rag.errors import UserError


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (taken, or no address of this machine), or None."""
    try:
        with socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET):
            return None
    except OSError as exc:
        return f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host"


def listen(app: Any, settings: Config, port: int, path: str = "") -> None:
    """Run `app` on uvicorn at serve.host:port, after one line saying what it serves where (`path`: its route)."""
    import uvicorn

    host = settings.serve.host
    if problem := port_problem(host, port):
        raise UserError(problem)
    guarded = "with its bearer token" if settings.serve.token else "without a token"
    progress(f"serving {settings.lm.model} over {settings.index.path} on http://{host}:{port}{path} {guarded}")
    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False)


def serve(
    config: ConfigOption = None,
    index: IndexOption = None,
    model: ModelOption = None,
    host: Annotated[str | None, typer.Option(help="address to listen on (default serve.host: 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on (default serve.port: 8765)")] = None,
) -> None:
    """Serve the assistant over HTTP: research streamed as server-sent events, OpenAI-compatible chat."""
    from dspy_rag.server import create_app

    settings = config_of(config, **{"index.path": index, "lm.model": model, "serve.host": host, "serve.port": port})
    listen(create_app(settings), settings, settings.serve.port)
