"""What lookupd's TCP listener tests share: the lookupd's own IDENTIFY reply fields."""

from __future__ import annotations

#: the lookupd's own fields for its IDENTIFY replies (``LookupTCPServer.set_reply_info``)
LOOKUPD_INFO: dict[str, str | int] = {
    "broadcast_address": "127.0.0.1",
    "hostname": "lookupd-host",
    "http_port": 4161,
    "tcp_port": 4160,
    "version": "1.3.0",
}
