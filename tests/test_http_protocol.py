"""The endpoint's HTTP protocol (conductor/serving/http_protocol.py) under a real uvicorn server on loopback,
in a thread: connections that never finish their headers are closed after the header timeout, at most
``max_pending`` may wait at once (the oldest goes), oversized headers close the connection, a request
that is not HTTP gets a 400 in OpenAI's shape, and a normal request is untouched."""

import contextlib
import json
import socket
import threading
import time

import httpx
import uvicorn

from conductor.serving.http_protocol import MAX_HEADER_BYTES, header_timeout_protocol


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.contextmanager
def server(header_timeout_s, max_pending, evictable_after_s=0.1):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    protocol = header_timeout_protocol(header_timeout_s, max_pending, evictable_after_s)
    config = uvicorn.Config(hello, log_level="warning", access_log=False, lifespan="off", http=protocol)
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1], protocol
    finally:
        running.should_exit = True
        thread.join(10)
        sock.close()


def closed(sock, wait_s):
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_connection_that_never_finishes_its_headers_is_closed_after_the_timeout():
    with server(header_timeout_s=0.5, max_pending=100) as (port, _):
        silent = socket.create_connection(("127.0.0.1", port))
        trickle = socket.create_connection(("127.0.0.1", port))
        trickle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert closed(silent, 30) and closed(trickle, 30)
        assert 0.3 < time.monotonic() - started < 20
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "ok"


def test_past_the_cap_the_connection_waiting_longest_is_closed():
    with server(header_timeout_s=600, max_pending=4) as (port, protocol):
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        deadline = time.monotonic() + 20  # their wait counts from the server's accept, not the client's connect
        while len(protocol.pending) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)  # past evictable_after_s: now they are slow, not a burst
        sockets += [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        assert closed(sockets[0], 10) and closed(sockets[1], 10)
        assert not any(closed(sock, 0.2) for sock in sockets[2:])  # the header timeout is 10 minutes away
        with httpx.Client() as client:  # a request's headers arrive at once: it is served, and evicts the oldest
            assert client.get(f"http://127.0.0.1:{port}/", timeout=10).text == "ok"
        assert closed(sockets[2], 10)
        for sock in sockets:
            sock.close()


def test_keep_alive_requests_are_not_held_to_the_header_cap():
    with server(header_timeout_s=600, max_pending=1) as (port, _):
        with httpx.Client() as client:  # one connection, many requests: never waiting long for headers
            assert all(client.get(f"http://127.0.0.1:{port}/", timeout=10).text == "ok" for _ in range(20))


def test_an_oversized_request_line_closes_the_connection_and_garbage_gets_a_json_400():
    with server(header_timeout_s=600, max_pending=100) as (port, _):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            try:
                sock.sendall(b"GET /" + b"a" * (MAX_HEADER_BYTES + 1024))
            except OSError:
                pass  # closed while we were still writing
            assert closed(sock, 10)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            sock.settimeout(10)
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["code"] == "invalid_http"


def test_a_burst_of_new_connections_past_the_cap_evicts_nobody():
    with server(header_timeout_s=600, max_pending=2, evictable_after_s=60) as (port, _):
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
        assert not any(closed(sock, 0.2) for sock in sockets)
        for sock in sockets:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            sock.close()


def test_a_large_body_in_the_same_read_as_its_headers_is_not_counted_as_headers():
    with server(header_timeout_s=600, max_pending=100) as (port, _):
        body = b"x" * (4 * MAX_HEADER_BYTES)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                         + body)
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
