"""scripts/compose.yaml, read as data (no container engine here): every pnsq service's command
passes that daemon's own flag parser, the nsqd find lookupd and each other by the service names
they broadcast and replicate partitions twice, nsqadmin's flags are ones the real nsqadmin 1.3.0
takes (``nsqadmin --help``), and Prometheus scrapes every nsqd's HTTP port."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lookupd.config.options import parse_lookupd_args, validate_options
from nsqd.config.flags import parse_nsqd_args
from nsqd.config.options import validate_options as validate_nsqd
from tests.daemons import NSQADMIN

ROOT = Path(__file__).resolve().parent.parent.parent
COMPOSE = ROOT / "scripts" / "compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def services(compose: dict[str, Any], program: str) -> dict[str, list[str]]:
    """The services whose command runs ``program``: name -> argv."""
    found = {}
    for name, service in compose["services"].items():
        command = service.get("command")
        if command and Path(command[0]).name == program:
            assert all(isinstance(arg, str) for arg in command), name
            found[name] = list(command)
    return found


def test_one_lookupd_three_nsqd_nsqadmin_and_prometheus(compose: dict[str, Any]) -> None:
    assert len(services(compose, "nsqlookupd")) == 1
    assert len(services(compose, "nsqd")) == 3
    assert len(services(compose, "nsqadmin")) == 1
    assert "prometheus" in compose["services"]


def test_pnsq_services_build_this_image(compose: dict[str, Any]) -> None:
    for program in ("nsqd", "nsqlookupd"):
        for name in services(compose, program):
            service = compose["services"][name]
            assert service["image"] == "pnsq", name
            build = service["build"]
            assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == (
                ROOT / "Dockerfile"
            )


def lookupd_options(compose: dict[str, Any]) -> tuple[str, Any]:
    [(name, argv)] = services(compose, "nsqlookupd").items()
    return name, validate_options(parse_lookupd_args(argv[1:]))


def test_lookupd_command_parses(compose: dict[str, Any]) -> None:
    name, options = lookupd_options(compose)
    assert options.broadcast_address == name
    assert options.data_path == "/data"
    assert options.http_host_port() == ("0.0.0.0", 4161)


def test_nsqd_commands_parse_and_point_at_lookupd(compose: dict[str, Any]) -> None:
    lookupd_name, lookupd = lookupd_options(compose)
    lookupd_tcp = f"{lookupd_name}:{lookupd.tcp_host_port()[1]}"
    for name, argv in services(compose, "nsqd").items():
        options = validate_nsqd(parse_nsqd_args(argv[1:]))
        assert options.broadcast_address == name  # what other containers resolve
        assert compose["services"][name].get("hostname", name) == name
        assert list(options.lookupd_tcp_addresses) == [lookupd_tcp]
        assert options.default_replicator == 2
        assert options.data_path == "/data"
        volumes = compose["services"][name]["volumes"]
        assert any(v.endswith(":/data") for v in volumes)


def test_nsqd_nodes_have_their_own_volumes_and_host_ports(compose: dict[str, Any]) -> None:
    nodes = services(compose, "nsqd")
    volumes = [compose["services"][n]["volumes"][0].split(":")[0] for n in nodes]
    assert len(set(volumes)) == len(nodes)
    host_ports = [p.split(":")[0] for n in nodes for p in compose["services"][n]["ports"]]
    assert len(set(host_ports)) == len(host_ports)


def nsqadmin_flags() -> set[str]:
    if not NSQADMIN.exists():
        raise RuntimeError(f"{NSQADMIN} missing: run scripts/setup")
    usage = subprocess.run(
        [str(NSQADMIN), "--help"], capture_output=True, text=True, check=False, timeout=10
    )
    return set(re.findall(r"^\s+-([a-z0-9-]+)", usage.stderr + usage.stdout, re.MULTILINE))


def test_nsqadmin_flags_are_real_and_point_at_lookupd(compose: dict[str, Any]) -> None:
    known = nsqadmin_flags()
    assert "lookupd-http-address" in known
    [argv] = services(compose, "nsqadmin").values()
    given = {}
    for arg in argv[1:]:
        flag, _, value = arg.lstrip("-").partition("=")
        assert flag in known, arg
        given[flag] = value
    lookupd_name, lookupd = lookupd_options(compose)
    assert given["lookupd-http-address"] == f"{lookupd_name}:{lookupd.http_host_port()[1]}"


def test_prometheus_scrapes_every_nsqd(compose: dict[str, Any]) -> None:
    service = compose["services"]["prometheus"]
    [mount] = service["configs"]
    config = yaml.safe_load(compose["configs"][mount["source"]]["content"])
    assert any(a == f"--config.file={mount['target']}" for a in service["command"])
    targets = {
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    }
    for name, argv in services(compose, "nsqd").items():
        port = parse_nsqd_args(argv[1:]).http_host_port()[1]
        assert f"{name}:{port}" in targets


SECRET_FLAG = "--cluster-secret-file=/secret/cluster.secret"


def test_every_daemon_runs_with_the_one_cluster_credential(compose: dict[str, Any]) -> None:
    init = compose["services"]["cluster-secret"]
    [mount] = init["volumes"]
    assert mount == "cluster-secret:/secret"
    assert init["command"][-1] == "/secret/cluster.secret"
    daemons = {**services(compose, "nsqlookupd"), **services(compose, "nsqd")}
    assert len(daemons) == 4
    for name, argv in daemons.items():
        assert SECRET_FLAG in argv, name
        service = compose["services"][name]
        assert "cluster-secret:/secret:ro" in service["volumes"], name
        assert service["depends_on"]["cluster-secret"] == {
            "condition": "service_completed_successfully"
        }
    _, lookupd = lookupd_options(compose)
    assert lookupd.cluster_secret_file == "/secret/cluster.secret"
    for argv in services(compose, "nsqd").values():
        assert parse_nsqd_args(argv[1:]).cluster_secret_file == "/secret/cluster.secret"


def test_the_credential_is_made_once_private_and_kept(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """The cluster-secret service's own script, run here on a file of tmp_path."""
    python, flag, script, _ = compose["services"]["cluster-secret"]["command"]
    assert (python, flag) == ("python", "-c")
    path = tmp_path / "cluster.secret"
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=30)
    made = path.read_text()
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=30)
    assert path.read_text() == made  # kept on the second start
    assert re.fullmatch(r"[0-9a-f]{64}\n", made)
    assert path.stat().st_mode & 0o777 == 0o600
