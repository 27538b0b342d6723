"""A ProxyCommand for tests, as `nc HOST PORT` or `ssh -W` would be: stdin -> HOST:PORT -> stdout.

    python tcp_relay.py LOG HOST PORT [WORD...]

appends "<its pid> HOST PORT WORD..." to LOG first, so a test sees that (and how) it ran."""

import os
import shlex
import socket
import sys
import threading


def proxy_command(log, *words: str) -> str:
    """The ProxyCommand line that runs this relay with this python, e.g. words "%h", "%p"."""
    return " ".join([shlex.join([sys.executable, os.path.abspath(__file__), str(log)]), *words])


def main() -> None:
    log, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(log, "a") as out:
        out.write(" ".join([str(os.getpid()), *sys.argv[2:]]) + "\n")
    sock = socket.create_connection((host, port), timeout=10)
    sock.settimeout(None)

    def upstream() -> None:
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True).start()
    while data := sock.recv(65536):
        os.write(1, data)


if __name__ == "__main__":
    main()
