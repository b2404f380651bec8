"""Ingest by URL against a real HTTP server on 127.0.0.1: the User-Agent is sent, failures are clear."""

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import scratch_config
from dspy_rag.documents import MAX_FILE_BYTES, download
from dspy_rag.errors import UserError
from dspy_rag.index import Index

PAGE = b"<html><body><h1>Filing</h1><p>ITEM 1A. RISK FACTORS</p><p>Competition is intense.</p></body></html>"


@pytest.fixture()
def server() -> Iterator[tuple[str, list[str]]]:
    agents: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            agents.append(self.headers.get("User-Agent", ""))
            if self.path == "/missing.htm":
                self.send_error(404)
                return
            if self.path == "/huge.htm":  # announces more than any document may hold
                self.send_response(200)
                self.send_header("Content-Length", str(MAX_FILE_BYTES + 1))
                self.end_headers()
                return
            if self.path == "/trickle.htm":  # a byte at a time, each well inside the per-read timeout
                self.send_response(200)
                self.end_headers()
                try:
                    for byte in PAGE * 50:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.05)
                except OSError:
                    pass  # the client gave up, as it should
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", agents
    httpd.shutdown()


def test_a_url_is_downloaded_with_the_configured_user_agent(tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, agents = server
    index = Index(scratch_config(tmp_path, **{"ingest.user_agent": "Jane Analyst jane@example.com"}))
    report = index.ingest([f"{base}/filing"])
    assert report.added == [f"{base}/filing"]
    assert agents == ["Jane Analyst jane@example.com"]
    assert any("Competition is intense." in chunk.text for chunk in index.chunks())


def test_an_http_error_names_a_local_file_to_ingest_instead(tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, _ = server
    with pytest.raises(UserError, match="ingest the local file"):
        Index(scratch_config(tmp_path)).ingest([f"{base}/missing.htm"])
    assert not Index(scratch_config(tmp_path)).exists


def test_a_server_that_trickles_its_bytes_is_given_up_at_the_deadline_with_progress(
        server: tuple[str, list[str]]) -> None:
    base, _ = server
    heard: list[int] = []
    started = time.monotonic()
    with pytest.raises(UserError, match=r"in 1 s and is not done"):
        download(f"{base}/trickle.htm", "agent", timeout=5.0, deadline=1.0, progress=lambda done, _: heard.append(done))
    assert time.monotonic() - started < 4 and heard and heard == sorted(heard)


def test_a_download_announcing_more_than_the_cap_is_refused_before_reading(tmp_path: Path,
                                                                          server: tuple[str, list[str]]) -> None:
    base, _ = server
    with pytest.raises(UserError, match="larger than 200 MB"):
        Index(scratch_config(tmp_path)).ingest([f"{base}/huge.htm"])
