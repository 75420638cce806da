"""``scripts/chaos --secure`` (``FAULT_SECURE=1``): the fault suite's clusters run with the
cluster credential and TLS between nodes. Every lookupd and nsqd holds one cluster secret; every
nsqd a node certificate of one throwaway CA (``--tls-cert``, ``--tls-key``,
``--tls-root-ca-file``), so replication and forwarding run over TLS, authenticated. Clients stay
in plaintext (no ``--tls-client-auth-policy``, which would require TLS of them too), and the
checks read lookupd's cluster-control endpoints with the credential's header."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from protocol.cluster_auth import http_headers
from tests.tlscerts import make_node_certs

SECRET = b"chaos cluster secret"


@dataclass(frozen=True)
class Secure:
    lookupd_flags: tuple[str, ...]
    nsqd_flags: tuple[str, ...]
    headers: dict[str, str]  # for lookupd's cluster-control endpoints


def secure(work: Path) -> Secure | None:
    """With ``FAULT_SECURE=1``: a secret and certificates written under ``work``, and the flags
    that hand them to each process; None otherwise."""
    if os.environ.get("FAULT_SECURE", "") != "1":
        return None
    directory = work / "secure"
    certs = make_node_certs(directory)
    secret_file = directory / "cluster.secret"
    secret_file.write_bytes(SECRET + b"\n")
    secret_flag = f"--cluster-secret-file={secret_file}"
    nsqd_flags = (secret_flag, *certs.flags(client_auth=False), "--https-address=127.0.0.1:0")
    return Secure((secret_flag,), nsqd_flags, http_headers(SECRET))
