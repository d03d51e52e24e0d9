"""A reward server on loopback for the ``http`` reward's tests (conductor/verifiers/http_reward.py has the
wire contract), run on a thread of the test process, reachable from Ray actors at 127.0.0.1.

It scores an item ``CORRECT`` when the response's stated answer (its last line, less ``Answer:`` or
``####``) is the reference and ``WRONG`` otherwise: not 0, so an answer scored 0 was never scored by it.
It injects faults deterministically by seed:
- of every ``period`` POSTs (in the order they arrive) one, at a seeded place, fails as a whole, the kinds
  taking turns: ``BATCH_FAULTS`` (a hang past the client's timeout, a 500, a 503, a body that is not JSON,
  a scores list one short). A retry is another POST, so it is answered on its own turn.
- an item whose (seed, id, response) hashes under ``item_fault_rate`` is never judged: its score is null,
  NaN, 1.5 or "yes", every time it is asked (``ITEM_FAULTS``; ``item_fault`` says which items), so it can
  only be an infrastructure error; so is every answer to a question in ``unjudged_ids``.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

CORRECT, WRONG = 1.0, 0.2
BATCH_FAULTS = ("hang", "http_500", "http_503", "garbage", "wrong_length")
ITEM_FAULTS = (None, float("nan"), 1.5, "yes")


def stated_answer(response: str) -> str:
    last = response.strip().splitlines()[-1] if response.strip() else ""
    return last.replace("####", "").replace("Answer:", "").strip()


def true_score(reference: str, response: str) -> float:
    return CORRECT if stated_answer(response) == reference.strip() else WRONG


class FaultyRewardServer:
    """``with FaultyRewardServer(seed) as server: server.url``. What it saw: ``requests`` (each POST's
    items, faulted ones too), ``headers_seen`` (each POST's, lower-case names), ``faults`` (kind, ids)."""

    def __init__(self, seed: int = 0, period: int = 10, item_fault_rate: float = 0.05, hang_s: float = 10.0,
                 api_key: Optional[str] = None, refuse_status: Optional[int] = None):
        self.seed, self.period, self.item_fault_rate, self.hang_s = seed, period, item_fault_rate, hang_s
        self.api_key, self.refuse_status = api_key, refuse_status
        self.unjudged_ids: set[str] = set()
        self.requests: list[list[dict[str, Any]]] = []
        self.faults: list[tuple[str, tuple[str, ...]]] = []
        self.headers_seen: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/score"

    def __enter__(self) -> FaultyRewardServer:
        threading.Thread(target=self._http.serve_forever, name="reward-server", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closing.set()  # hung requests return at once
        self._http.shutdown()
        self._http.server_close()

    def fault_counts(self) -> Counter:
        return Counter(kind for kind, _ in self.faults)

    def batch_fault(self, number: int) -> Optional[str]:
        """The fault of the ``number``-th POST (0-based), if any."""
        block, place = divmod(number, self.period)
        if place != random.Random(f"{self.seed}:{block}").randrange(self.period):
            return None
        return BATCH_FAULTS[block % len(BATCH_FAULTS)]

    def item_fault(self, item: dict[str, Any]) -> tuple[bool, Any]:
        """(True, the bad score) for an item (its ``id`` and ``response``) the server never judges."""
        if item["id"] in self.unjudged_ids:
            return True, None
        digest = hashlib.sha256(f"{self.seed}\0{item['id']}\0{item['response']}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        if draw >= self.item_fault_rate:
            return False, None
        return True, ITEM_FAULTS[digest[8] % len(ITEM_FAULTS)]

    def answer(self, items: list[dict[str, Any]], headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for one POST."""
        with self._lock:
            number = len(self.requests)
            self.requests.append(items)
            self.headers_seen.append(headers)
        if self.refuse_status is not None:
            return self.refuse_status, {}, b'{"error": "refused"}'
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {}, b'{"error": "bad key"}'
        fault = self.batch_fault(number)
        ids = tuple(item["id"] for item in items)
        if fault is not None:
            with self._lock:
                self.faults.append((fault, ids))
        if fault == "hang":
            self._closing.wait(self.hang_s)
            return 0, {}, b""
        if fault in ("http_500", "http_503"):
            return int(fault[-3:]), {"Retry-After": "0"} if fault == "http_503" else {}, b"overloaded"
        if fault == "garbage":
            return 200, {"Content-Type": "text/html"}, b"<html>scores: 1, 0, 1"
        scores = []
        for item in items:
            faulty, value = self.item_fault(item)
            scores.append(value if faulty else true_score(item["answer"], item["response"]))
        if fault == "wrong_length":
            scores = scores[:-1]
        return 200, {"Content-Type": "application/json"}, json.dumps({"scores": scores}).encode()


def _handler(server: FaultyRewardServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client pools connections

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            items = json.loads(body)["items"]
            status, headers, payload = server.answer(items, {k.lower(): v for k, v in self.headers.items()})
            if status == 0:  # a hang: the client gave up long ago; close without a word
                self.close_connection = True
                return
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr on failure
            pass

    return Handler
