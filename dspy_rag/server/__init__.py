"""`dspy-rag serve`: the assistant over HTTP, on FastAPI. It sits on top beside the command line: it opens the
same configuration, answers with the same documents (`Research.run(...).to_json()`) and imports no typer or
rich. `create_app` builds the application; the command line runs it on uvicorn."""

from dspy_rag.server.app import create_app

__all__ = ["create_app"]
