"""Requests to the servers sweeper launched never go through an environment proxy (a real HTTP
server on loopback; the proxy variables point at a port where nothing listens)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from sweeper.loadgen.direct import post_direct
from sweeper.profile.control import call_profiler


class Echo(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = json.dumps({"got": json.loads(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def dead_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # discard port: nothing listens
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_plain_requests_would_go_through_the_proxy(server, dead_proxy):
    with pytest.raises(requests.exceptions.ProxyError):
        requests.post(server + "/x", json={"a": 1}, timeout=5)


def test_control_requests_go_direct(server, dead_proxy):
    assert post_direct(server + "/v1/completions", {"a": 1}, 5).json() == {"got": {"a": 1}}
    assert json.loads(call_profiler(server, "/start_profile", {"b": 2}, 5)) == {"got": {"b": 2}}
