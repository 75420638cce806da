"""pnsq's wire protocol, sans-IO: NSQ TCP protocol V2 (stock and youzan's partitioned
extensions). Bytes in, typed values out; no sockets, no clock, no async, stdlib only.
"""

from .commands import (
    Auth as Auth,
    Cls as Cls,
    Command as Command,
    Dpub as Dpub,
    Fin as Fin,
    Identify as Identify,
    Mpub as Mpub,
    MpubExt as MpubExt,
    MpubTrace as MpubTrace,
    Nop as Nop,
    Pub as Pub,
    PubExt as PubExt,
    PublishCommand as PublishCommand,
    PubTrace as PubTrace,
    Rdy as Rdy,
    Req as Req,
    Sub as Sub,
    SubMode as SubMode,
    Touch as Touch,
)
from .errors import (
    ClientError as ClientError,
    ConnectionAbort as ConnectionAbort,
    ErrorCode as ErrorCode,
    ProtocolError as ProtocolError,
)
from .parser import (
    NEED_DATA as NEED_DATA,
    CommandParser as CommandParser,
    ConnState as ConnState,
    NeedData as NeedData,
    ParserLimits as ParserLimits,
)

__all__ = [
    "NEED_DATA",
    "Auth",
    "ClientError",
    "Cls",
    "Command",
    "CommandParser",
    "ConnState",
    "ConnectionAbort",
    "Dpub",
    "ErrorCode",
    "Fin",
    "Identify",
    "Mpub",
    "MpubExt",
    "MpubTrace",
    "NeedData",
    "Nop",
    "ParserLimits",
    "ProtocolError",
    "Pub",
    "PubExt",
    "PubTrace",
    "PublishCommand",
    "Rdy",
    "Req",
    "Sub",
    "SubMode",
    "Touch",
]
