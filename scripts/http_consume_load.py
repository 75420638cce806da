"""Load for scripts/bench: HTTP consume (``POST /consume`` + ``/consume/ack``) of one channel
from CONSUMERS threads, each on its own keep-alive connection, for SECONDS; prints one JSON
line ``{"msgs_per_sec": ..., "msgs": ...}`` (the shape scripts/bench parses).

usage: http_consume_load.py HOST:PORT TOPIC CHANNEL SECONDS [MAX=100] [CONSUMERS=4]
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from urllib.parse import urlencode


def consume(
    address: str, topic: str, channel: str, until: float, limit: int, out: list[int]
) -> None:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    query = urlencode({"topic": topic, "channel": channel, "max": limit, "wait_ms": 200})
    count = 0
    while time.monotonic() < until:
        conn.request("POST", f"/consume?{query}")
        reply = conn.getresponse()
        batch = json.loads(reply.read())
        if reply.status != 200:
            raise RuntimeError(f"/consume: {reply.status} {batch}")
        if batch["token"] is None:
            continue
        conn.request("POST", f"/consume/ack?{urlencode({'token': batch['token']})}")
        ack = conn.getresponse()
        if ack.status != 200 or ack.read() != b"OK":
            raise RuntimeError(f"/consume/ack: {ack.status}")
        count += len(batch["messages"])
    out.append(count)


def main(argv: list[str]) -> int:
    address, topic, channel, seconds = argv[0], argv[1], argv[2], float(argv[3])
    limit = int(argv[4]) if len(argv) > 4 else 100
    consumers = int(argv[5]) if len(argv) > 5 else 4
    counts: list[int] = []
    started = time.monotonic()
    threads = [
        threading.Thread(
            target=consume, args=(address, topic, channel, started + seconds, limit, counts)
        )
        for _ in range(consumers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    if len(counts) != consumers:
        print(json.dumps({"error": "a consumer failed (see above)"}))
        return 1
    total = sum(counts)
    print(json.dumps({"msgs_per_sec": total / elapsed, "msgs": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
