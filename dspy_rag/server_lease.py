"""The writer's lease on a shared index: one record on the Chroma server that at most one ingest holds.

Chroma has no transactions, but two of its operations make a lease: `add` of an id that exists is ignored (the
first writer's record stays), and `delete` with a `where` removes a record only while it still holds the token
the caller saw. A holder renews its lease from a thread every few seconds; one that was killed stops renewing,
and its lease is taken over once it expired, so a crashed writer blocks the next one for LEASE seconds at most.
"""

import os
import secrets
import socket
import threading
import time
from typing import Any

from dspy_rag.errors import UserError

LEASE = 30.0  # seconds a lease lasts unrenewed
RENEW = 5.0  # seconds between renewals
LEASE_ID = "lease"
PLACE = [1.0]  # the records of an index's catalog collection need a vector; they all get this one


class Lease:
    """The right to write one shared index, held from `acquire` to `release`."""

    def __init__(self, records: Any, where: str) -> None:
        self.records, self.where = records, where  # `where`: the index and server, as errors name them
        self.token = secrets.token_hex(8)
        self.holder = f"{socket.gethostname()} pid {os.getpid()}"
        self._stop = threading.Event()
        self._lost = False
        self._renewer: threading.Thread | None = None

    def _current(self) -> dict[str, Any] | None:
        found = self.records.get(ids=[LEASE_ID], include=["metadatas"])["metadatas"]
        return found[0] if found else None

    def _record(self) -> dict[str, Any]:
        return {"token": self.token, "holder": self.holder, "expires": time.time() + LEASE}

    def _try(self) -> dict[str, Any]:
        """Take the lease if it is free or expired; the lease as it is then (ours when taken)."""
        current = self._current()
        if current and current["expires"] <= time.time():
            self.records.delete(ids=[LEASE_ID], where={"token": current["token"]})  # only the expired one
            current = None
        if current is None:
            self.records.add(ids=[LEASE_ID], embeddings=[PLACE], metadatas=[self._record()])
            current = self._current() or {}
        return current

    def acquire(self, wait: bool) -> None:
        """Hold the lease, or raise (with `wait`, wait for it) while another writer holds it."""
        while (current := self._try()).get("token") != self.token:
            if not wait:
                left = max(0, round(current.get("expires", 0) - time.time()))
                raise UserError(f"another ingest ({current.get('holder', 'unknown')}) is writing to {self.where}; "
                                f"wait for it to finish (a stopped one's lease expires within {left} s), then retry")
            time.sleep(1.0)
        self._renewer = threading.Thread(target=self._renew, name="dspy-rag lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW):
            try:
                if (self._current() or {}).get("token") != self.token:
                    self._lost = True  # stalled past LEASE and taken over: the next commit is refused
                    return
                self.records.update(ids=[LEASE_ID], metadatas=[self._record()])
            except Exception:  # noqa: BLE001 - a server gone for a moment: the next renewal (or commit) tells
                continue

    def check(self) -> None:
        """Raise when the lease was lost: a writer must not commit after another took over."""
        if self._lost:
            raise UserError(f"this ingest stalled for over {LEASE:.0f} s and another writer took over {self.where}; "
                            "run the ingest again")

    def release(self) -> None:
        self._stop.set()
        if self._renewer:
            self._renewer.join()
        self.records.delete(ids=[LEASE_ID], where={"token": self.token})
