"""The Dockerfile, read as instructions (no Docker engine here to build it): a slim Python base,
pnsq installed with pip from the build context, the NSQ ports exposed, /data a volume owned by
a non-root user that runs nsqd, a default command that pnsq's own flag parser accepts, and a
health check that asks the daemon the container runs (nsqd or nsqlookupd)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nsqd.config.flags import parse_nsqd_args
from tests.daemons import pnsq_lookupd, pnsq_nsqd

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def args_of(steps: list[tuple[str, str]], name: str) -> list[str]:
    return [rest for word, rest in steps if word == name]


def exec_form(rest: str) -> list[str]:
    value = json.loads(rest)
    assert isinstance(value, list)
    assert all(isinstance(v, str) for v in value)
    return value


def test_one_slim_python_base(steps: list[tuple[str, str]]) -> None:
    assert steps[0][0] == "FROM"
    [base] = args_of(steps, "FROM")
    assert re.fullmatch(r"python:3\.1[1-9](\.\d+)?-slim(-\w+)?", base), base


def test_pnsq_is_installed_with_pip_from_the_context(steps: list[tuple[str, str]]) -> None:
    copies = args_of(steps, "COPY")
    assert any(shlex.split(c)[0] == "." for c in copies), copies
    dest = shlex.split(copies[0])[-1]
    runs = " && ".join(args_of(steps, "RUN"))
    assert re.search(rf"pip install (--[\w-]+ )*{re.escape(dest)}(\s|$)", runs), runs
    assert " -e " not in f" {runs} "  # a real install, not editable: the sources are removed


def test_the_nsq_ports_are_exposed(steps: list[tuple[str, str]]) -> None:
    ports = {p.split("/")[0] for rest in args_of(steps, "EXPOSE") for p in rest.split()}
    assert {"4150", "4151", "4160", "4161"} <= ports


def test_runs_as_a_non_root_user(steps: list[tuple[str, str]]) -> None:
    users = args_of(steps, "USER")
    assert users, "no USER: the container would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    last_user = max(i for i, (word, _) in enumerate(steps) if word == "USER")
    cmd = max(i for i, (word, _) in enumerate(steps) if word in {"CMD", "ENTRYPOINT"})
    assert last_user < cmd
    # The user is created in the image (not assumed to exist in the base).
    runs = " ".join(args_of(steps, "RUN"))
    assert re.search(rf"useradd\b.*\b{re.escape(user)}\b", runs), runs


def test_data_is_a_volume_owned_by_that_user(steps: list[tuple[str, str]]) -> None:
    volumes = [v for rest in args_of(steps, "VOLUME") for v in volume_paths(rest)]
    assert "/data" in volumes
    user = args_of(steps, "USER")[-1].split(":")[0]
    volume_at = next(i for i, (word, rest) in enumerate(steps) if word == "VOLUME")
    before = " ".join(rest for word, rest in steps[:volume_at] if word == "RUN")
    # Changes to a path after it is declared a VOLUME are discarded, so chown must come first.
    assert re.search(rf"chown\s+{re.escape(user)}(:\S+)?\s+/data\b", before), before


def volume_paths(rest: str) -> list[str]:
    return exec_form(rest) if rest.startswith("[") else rest.split()


def test_default_command_is_nsqd_on_all_interfaces_with_data_in_the_volume(
    steps: list[tuple[str, str]],
) -> None:
    assert not args_of(steps, "ENTRYPOINT")
    [cmd] = args_of(steps, "CMD")
    argv = exec_form(cmd)  # exec form: nsqd is PID 1 and gets SIGTERM from `docker stop`
    assert argv[0] == "nsqd"
    options = parse_nsqd_args(argv[1:])
    assert options.data_path == "/data"
    assert options.tcp_host_port() == ("0.0.0.0", 4150)
    assert options.http_host_port() == ("0.0.0.0", 4151)


def test_nsqd_is_the_installed_console_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["nsqd"] == "nsqd.cli:main"


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    patterns = {
        line.strip().strip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    needed = {"pyproject.toml", pyproject["project"]["readme"], *packages}
    assert not needed & patterns
    assert {".git", ".venv", ".tools"} <= patterns  # big, and not wanted in an image


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """The image gets only pyproject's dependencies: an import that the dev venv happens to
    satisfy but pyproject does not declare would break ``nsqd`` in the container. The one
    exception is ``pnsq/spark/``, which Spark loads with the ``spark`` extra installed (the image
    never imports it)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())

    def names(deps: list[str]) -> set[str]:
        return {canonical(re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0]) for dep in deps}

    core = names(pyproject["project"]["dependencies"])
    spark = core | names(pyproject["project"]["optional-dependencies"]["spark"])
    packages = [
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    ]
    distributions = importlib.metadata.packages_distributions()
    missing: dict[str, set[str]] = {}
    for package in packages:
        for source in sorted((ROOT / package).rglob("*.py")):
            in_spark = source.is_relative_to(ROOT / "pnsq" / "spark")
            declared = spark if in_spark else core
            for name in top_level_imports(source):
                if name in sys.stdlib_module_names or name in packages or name == "__future__":
                    continue
                dists = {canonical(d) for d in distributions.get(name, [name])}
                if not dists & declared:
                    missing.setdefault(name, set()).add(str(source.relative_to(ROOT)))
    assert not missing, f"imported but not in [project] dependencies: {missing}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_imports(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# ------------------------------------------------------------------ the health check


