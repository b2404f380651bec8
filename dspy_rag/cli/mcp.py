"""The command that serves the assistant to MCP clients (the tools are dspy_rag.server.mcp_tools)."""

import logging
from typing import Annotated

import typer

from dspy_rag.cli.console import progress
from dspy_rag.cli.options import ConfigOption, IndexOption, ModelOption, config_of
from dspy_rag.cli.serve import listen
from dspy_rag.errors import UserError


def mcp_command(
    config: ConfigOption = None,
    index: IndexOption = None,
    model: ModelOption = None,
    http: Annotated[bool, typer.Option("--http", help="serve streamable HTTP at /mcp instead of stdio")] = False,
    host: Annotated[str | None, typer.Option(help="--http: address to listen on (default serve.host: "
                                             "127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="--http: port to listen on (default serve.mcp_port: "
                                             "8766)")] = None,
) -> None:
    """Serve the assistant to MCP clients (desktop assistants, editors): research, search and list_sections tools,
    over stdio (the client starts the command) or streamable HTTP."""
    settings = config_of(config, **{"index.path": index, "lm.model": model, "serve.host": host,
                                    "serve.mcp_port": port})
    # One line a record on stderr (stdout is the stdio transport's); the SDK's own set-up would wrap them.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not http:
        if host is not None or port is not None:
            raise UserError("--host and --port are for --http: add it, or drop them (over stdio the client starts "
                            "the command itself)")
        from dspy_rag.server.mcp_tools import create_mcp

        progress(f"serving {settings.lm.model} over {settings.index.path} to an MCP client on stdio")
        create_mcp(settings).run("stdio")
        return
    from dspy_rag.server.mcp_tools import http_app

    listen(http_app(settings), settings, settings.serve.mcp_port, "/mcp")
