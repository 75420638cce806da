"""Drive the real pynsq (PyPI, Tornado based) against an nsqd, printing JSON lines.

Run as a subprocess by the interop tests, because pynsq needs Tornado's event loop:

    python pynsq_driver.py pub --nsqd HOST:PORT --topic T --count N --mode pub|mpub|dpub
        [--defer-ms M] [connection options]
    python pynsq_driver.py sub (--nsqd HOST:PORT | --lookupd HOST:PORT) --topic T --channel C
        --count N [--requeue-until-attempts K] [--heartbeat S] [--idle S] [--timeout S]
        [--msg-timeout S] [connection options]

Connection options (both): ``--tls`` (tls_v1, server certificate not verified unless
``--tls-ca FILE``), ``--tls-cert FILE --tls-key FILE`` (a client certificate), ``--snappy``,
``--deflate`` [``--deflate-level N``], ``--auth-secret S``. With any of them the first line is
``{"connected": {...}}``: the features the IDENTIFY reply granted and the AUTH reply, if any.

``sub --lookupd`` finds the nsqds through nsqlookupd's ``/lookup``
(``Reader(lookupd_http_addresses=…)``, polled every second); ``--lookupd A,B`` gives it several.

``sub`` prints one line per delivery {"id_hex","attempts","body","timestamp","received_ns"}, then
{"done": true|false, "distinct": n, "deliveries": d, "connections": c}; ``--idle`` first waits that
long and prints {"idle_ok": bool, "connections": n, "heartbeats": h}.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time

import nsq
from tornado.ioloop import IOLoop


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def conn_options(args: argparse.Namespace) -> dict[str, object]:
    """AsyncConn keyword arguments for the upgrade and AUTH options."""
    options: dict[str, object] = {}
    if args.tls:
        tls: dict[str, object] = {"cert_reqs": ssl.CERT_NONE}
        if args.tls_ca:
            tls = {"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": args.tls_ca}
        if args.tls_cert:
            tls.update(certfile=args.tls_cert, keyfile=args.tls_key)
        options.update(tls_v1=True, tls_options=tls)
    if args.snappy:
        options["snappy"] = True
    if args.deflate:
        options.update(deflate=True, deflate_level=args.deflate_level)
    if args.auth_secret:
        options["auth_secret"] = args.auth_secret
    return options


def report_connection(args: argparse.Namespace) -> None:
    """Print what the first connection negotiated (IDENTIFY reply, AUTH reply) and any
    connection error, by hooking every AsyncConn before it connects."""
    if not conn_options(args):
        return
    state: dict[str, object] = {}

    def on_identify(data: dict[str, object], **_: object) -> None:
        keys = ("tls_v1", "snappy", "deflate", "deflate_level", "auth_required")
        state["identify"] = {k: data.get(k) for k in keys}

    def on_auth(data: dict[str, object], **_: object) -> None:
        state["auth"] = data

    def on_ready(**_: object) -> None:
        if "reported" not in state:
            state["reported"] = True
            emit({"connected": {k: v for k, v in state.items() if k != "reported"}})

    def on_error(error: object, **_: object) -> None:
        emit({"conn_error": str(error)})

    original = nsq.AsyncConn.connect

    def connect(conn: nsq.AsyncConn) -> object:
        conn.on(nsq.event.IDENTIFY_RESPONSE, on_identify)
        conn.on(nsq.event.AUTH_RESPONSE, on_auth)
        conn.on(nsq.event.READY, on_ready)
        conn.on(nsq.event.ERROR, on_error)
        return original(conn)

    nsq.AsyncConn.connect = connect


def publish(args: argparse.Namespace) -> int:
    report_connection(args)
    writer = nsq.Writer([args.nsqd], **conn_options(args))
    loop = IOLoop.current()
    bodies = [f"{args.prefix}{i}".encode() for i in range(args.count)]
    state = {"acked": 0, "errors": []}
    started = time.monotonic()

    def done(conn: object, data: object) -> None:
        if isinstance(data, nsq.Error):
            state["errors"].append(str(data))
        else:
            state["acked"] += batch_size(data)
        if state["acked"] >= args.count or state["errors"]:
            loop.stop()

    sizes: list[int] = []

    def batch_size(_data: object) -> int:
        return sizes.pop(0)

    def go() -> None:
        if not writer.conns:
            loop.call_later(0.05, go)
            return
        if args.mode == "pub":
            for body in bodies:
                sizes.append(1)
                writer.pub(args.topic, body, callback=done)
        elif args.mode == "mpub":
            for i in range(0, len(bodies), args.batch):
                chunk = bodies[i : i + args.batch]
                sizes.append(len(chunk))
                writer.mpub(args.topic, chunk, callback=done)
        else:
            for body in bodies:
                sizes.append(1)
                writer.dpub(args.topic, args.defer_ms, body, callback=done)

    loop.add_callback(go)
    loop.call_later(args.timeout, loop.stop)
    nsq.run()
    emit(
        {
            "published": state["acked"],
            "errors": state["errors"],
            "elapsed_ms": int((time.monotonic() - started) * 1000),
        }
    )
    return 0 if state["acked"] == args.count and not state["errors"] else 1


def subscribe(args: argparse.Namespace) -> int:
    report_connection(args)
    seen: set[bytes] = set()
    stats = {"deliveries": 0, "heartbeats": 0}
    loop = IOLoop.current()

    def handler(message: nsq.Message) -> bool | None:
        stats["deliveries"] += 1
        emit(
            {
                "id_hex": message.id.hex(),
                "attempts": message.attempts,
                "body": message.body.decode(errors="replace"),
                "timestamp": message.timestamp,
                "received_ns": time.time_ns(),
            }
        )
        if message.attempts < args.requeue_until_attempts:
            message.enable_async()
            message.requeue(time_ms=0, backoff=False)
            return None
        seen.add(message.body)
        if len(seen) >= args.count:
            loop.call_later(0.3, loop.stop)  # let the last FIN go out
        return True

    discovery: dict[str, object] = {"nsqd_tcp_addresses": [args.nsqd]}
    if args.lookupd:
        discovery = {"lookupd_http_addresses": args.lookupd.split(","), "lookupd_poll_interval": 1}
    reader = nsq.Reader(
        message_handler=handler,
        **discovery,
        topic=args.topic,
        channel=args.channel,
        max_in_flight=args.max_in_flight,
        max_tries=0,
        heartbeat_interval=int(args.heartbeat),  # pynsq asserts an int number of seconds
        msg_timeout=args.msg_timeout,
        **conn_options(args),
    )
    connections: list[int] = []
    hooked: set[int] = set()

    def on_heartbeat(**_: object) -> None:
        stats["heartbeats"] += 1

    def watch_connections() -> None:
        for conn in reader.conns.values():
            if id(conn) not in hooked:
                hooked.add(id(conn))
                conn.on(nsq.event.HEARTBEAT, on_heartbeat)
        connections.append(len(reader.conns))
        loop.call_later(0.1, watch_connections)

    loop.call_later(0.1, watch_connections)
    if args.idle:

        def idle_report() -> None:
            # connected throughout (after the first 0.5 s) and exactly one connection ever made
            settled = connections[5:]
            emit(
                {
                    "idle_ok": bool(settled) and min(settled) >= 1 and len(hooked) == 1,
                    "connections": len(hooked),
                    "heartbeats": stats["heartbeats"],
                }
            )

        loop.call_later(args.idle, idle_report)

    loop.call_later(args.timeout, loop.stop)
    nsq.run()
    done = len(seen) >= args.count
    emit(
        {
            "done": done,
            "distinct": len(seen),
            "deliveries": stats["deliveries"],
            "heartbeats": stats["heartbeats"],
            "connections": len(hooked),
        }
    )
    return 0 if done else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pub")
    p.add_argument("--nsqd", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--mode", choices=["pub", "mpub", "dpub"], default="pub")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--defer-ms", type=int, default=0)
    p.add_argument("--prefix", default="msg-")
    p.add_argument("--timeout", type=float, default=30.0)
    s = sub.add_parser("sub")
    s.add_argument("--nsqd", default="")
    s.add_argument("--lookupd", default="")
    s.add_argument("--topic", required=True)
    s.add_argument("--channel", required=True)
    s.add_argument("--count", type=int, default=1)
    s.add_argument("--max-in-flight", type=int, default=200)
    s.add_argument("--requeue-until-attempts", type=int, default=0)
    s.add_argument("--heartbeat", type=float, default=30)
    s.add_argument("--msg-timeout", type=float, default=None)
    s.add_argument("--idle", type=float, default=0)
    s.add_argument("--timeout", type=float, default=30.0)
    for command in (p, s):
        command.add_argument("--tls", action="store_true")
        command.add_argument("--tls-ca", default="")
        command.add_argument("--tls-cert", default="")
        command.add_argument("--tls-key", default="")
        command.add_argument("--snappy", action="store_true")
        command.add_argument("--deflate", action="store_true")
        command.add_argument("--deflate-level", type=int, default=6)
        command.add_argument("--auth-secret", default="")
    args = parser.parse_args()
    if args.cmd == "sub" and not (args.nsqd or args.lookupd):
        parser.error("sub needs --nsqd or --lookupd")
    return publish(args) if args.cmd == "pub" else subscribe(args)


if __name__ == "__main__":
    raise SystemExit(main())
