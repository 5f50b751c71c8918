"""Loaded into the daemon under test (PYTHONPATH): records every attempt to connect anywhere but
loopback or a local socket, and refuses it. The test then asserts the record is empty."""

import ipaddress
import os
import socket

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _check(addr):
    if isinstance(addr, tuple) and addr:
        host = addr[0]
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = host == "localhost"
        if not ok:
            with open(os.environ["CLAWD_NETGUARD_LOG"], "a") as f:
                f.write(f"{addr!r}\n")
            raise OSError("outbound connection blocked by the test's network guard")


def connect(self, addr):
    _check(addr)
    return _connect(self, addr)


def connect_ex(self, addr):
    _check(addr)
    return _connect_ex(self, addr)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
