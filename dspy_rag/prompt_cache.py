"""llama.cpp's KV cache of the last prompt for each system message, kept on disk between processes.

Every call of a DSPy signature starts with the same system message (its instructions and field layout,
~300 tokens). A new `dspy-rag ask` process would re-read it on every call; restoring the state that the
previous process saved lets llama.cpp evaluate only the part of the prompt that differs. The files are
llama.cpp's own session format (magic, version and token count checked by llama.cpp), never pickle.
"""

import ctypes
import hashlib
import os
from pathlib import Path

import llama_cpp

KEEP_FILES = 16  # one per signature in use; each holds a prompt's KV state (~12 KB a token on the 0.5B model)


class PromptCache:
    def __init__(self, folder: Path, model_id: str) -> None:
        self.folder = folder
        self.model_id = model_id
        self.resident: str | None = None  # the system message whose prompt is in the live KV cache

    def _path(self, system: str) -> Path:
        digest = hashlib.sha256(self.model_id.encode() + b"\0" + system.encode()).hexdigest()
        return self.folder / f"{digest[:32]}.kv"

    def restore(self, llama: llama_cpp.Llama, system: str) -> None:
        """Load the saved state for this system message unless the live KV cache already starts with it."""
        path = self._path(system)
        if self.resident == system or not path.is_file():
            return
        capacity = llama.n_ctx()
        tokens = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        if llama_cpp.llama_state_load_file(llama.ctx, str(path).encode(), tokens, capacity, ctypes.byref(count)):
            # A restored prefix is always followed by prompt tokens to decode, so logits are never stale.
            llama.input_ids[: count.value] = tokens[: count.value]
            llama.n_tokens = count.value
            self.resident = system
        else:
            llama.reset()
            path.unlink(missing_ok=True)

    def save(self, llama: llama_cpp.Llama, system: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(system)
        partial = path.with_suffix(f".partial-{os.getpid()}")
        count = llama.n_tokens
        tokens = (llama_cpp.llama_token * count)(*llama.input_ids[:count].tolist())
        if llama_cpp.llama_state_save_file(llama.ctx, str(partial).encode(), tokens, count):
            os.replace(partial, path)
        partial.unlink(missing_ok=True)
        self.resident = system
        for stale in sorted(self.folder.glob("*.kv"), key=lambda f: f.stat().st_mtime)[:-KEEP_FILES]:
            stale.unlink(missing_ok=True)
