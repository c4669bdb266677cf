"""The isolation parent and child read each other's messages straight from the socket (``isolation.read_message``):
it must return exactly what ``multiprocessing.connection.Connection.send_bytes`` framed, whatever the size and
however the bytes arrive, and say so when the other side is gone."""

from __future__ import annotations

import os
import socket
import struct
import threading
from multiprocessing.connection import Connection

import pytest

from attnviz.runtime.isolation import read_message, write_message

pytestmark = pytest.mark.skipif(os.name != "posix", reason="posix sockets")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    sender = Connection(a.detach())
    yield sender, b
    sender.close()
    b.close()


@pytest.mark.parametrize("size", [0, 1, 300, 16384, 16385, 65532, 65533, 1 << 20, (3 << 20) + 7])
def test_reads_what_connection_sends(pair, size):
    sender, b = pair
    payload = os.urandom(size)
    t = threading.Thread(target=sender.send_bytes, args=(payload,))  # large messages block until read
    t.start()
    got = bytes(read_message(b.fileno()))
    t.join()
    assert got == payload


def test_reads_a_message_that_arrives_in_pieces(pair):
    """The header split across writes, then the body in three parts with the reader already waiting."""
    sender, b = pair
    payload = os.urandom(5000)
    frame = struct.pack("!i", len(payload)) + payload
    cuts = [0, 2, 4, 1000, 3000, len(frame)]
    go = [threading.Event() for _ in cuts[1:]]

    def write():
        for (i, j), ev in zip(zip(cuts, cuts[1:]), go):
            ev.wait(10)
            os.write(sender.fileno(), frame[i:j])

    t = threading.Thread(target=write)
    t.start()
    for ev in go:
        ev.set()
    assert bytes(read_message(b.fileno())) == payload
    t.join()


def test_reads_the_long_header_form(pair):
    """Connection frames messages over 2 GiB as -1 and an 8-byte size; the same form on a small body."""
    sender, b = pair
    payload = b"abc" * 1000
    os.write(sender.fileno(), struct.pack("!i", -1) + struct.pack("!Q", len(payload)) + payload)
    assert bytes(read_message(b.fileno())) == payload


def test_messages_in_turn_and_the_end(pair):
    sender, b = pair
    for n in (10, 70000, 20):  # one at a time, as requests and replies go
        payload = bytes([n % 251]) * n
        t = threading.Thread(target=sender.send_bytes, args=(payload,))
        t.start()
        assert bytes(read_message(b.fileno())) == payload
        t.join()
    os.write(sender.fileno(), struct.pack("!i", 100) + b"x" * 10)  # a message cut short by the sender's end
    sender.close()
    with pytest.raises(EOFError):
        read_message(b.fileno())


@pytest.mark.parametrize("size", [0, 7, 65536, 65537, (2 << 20) + 3])
def test_connection_reads_what_write_message_sends(pair, size):
    """The other direction: ``write_message`` frames as Connection does (Windows and old peers read it so)."""
    sender, b = pair
    payload = os.urandom(size)
    t = threading.Thread(target=write_message, args=(b.fileno(), payload))
    t.start()
    assert sender.recv_bytes() == payload
    t.join()
    t = threading.Thread(target=write_message, args=(sender.fileno(), payload))
    t.start()
    assert bytes(read_message(b.fileno())) == payload
    t.join()