def healthcheck_module() -> Any:
    spec = importlib.util.spec_from_file_location("pnsq_healthcheck", HEALTHCHECK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_runs_the_script_the_image_installs(steps: list[tuple[str, str]]) -> None:
    [check] = args_of(steps, "HEALTHCHECK")
    options, _, cmd = check.partition("CMD ")
    assert "--interval=" in options
    argv = exec_form(cmd)
    assert argv[0] == "python"
    installed = argv[1]
    runs = " && ".join(args_of(steps, "RUN"))
    copy_dest = shlex.split(args_of(steps, "COPY")[0])[-1]
    source = HEALTHCHECK.relative_to(ROOT)
    assert re.search(rf"install (-m \d+ )?{copy_dest}/{source} {installed}\b", runs), runs
    ignored = DOCKERIGNORE.read_text().split()
    assert str(source.parts[0]) not in ignored  # in the build context


def test_healthcheck_follows_the_daemon_pid_1_runs(steps: list[tuple[str, str]]) -> None:
    ping_url = healthcheck_module().ping_url
    [cmd] = args_of(steps, "CMD")
    assert ping_url(exec_form(cmd)) == "http://127.0.0.1:4151/ping"  # the default: nsqd
    assert ping_url(["nsqlookupd", "--data-path=/data"]) == "http://127.0.0.1:4161/ping"
    assert ping_url(["/usr/local/bin/nsqlookupd", "--http-address=0.0.0.0:9161"]) == (
        "http://127.0.0.1:9161/ping"
    )
    assert ping_url(["nsqd", "--http-address=10.1.2.3:5151"]) == "http://10.1.2.3:5151/ping"
    assert ping_url(["python", "-m", "lookupd"]) == "http://127.0.0.1:4161/ping"
    with pytest.raises(ValueError, match="neither nsqd nor nsqlookupd"):
        ping_url(["sh", "-c", "sleep 1"])


def test_healthcheck_reports_a_lookupd_container_healthy(tmp_path: Path) -> None:
    """Against real daemons: the check asks nsqlookupd's port for a lookupd command (the old
    check always asked 4151, so a lookupd container was unhealthy) and nsqd's for nsqd."""
    check = healthcheck_module().check
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    try:
        argv = ["nsqlookupd", f"--http-address=127.0.0.1:{lookupd.http_port}"]
        assert check(argv) is None
        node = pnsq_nsqd(tmp_path / "nsqd").start()
        try:
            assert check(["nsqd", f"--http-address=127.0.0.1:{node.http_port}"]) is None
        finally:
            node.stop()
        assert check(["nsqd", f"--http-address=127.0.0.1:{node.http_port}"]) is not None
    finally:
        lookupd.stop()
