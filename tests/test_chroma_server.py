"""The index against a real Chroma server (`chroma run` on 127.0.0.1), configured by URL alone."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port, run_cli, running_server, scratch_config
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.retrieval import Retriever

CHROMA = str(Path(sys.executable).parent / "chroma")


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    url = f"http://127.0.0.1:{port}"
    with running_server([CHROMA, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
                        f"{url}/api/v2/heartbeat"):
        yield url


def notes(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.md").write_text(f"# Sales\n{body}\n\n# Risks\nCompetitors may copy our gadgets.\n")
    return folder / "notes.md"


@pytest.mark.slow
def test_ingest_and_search_through_the_server(chroma_url: str, tmp_path: Path) -> None:
    config = scratch_config(tmp_path, **{"index.chroma_url": chroma_url})
    Index(config).ingest([str(notes(tmp_path / "docs", "Widgets are sold in Norway."))])
    index = Index(config)
    assert not (tmp_path / "index" / "chroma").exists()  # vectors live on the server, not in the folder
    assert index.catalog.collection.startswith("documents-")
    top = Retriever(index).search("where are widgets sold", "vector")
    assert top[0].text.startswith("# Sales") and "Norway" in top[0].text


@pytest.mark.slow
def test_two_index_folders_share_a_server_without_mixing(chroma_url: str, tmp_path: Path) -> None:
    first = scratch_config(tmp_path / "one", **{"index.chroma_url": chroma_url})
    second = scratch_config(tmp_path / "two", **{"index.chroma_url": chroma_url})
    Index(first).ingest([str(notes(tmp_path / "a", "Widgets are sold in Norway."))])
    Index(second).ingest([str(notes(tmp_path / "b", "Gizmos are sold in Chile."))])
    one, two = Index(first), Index(second)
    assert one.catalog.collection != two.catalog.collection
    assert all("Gizmos" not in p.text for p in Retriever(one).search("gizmos chile", "vector"))
    assert all("Widgets" not in p.text for p in Retriever(two).search("widgets norway", "vector"))


@pytest.mark.slow
def test_the_cli_works_against_the_server(chroma_url: str, tmp_path: Path) -> None:
    notes(tmp_path, "Widgets are sold in Norway.")
    result = run_cli("ingest", "notes.md", "--json", cwd=tmp_path, env={"DSPY_RAG_INDEX_CHROMA_URL": chroma_url})
    assert result.returncode == 0, result.stderr
    assert '"chunks_total": 2' in result.stdout


def test_a_server_that_is_down_is_a_clear_error(tmp_path: Path) -> None:
    config = scratch_config(tmp_path, **{"index.chroma_url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(UserError, match="Chroma server"):
        Index(config).ingest([str(notes(tmp_path / "docs", "Widgets."))])
    assert not Index(config).exists
