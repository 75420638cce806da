"""One blocking protocol V2 connection to nsqd, used request/reply by the blocking
:class:`pnsq.client.blocking.Producer`: plain sockets and the sans-IO protocol, no Trio.

IDENTIFY with feature negotiation on connect; each command is sent and its reply read before
the next, answering heartbeats that arrive meanwhile with NOP.
"""

from __future__ import annotations

import json
import socket
from typing import Final, final

from protocol.client_frames import ErrorFrame, FrameDecoder, MessageFrame, Response
from protocol.commands import Command, Identify, Nop
from protocol.encode import encode_command
from protocol.frames import HEARTBEAT_DATA, MAGIC_V2
from protocol.parser import NEED_DATA

from ._http import DEFAULT_TIMEOUT
from .errors import ConnectionClosedError, NsqError, UnexpectedResponseError
from .routing import parse_address

USER_AGENT: Final = "pnsq-blocking-client/0.1.0"
_READ_SIZE: Final = 64 * 1024
_NOP: Final = encode_command(Nop())
#: youzan: non-fatal in answer to a publish (fatal only on SUB/FIN, which this client never sends).
_PUBLISH_NON_FATAL: Final = frozenset({"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE"})


@final
class BlockingConnection:
    """One protocol V2 connection, used request/reply: send a command, read until its reply.

    Heartbeats that arrive meanwhile are answered with NOP. Only for publishing (a subscribed
    connection's messages are not expected and raise :class:`UnexpectedResponseError`).
    """

    def __init__(
        self, address: str, timeout: float = DEFAULT_TIMEOUT, producer: str | None = None
    ) -> None:
        self.address = address
        host, port = parse_address(address)
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._decoder = FrameDecoder()
        self.closed = False
        identify = {
            "client_id": socket.gethostname(),
            "hostname": socket.gethostname(),
            "user_agent": USER_AGENT,
            "feature_negotiation": True,
        }
        if producer is not None:  # pnsq: a numbering (idempotent) producer's name
            identify["pnsq_producer"] = producer
        try:
            self._sock.sendall(MAGIC_V2)
            reply = self.command(Identify(json.dumps(identify).encode()))
            self.features = json.loads(reply) if reply != b"OK" else {}
        except BaseException:
            self.close()
            raise

    def command(self, cmd: Command) -> bytes:
        """Send ``cmd`` and return its reply's data.

        Raises:
            NsqError: nsqd answered with an error frame (fatal ones close this connection).
            ConnectionClosedError: the connection closed or failed.
        """
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.address} is closed")
        try:
            self._sock.sendall(encode_command(cmd))
            while True:
                frame = self._decoder.next_frame()
                if frame is NEED_DATA:
                    data = self._sock.recv(_READ_SIZE)
                    if not data:
                        raise ConnectionClosedError(f"nsqd at {self.address} closed the connection")
                    self._decoder.receive_data(data)
                    continue
                match frame:
                    case Response(data=data):
                        if data != HEARTBEAT_DATA:
                            return data
                        self._sock.sendall(_NOP)
                    case ErrorFrame(text=text):
                        error = NsqError(text)
                        if error.fatal and error.code not in _PUBLISH_NON_FATAL:
                            self.close()
                        raise error
                    case MessageFrame():
                        raise UnexpectedResponseError("message frame on a publishing connection")
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(f"connection to {self.address} failed: {exc}") from exc
        except (ConnectionClosedError, UnexpectedResponseError):
            self.close()
            raise

    def close(self) -> None:
        """Close the socket. Idempotent."""
        if not self.closed:
            self.closed = True
            self._sock.close()
