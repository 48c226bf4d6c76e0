"""Helpers for the PyTorch backend tests: a real switch and spawned ranks."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

BIN = os.environ.get("SWITCHML_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Switch:
    """switchml-switch on loopback with kernel-chosen ports."""

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="switchml-test-switch-")
        ports = os.path.join(self.dir, "ports")
        self.proc = subprocess.Popen([os.path.join(BIN, "switchml-switch"), "--bind", "127.0.0.1",
                                      "--control-port", "0", "--data-port", "0",
                                      "--port-file", ports, "--log-level", "warn"])
        deadline = time.time() + 10
        while not os.path.exists(ports):
            if time.time() > deadline or self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError("switchml-switch did not start")
            time.sleep(0.01)
        with open(ports) as f:
            self.address = "127.0.0.1:" + f.read().split()[0]
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
