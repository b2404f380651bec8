"""The command that serves the assistant over HTTP (the application is dspy_rag.server)."""

import socket
from typing import Annotated

import typer

from dspy_rag.cli.console import progress
from dspy_rag.cli.options import ConfigOption, IndexOption, ModelOption, config_of
from dspy_rag.errors import UserError


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (taken, or no address of this machine), or None."""
    try:
        with socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET):
            return None
    except OSError as exc:
        return f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host"


def serve(
    config: ConfigOption = None,
    index: IndexOption = None,
    model: ModelOption = None,
    host: Annotated[str | None, typer.Option(help="address to listen on (default serve.host: 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on (default serve.port: 8765)")] = None,
) -> None:
    """Serve the assistant over HTTP: research streamed as server-sent events, OpenAI-compatible chat."""
    import uvicorn

    from dspy_rag.server import create_app

    settings = config_of(config, **{"index.path": index, "lm.model": model, "serve.host": host, "serve.port": port})
    where = settings.serve
    if problem := port_problem(where.host, where.port):
        raise UserError(problem)
    guarded = "with its bearer token" if where.token else "without a token"
    progress(f"serving {settings.lm.model} over {settings.index.path} on http://{where.host}:{where.port} {guarded}")
    uvicorn.run(create_app(settings), host=where.host, port=where.port, log_level="info", server_header=False)
