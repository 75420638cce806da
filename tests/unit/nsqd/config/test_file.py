"""``nsqd --config``: how each kind of TOML value becomes an option, and who wins (the command
line over the file over the default). tests/integration/test_config_file.py compares the
result with the real Go nsqd's."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqd.config.flags import parse_nsqd_args
from nsqd.config.options import Options, OptionsError


def _options(tmp_path: Path, text: str, *flags: str) -> Options:
    path = tmp_path / "nsqd.cfg"
    path.write_text(text)
    return parse_nsqd_args([f"--config={path}", *flags])


@pytest.mark.parametrize(
    ("line", "attribute", "value"),
    [
        ('tcp_address = "127.0.0.1:5150"', "tcp_address", "127.0.0.1:5150"),
        ("id = 5", "node_id", 5),
        ('mem_queue_size = "123"', "mem_queue_size", 123),  # a string: read base 10
        ("max_msg_size = 2048", "max_msg_size", 2048),
        ('msg_timeout = "90s"', "msg_timeout", 90.0),
        ("msg_timeout = 1500", "msg_timeout", 1.5),  # an integer duration: milliseconds
        ("snappy = false", "snappy", False),
        ('snappy = "f"', "snappy", False),  # strconv.ParseBool
        ("snappy = 1", "snappy", False),  # go-options: an integer is true when it is 0
        ("deflate = 0", "deflate", True),
        ('nsqlookupd_tcp_addresses = ["a:1", "b:2"]', "lookupd_tcp_addresses", ("a:1", "b:2")),
        ('nsqlookupd_tcp_addresses = "a:1,b:2"', "lookupd_tcp_addresses", ("a:1", "b:2")),
        ('auth_http_addresses = ["a:1"]', "auth_http_addresses", ("a:1",)),
        (
            "e2e_processing_latency_percentiles = [0.5, 0.99]",
            "e2e_processing_latency_percentiles",
            (0.99, 0.5),
        ),
        (
            'e2e_processing_latency_percentiles = "0.5,1"',
            "e2e_processing_latency_percentiles",
            (1.0, 0.5),
        ),
        ('tls_required = true\ntls_cert = "c"\ntls_key = "k"', "tls_required", "true"),
        ('tls_required = "tcp-https"\ntls_cert = "c"\ntls_key = "k"', "tls_required", "tcp-https"),
        ("tls_required = 0", "tls_required", "false"),
        ('tls_min_version = "tls1.2"', "tls_min_version", "tls1.2"),
        ('tls_min_version = ""', "tls_min_version", "tls1.0"),  # empty: the default stays
        ('log_level = "debug"', "log_level", "debug"),
        ('busy_poll = "50us"', "busy_poll", 50e-6),  # pnsq's own options too
        ("not_an_option = 1", "mem_queue_size", 10000),  # ignored
        ("verbose = true", "verbose", False),  # not an option of nsqd's: not read from a file
    ],
)
def test_a_value_from_the_file(tmp_path: Path, line: str, attribute: str, value: object) -> None:
    assert getattr(_options(tmp_path, line + "\n"), attribute) == value


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    text = 'msg_timeout = "90s"\nmem_queue_size = 5\nnsqlookupd_tcp_addresses = ["a:1"]\n'
    options = _options(tmp_path, text, "--msg-timeout=30s", "--lookupd-tcp-address=b:2")
    assert options.msg_timeout == 30.0
    assert options.lookupd_tcp_addresses == ("b:2",)
    assert options.mem_queue_size == 5  # not on the command line: the file's


def test_without_a_file_nothing_changes(tmp_path: Path) -> None:
    assert parse_nsqd_args([]) == parse_nsqd_args(["--config="])


def test_version_is_printed_before_the_file_is_read(tmp_path: Path) -> None:
    options = parse_nsqd_args([f"--config={tmp_path / 'missing.cfg'}", "--version"])
    assert options.show_version


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("msg_timeout = [\n", "failed to load config file"),
        ("mem_queue_size = 1.5\n", "mem_queue_size"),  # a float for an integer
        ('mem_queue_size = "0x10"\n', "mem_queue_size"),  # strconv.ParseInt, base 10
        ("msg_timeout = 1.5\n", "msg_timeout"),
        ('msg_timeout = "soon"\n', "msg_timeout"),
        ("snappy = 1.5\n", "snappy"),
        ("tcp_address = 4150\n", "tcp_address"),  # nsqd would listen on "%!s(int64=4150)"
        ('log_level = "loud"\n', "log_level"),
        ("nsqlookupd_tcp_addresses = [1, true]\n", "nsqlookupd_tcp_addresses"),
        ("[tcp_address]\nx = 1\n", "tcp_address"),
    ],
)
def test_a_value_nsqd_cannot_use(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(OptionsError, match=said):
        _options(tmp_path, text)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="failed to load config file"):
        parse_nsqd_args([f"--config={tmp_path / 'missing.cfg'}"])


def test_values_from_the_file_are_checked_as_flags_are(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="--max-deflate-level"):
        _options(tmp_path, "max_deflate_level = 10\n")
