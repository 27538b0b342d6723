"""A ProxyCommand (~/.ssh/config) as the socket of an SSH connection, run as OpenSSH runs it."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import tempfile


class ShellProxyCommand:
    """The socket paramiko's Transport needs (send, recv, settimeout, close, _closed), over a command's stdin
    and stdout. Unlike paramiko.ProxyCommand: run by the shell (`$SHELL -c "exec COMMAND"`, so pipes
    and quotes mean what they mean to ssh), its exit read as EOF (paramiko's spins until the
    timeout), its stderr kept for the error, and the process reaped on close."""

    def __init__(self, command: str):
        self.cmd, self.timeout = [os.environ.get("SHELL") or "/bin/sh", "-c", "exec " + command], None
        self._stderr = tempfile.TemporaryFile()  # outlives close(): exit_reason reads it after the transport closed us
        self._stopped = self._eof = False
        self.process = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, bufsize=0)

    @property
    def _closed(self) -> bool:  # what Transport.stop_thread asks of its socket
        return self.process.returncode is not None

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def send(self, data: bytes) -> int:
        return os.write(self.process.stdin.fileno(), data)  # OSError (it exited): the transport's EOF

    def recv(self, size: int) -> bytes:
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        if not ready:
            raise socket.timeout()
        data = os.read(self.process.stdout.fileno(), size)
        self._eof = self._eof or not data
        return data

    def close(self) -> None:
        if self._eof:  # it closed its output: it is ending by itself, and its exit status is the reason
            self._wait(1)
        if self.process.poll() is None:
            self._stopped = True
            self.process.terminate()  # our own child, by its pid
            if not self._wait(5):
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            pipe.close()

    def exit_reason(self, wait_s: float) -> str | None:
        """Why the command ended by itself ("exited 1: <last stderr line>"), or None if it still runs
        after wait_s or we stopped it."""
        if not self._wait(wait_s) or self._stopped:
            return None
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:]
        return f"exited {self.process.returncode}" + (f": {tail[0]}" if tail else "")

    def _wait(self, seconds: float) -> bool:
        try:
            self.process.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False
