"""Links between nodes on real loopback sockets: TLS (``"  S1"``, the link's magic inside),
then the cluster handshake; the dialer verifies the listener's certificate against its root CA
and the host it dialed, and a listener with a certificate takes no plaintext link."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
import trio

from pnsq._netio.cluster_link import ClusterLinks, LinkFailed, client_tls_context
from protocol.cluster_links import FORWARDING, REPLICATION, TLS
from tests.tlscerts import NodeCerts, make_certs, make_node_certs

LOG = logging.getLogger("test.links")


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def links(identity: str, secret: bytes, certs: NodeCerts | None = None) -> ClusterLinks:
    client = server = None
    if certs is not None:
        client = client_tls_context(str(certs.cert), str(certs.key), str(certs.ca))
        server = server_context(certs.cert, certs.key)
    return ClusterLinks(
        lambda: identity, trio.current_time, LOG, secret, client_tls=client, server_tls=server
    )


async def listen(
    listener: ClusterLinks, nursery: trio.Nursery, seen: list[tuple[bytes, str | None, bytes]]
) -> int:
    """Serve links on a loopback port: each one's magic, proved identity and first bytes go to
    ``seen``, and it is answered ``ok``."""

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        while len(data) < 4:
            data += await stream.receive_some(4096)
        magic, rest = data[:4], data[4:]
        link: trio.abc.Stream = stream
        if magic == TLS:
            try:
                link, magic, rest = await listener.open_tls(stream, "127.0.0.1:1", rest)
            except LinkFailed:
                return
        elif listener.tls_only:
            await listener.refuse(stream, "127.0.0.1:1", "TLS only")
            return
        try:
            proved, rest = await listener.accept(link, "127.0.0.1:1", magic, rest)
        except LinkFailed:
            return
        if not rest:
            rest = await link.receive_some(4096)
        seen.append((magic, proved, rest))
        await link.send_all(b"ok")

    listeners = await nursery.start(trio.serve_tcp, handle, 0)
    return int(listeners[0].socket.getsockname()[1])


async def test_a_link_over_tls_with_the_credential(tmp_path: Path) -> None:
    certs = make_node_certs(tmp_path / "certs")
    seen: list[tuple[bytes, str | None, bytes]] = []
    server = links("", b"s", certs)
    async with trio.open_nursery() as nursery:
        port = await listen(server, nursery, seen)
        server.identity = lambda: f"127.0.0.1:{port}"
        dialer = links("127.0.0.1:9", b"s", certs)
        stream, rest = await dialer.dial(f"127.0.0.1:{port}", FORWARDING, 2)
        assert isinstance(stream, trio.SSLStream)
        await stream.send_all(b"PUB")
        assert rest + await stream.receive_some(2) == b"ok"
        await stream.aclose()
        # the certificate names localhost too, but the listener proves another node id
        with pytest.raises(LinkFailed, match="proved as"):
            await dialer.dial(f"localhost:{port}", FORWARDING, 2)
        nursery.cancel_scope.cancel()
    assert seen[0] == (FORWARDING, "127.0.0.1:9", b"PUB")


async def test_the_dialer_checks_the_ca_and_the_host(tmp_path: Path) -> None:
    cluster = make_node_certs(tmp_path / "cluster")
    other = make_node_certs(tmp_path / "other", "another-ca")
    plain = make_certs(tmp_path / "plain")  # a server certificate for 127.0.0.1 only
    async with trio.open_nursery() as nursery:
        port = await listen(links("x", b"", other), nursery, [])
        with pytest.raises(LinkFailed, match="certificate verify failed"):
            await links("d", b"", cluster).dial(f"127.0.0.1:{port}", REPLICATION, 2)
        server = links("x", b"", cluster)
        server.server_tls = server_context(plain.server_cert, plain.server_key)
        port = await listen(server, nursery, [])
        dialer = links("d", b"", cluster)
        dialer.client_tls = client_tls_context(str(cluster.cert), str(cluster.key), str(plain.ca))
        stream, _ = await dialer.dial(f"127.0.0.1:{port}", REPLICATION, 2)  # its IP: good
        await stream.aclose()
        with pytest.raises(LinkFailed, match="mismatch"):  # the name is not in the certificate
            await dialer.dial(f"localhost:{port}", REPLICATION, 2)
        nursery.cancel_scope.cancel()


async def test_a_listener_with_a_certificate_refuses_plaintext(tmp_path: Path) -> None:
    certs = make_node_certs(tmp_path / "certs")
    seen: list[tuple[bytes, str | None, bytes]] = []
    async with trio.open_nursery() as nursery:
        port = await listen(links("l", b"s", certs), nursery, seen)
        with pytest.raises(LinkFailed, match="E_CLUSTER_AUTH: TLS only"):
            await links("d", b"s").dial(f"127.0.0.1:{port}", REPLICATION, 2)
        nursery.cancel_scope.cancel()
    assert seen == []
