"""A shared index (dspy_rag.shared_index) between processes with separate folders and one real `chroma run`.

Process A ingests with the CLI into its folder; process B has an empty folder of its own and only the server's
URL and the index's name, and must retrieve what A does; a killed writer leaves B reading the last commit, and a
second writer is refused while the first holds the lease.
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import chromadb
import pytest
from chromadb.config import Settings

from conftest import free_port, running_server, user_environment
from dspy_rag.server_lease import LEASE
from dspy_rag.shared_index import catalog_name

CHROMA = str(Path(sys.executable).parent / "chroma")
CLI = "import sys; sys.argv[0] = 'dspy-rag'; from dspy_rag.cli import main; main()"
# Process B: the passage ids each strategy returns for each query, read through the index folder argv[1].
SEARCH = """
import json, sys
from dspy_rag.config import load_config
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever
index = Index(load_config(overrides={"index.path": sys.argv[1], "index.collection": sys.argv[2]})).require()
retriever = Retriever(index)
print(json.dumps({q: {s: [p.id for p in retriever.search(q, s)] for s in ("keyword", "vector", "hybrid")}
                  for q in sys.argv[3:]}))
"""
QUERIES = ["What was NVIDIA's Data Center revenue in fiscal year 2023?", "risks from export controls to China",
           "Widgets are sold in Norway"]


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running_server([CHROMA, "run", "--path", str(tmp_path_factory.mktemp("chroma")), "--host", "127.0.0.1",
                         "--port", str(port)], f"{url}/api/v2/heartbeat"):
        yield url


def environment(url: str, collection: str = "documents") -> dict[str, str]:
    """Only the server's URL, and the index's name on it."""
    return user_environment({"DSPY_RAG_INDEX_CHROMA_URL": url, "DSPY_RAG_INDEX_COLLECTION": collection})


def dspy_rag(*args: str, cwd: Path, url: str, collection: str = "documents") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, env=environment(url, collection),
                          capture_output=True, text=True, timeout=1800)


def ingest(url: str, folder: Path, *files: str, collection: str = "documents") -> str:
    """Process A: ingest into `folder`; the index's name on the server, as `ingest` reports it."""
    done = dspy_rag("ingest", *files, "--json", "--index", str(folder), cwd=folder.parent, url=url,
                    collection=collection)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["collection"]


def search(url: str, folder: Path, name: str, queries: list[str]) -> dict[str, dict[str, list[str]]]:
    """Process B: search the index `name` through `folder`."""
    done = subprocess.run([sys.executable, "-c", SEARCH, str(folder), name, *queries], env=environment(url),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def notes(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.md").write_text("# Sales\nWidgets are sold in Norway.\n\n# Risks\nCompetitors may copy gadgets.\n")
    return folder / "notes.md"


def vectors(url: str, name: str) -> int:
    host, port = url.removeprefix("http://").split(":")
    client = chromadb.HttpClient(host=host, port=int(port), settings=Settings(anonymized_telemetry=False))
    return client.get_collection(name).count()


def mirror_files(folder: Path) -> dict[str, tuple[int, int]]:
    """The files a pull writes (a reader's SQLite also touches the `-shm` index, but writes no data)."""
    return {f.name: (f.stat().st_mtime_ns, f.stat().st_size) for f in folder.glob("catalog.sqlite3*")
            if not f.name.endswith("-shm")}


@pytest.mark.slow
def test_a_second_process_with_an_empty_folder_retrieves_what_the_first_built(
        chroma_url: str, tmp_path: Path, tenk_filing: Path) -> None:
    name = ingest(chroma_url, tmp_path / "a", str(tenk_filing), str(notes(tmp_path / "docs")))
    assert name.startswith("documents-")
    built = search(chroma_url, tmp_path / "a", name, QUERIES)  # A's own catalog, as its ingest committed it
    read = search(chroma_url, tmp_path / "b", name, QUERIES)  # B pulls its mirror from the server
    assert read == built and all(built[q]["keyword"] and built[q]["vector"] for q in QUERIES)
    cached = mirror_files(tmp_path / "b")
    assert search(chroma_url, tmp_path / "b", name, QUERIES[:1]) == {QUERIES[0]: built[QUERIES[0]]}
    assert mirror_files(tmp_path / "b") == cached  # the server's commit did not move: nothing pulled again


@pytest.mark.slow
def test_a_killed_writer_leaves_the_last_commit_and_a_second_writer_is_refused(
        chroma_url: str, tmp_path: Path, tenk_filing: Path) -> None:
    name = ingest(chroma_url, tmp_path / "a", str(notes(tmp_path / "docs")))
    before = search(chroma_url, tmp_path / "b", name, QUERIES)
    writer = subprocess.Popen([sys.executable, "-c", CLI, "ingest", str(tenk_filing), "--index", str(tmp_path / "w")],
                              env=environment(chroma_url, name), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900
        while vectors(chroma_url, name) <= 2:  # until it wrote vectors it has not committed
            assert writer.poll() is None and time.monotonic() < deadline, "the writer stopped before writing"
            time.sleep(0.2)
        writer.send_signal(signal.SIGSTOP)  # held before its commit; its lease lasts LEASE s from the last renewal
        refused = dspy_rag("ingest", str(notes(tmp_path / "more")), "--index", str(tmp_path / "c"), cwd=tmp_path,
                           url=chroma_url, collection=name)
        assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"another ingest ({os.uname().nodename} pid {writer.pid}) is writing to the index {name}" in \
            refused.stderr
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert search(chroma_url, tmp_path / "b", name, QUERIES) == before  # B reads the last commit
    assert search(chroma_url, tmp_path / "fresh", name, QUERIES) == before
    time.sleep(LEASE)  # the killed writer's lease expires: the next writer takes over and sweeps its vectors
    (tmp_path / "more" / "notes.md").write_text("# Plans\nGizmos will be sold in Chile.\n")
    ingest(chroma_url, tmp_path / "c", str(tmp_path / "more" / "notes.md"), collection=name)
    assert vectors(chroma_url, name) == 3
    after = search(chroma_url, tmp_path / "b", name, ["gizmos chile"])
    assert len(after["gizmos chile"]["keyword"]) == 1


@pytest.mark.slow
def test_two_indexes_on_one_server_do_not_collide_and_a_wrong_name_is_one_line(chroma_url: str, tmp_path: Path
                                                                               ) -> None:
    first = ingest(chroma_url, tmp_path / "one", str(notes(tmp_path / "docs")))
    second = ingest(chroma_url, tmp_path / "two", str(notes(tmp_path / "docs")))
    assert first != second and catalog_name(first) != catalog_name(second)
    done = subprocess.run([sys.executable, "-c", SEARCH, str(tmp_path / "b"), "documents", "widgets"],
                          env=environment(chroma_url), capture_output=True, text=True, timeout=600)
    assert "holds no index named 'documents'" in done.stderr


@pytest.fixture
def not_chroma() -> Iterator[str]:
    """An HTTP server that answers every request with a 404 page: a URL that reaches something else."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/nothing-here/"
    finally:
        server.shutdown()


def test_a_server_that_is_down_or_no_chroma_is_one_line(tmp_path: Path, not_chroma: str) -> None:
    for url in (f"http://127.0.0.1:{free_port()}", not_chroma):
        done = dspy_rag("ingest", str(notes(tmp_path / "docs")), "--index", str(tmp_path / "b"), cwd=tmp_path, url=url)
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Chroma server" in done.stderr and "Traceback" not in done.stderr
