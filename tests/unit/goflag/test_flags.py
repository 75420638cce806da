"""Tests for nsqd.flags: Go ``flag`` package semantics.

Every expected error text, value and usage layout below was produced by Go 1.26's flag, strconv
and time packages (a throwaway Go program with the same flags as ``_flagset``).
"""

from __future__ import annotations

import io
import math

import pytest

from pnsq._goflag.flags import FlagError, FlagSet, HelpRequested, ParseResult, parse_or_exit
from pnsq._goflag.syntax import (
    FlagValueError,
    format_go_duration,
    format_go_float,
    go_quote,
    parse_go_bool,
    parse_go_duration,
    parse_go_float,
    parse_go_int,
)


def _tls_required(text: str, _current: str) -> str:
    value = text.lower()
    if value == "tcp-https":
        return "2"
    if value in ("1", "t", "true", "0", "f", "false"):
        return "1" if value in ("1", "t", "true") else "0"
    raise FlagValueError(f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax")


def _flagset() -> FlagSet:
    flags = FlagSet("nsqd")
    flags.add_string("data-path", "", "path to store disk-backed messages")
    flags.add_string("tcp-address", "0.0.0.0:4150", "address to listen on")
    flags.add_int("max-deflate-level", 6, "max deflate level")
    flags.add_int("mem-queue-size", 10000, "number of messages")
    flags.add_float("ratio", 0.5, "a float")
    flags.add_float("zf", 0, "a zero float")
    flags.add_bool("verbose", False, "[deprecated] has no effect")
    flags.add_bool("snappy", True, "enable snappy")
    flags.add_bool("x", False, "one letter bool")
    flags.add_duration("msg-timeout", 60, "default duration")
    flags.add_duration("min-output-buffer-timeout", 0.025, "min")
    flags.add_duration("e2e", 600, "window `thing` here")
    flags.add_duration("zd", 0, "zero dur")
    flags.add_list("lookupd-tcp-address", "lookupd TCP address (may be given multiple times)")
    flags.add_var(
        "tls-required",
        "0",
        "require TLS (true, false, tcp-https)",
        _tls_required,
        zero_text="0",
        is_bool=True,
    )
    return flags


# Output of the Go program's -h (Go prints it to stderr and exits 0).
GO_USAGE = """\
Usage of nsqd:
  -data-path string
    \tpath to store disk-backed messages
  -e2e thing
    \twindow thing here (default 10m0s)
  -lookupd-tcp-address value
    \tlookupd TCP address (may be given multiple times)
  -max-deflate-level int
    \tmax deflate level (default 6)
  -mem-queue-size int
    \tnumber of messages (default 10000)
  -min-output-buffer-timeout duration
    \tmin (default 25ms)
  -msg-timeout duration
    \tdefault duration (default 1m0s)
  -ratio float
    \ta float (default 0.5)
  -snappy
    \tenable snappy (default true)
  -tcp-address string
    \taddress to listen on (default "0.0.0.0:4150")
  -tls-required
    \trequire TLS (true, false, tcp-https)
  -verbose
    \t[deprecated] has no effect
  -x\tone letter bool
  -zd duration
    \tzero dur
  -zf float
    \ta zero float
"""


def _parse(*argv: str) -> ParseResult:
    return _flagset().parse(argv)


# ------------------------------------------------------------------ syntax forms


@pytest.mark.parametrize(
    ("argv", "expected", "args"),
    [
        (["-data-path=/d"], {"data-path": "/d"}, ()),
        (["--data-path=/d"], {"data-path": "/d"}, ()),
        (["-data-path", "/d"], {"data-path": "/d"}, ()),
        (["--data-path", "/d"], {"data-path": "/d"}, ()),
        (["-data-path="], {"data-path": ""}, ()),
        (["-data-path=a=b"], {"data-path": "a=b"}, ()),
        (["-data-path=\t"], {"data-path": "\t"}, ()),
        (["-data-path", "-verbose"], {"data-path": "-verbose", "verbose": False}, ()),
        (["-verbose"], {"verbose": True}, ()),
        (["--verbose"], {"verbose": True}, ()),
        (["-verbose=true"], {"verbose": True}, ()),
        (["-snappy=false"], {"snappy": False}, ()),
        (["--snappy=0"], {"snappy": False}, ()),
        (["-snappy=F"], {"snappy": False}, ()),
        (["-verbose=T"], {"verbose": True}, ()),
        # a separate "false" is not a boolean's value: it is the first positional argument
        (["-snappy", "false"], {"snappy": True}, ("false",)),
        (["-verbose", "false", "-x"], {"verbose": True, "x": False}, ("false", "-x")),
        (["-max-deflate-level=9"], {"max-deflate-level": 9}, ()),
        (["-max-deflate-level", "-1"], {"max-deflate-level": -1}, ()),
        (["-max-deflate-level=1", "-max-deflate-level=2"], {"max-deflate-level": 2}, ()),
        (["-ratio", "0.25"], {"ratio": 0.25}, ()),
        (["-msg-timeout=90s"], {"msg-timeout": 90.0}, ()),
        (["--msg-timeout", "1m30s"], {"msg-timeout": 90.0}, ()),
        (
            [
                "-lookupd-tcp-address=a:1",
                "--lookupd-tcp-address",
                "b:2",
                "-lookupd-tcp-address=a:1",
            ],
            {"lookupd-tcp-address": ("a:1", "b:2", "a:1")},
            (),
        ),
        (["-tls-required"], {"tls-required": "1"}, ()),
        (["-tls-required=TCP-HTTPS"], {"tls-required": "2"}, ()),
        (["-tls-required", "tcp-https"], {"tls-required": "1"}, ("tcp-https",)),
        (["--", "-verbose"], {"verbose": False}, ("-verbose",)),
        (["-x", "--", "--", "a"], {"x": True}, ("--", "a")),
        (["pos", "-verbose"], {"verbose": False}, ("pos", "-verbose")),
        (["-", "-verbose"], {"verbose": False}, ("-", "-verbose")),
        (["-x", "a", "b"], {"x": True}, ("a", "b")),
        ([], {"data-path": "", "snappy": True, "msg-timeout": 60.0, "lookupd-tcp-address": ()}, ()),
    ],
)
def test_syntax_forms(argv: list[str], expected: dict[str, object], args: tuple[str, ...]) -> None:
    result = _flagset().parse(argv)
    assert {name: result.values[name] for name in expected} == expected
    assert result.args == args


def test_pynsq_single_dash_style() -> None:
    result = _parse("-lookupd-tcp-address=127.0.0.1:4160", "-lookupd-tcp-address=127.0.0.1:4161")
    assert result.get_list("lookupd-tcp-address") == ("127.0.0.1:4160", "127.0.0.1:4161")


def test_explicit_records_only_given_flags() -> None:
    result = _parse("-x", "--msg-timeout=1s", "-x=false", "pos", "-verbose")
    assert result.explicit == frozenset({"x", "msg-timeout"})
    assert result.get_bool("x") is False


def test_parse_does_not_mutate_the_flagset() -> None:
    flags = _flagset()
    flags.parse(["-lookupd-tcp-address=a", "-data-path=/d"])
    again = flags.parse([])
    assert again.values["lookupd-tcp-address"] == ()
    assert again.values["data-path"] == ""


# ------------------------------------------------------------------ Go error texts


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-foo"], "flag provided but not defined: -foo"),
        (["--foo=1"], "flag provided but not defined: -foo"),
        (["-verbose", "--nope"], "flag provided but not defined: -nope"),
        (["--data-path"], "flag needs an argument: -data-path"),
        (["-msg-timeout"], "flag needs an argument: -msg-timeout"),
        (["-msg-timeout", "abc"], 'invalid value "abc" for flag -msg-timeout: parse error'),
        (["-msg-timeout=1"], 'invalid value "1" for flag -msg-timeout: parse error'),
        (["-msg-timeout=1d"], 'invalid value "1d" for flag -msg-timeout: parse error'),
        (
            ["-max-deflate-level=abc"],
            'invalid value "abc" for flag -max-deflate-level: parse error',
        ),
        (["-max-deflate-level= 5"], 'invalid value " 5" for flag -max-deflate-level: parse error'),
        (
            ["-max-deflate-level=1.5"],
            'invalid value "1.5" for flag -max-deflate-level: parse error',
        ),
        (
            ["-max-deflate-level", "99999999999999999999"],
            'invalid value "99999999999999999999" for flag -max-deflate-level: value out of range',
        ),
        (["-ratio=1e400"], 'invalid value "1e400" for flag -ratio: value out of range'),
        (["-ratio=+nan"], 'invalid value "+nan" for flag -ratio: parse error'),
        (["-verbose=x"], 'invalid boolean value "x" for -verbose: parse error'),
        (["-verbose="], 'invalid boolean value "" for -verbose: parse error'),
        (["-verbose=yes"], 'invalid boolean value "yes" for -verbose: parse error'),
        (
            ["-tls-required=X"],
            'invalid boolean value "X" for -tls-required: '
            'strconv.ParseBool: parsing "x": invalid syntax',
        ),
        (["---verbose"], "bad flag syntax: ---verbose"),
        (["-=x"], "bad flag syntax: -=x"),
        (["--=x"], "bad flag syntax: --=x"),
        (["-msg-timeout=\u00e9"], 'invalid value "\u00e9" for flag -msg-timeout: parse error'),
        (["-msg-timeout=a\tb"], 'invalid value "a\\tb" for flag -msg-timeout: parse error'),
        (['-msg-timeout=q"'], 'invalid value "q\\"" for flag -msg-timeout: parse error'),
    ],
)
def test_go_error_texts(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        _flagset().parse(argv)
    assert str(info.value) == message


def test_bare_boolean_var_whose_setter_rejects_true() -> None:
    def never(text: str, _current: bool) -> bool:
        raise FlagValueError("no")

    flags = FlagSet("t")
    flags.add_var("odd", False, "odd", never, is_bool=True)
    with pytest.raises(FlagError, match=r"^invalid boolean flag odd: no$"):
        flags.parse(["-odd"])


@pytest.mark.parametrize("argv", [["-h"], ["-help"], ["--help"], ["--help=1"], ["-x", "-h"]])
def test_help_requested(argv: list[str]) -> None:
    with pytest.raises(HelpRequested):
        _flagset().parse(argv)


def test_a_defined_h_flag_is_an_ordinary_flag() -> None:
    flags = FlagSet("t")
    flags.add_bool("h", False, "host mode")
    assert flags.parse(["-h"]).get_bool("h") is True


def test_redefining_a_flag_is_an_error() -> None:
    flags = _flagset()
    with pytest.raises(ValueError, match="flag redefined: verbose"):
        flags.add_bool("verbose", True, "again")


# ------------------------------------------------------------------ parse_or_exit


def test_parse_or_exit_error_prints_message_then_usage_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_or_exit(_flagset(), ["-foo"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "flag provided but not defined: -foo\n" + GO_USAGE


@pytest.mark.parametrize("argv", [["-h"], ["--help"]])
def test_parse_or_exit_help_prints_usage_and_exits_0(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_or_exit(_flagset(), argv)
    assert info.value.code == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", GO_USAGE)


def test_parse_or_exit_success_and_explicit_stream() -> None:
    stream = io.StringIO()
    result = parse_or_exit(_flagset(), ["-snappy=false", "rest"], stderr=stream)
    assert result.get_bool("snappy") is False
    assert result.args == ("rest",)
    assert stream.getvalue() == ""
    with pytest.raises(SystemExit):
        parse_or_exit(_flagset(), ["-msg-timeout=x"], stderr=stream)
    assert stream.getvalue().startswith(
        'invalid value "x" for flag -msg-timeout: parse error\nUsage of nsqd:\n'
    )


def test_usage_matches_go() -> None:
    assert _flagset().usage() == GO_USAGE


def test_usage_of_unnamed_flagset() -> None:
    assert FlagSet("").usage() == "Usage:\n"


# ------------------------------------------------------------------ typed accessors


def test_typed_getters() -> None:
    result = _parse("-ratio=2", "-max-deflate-level=3", "-lookupd-tcp-address=a")
    assert result.get_float("ratio") == 2.0
    assert result.get_float("msg-timeout") == 60.0
    assert result.get_int("max-deflate-level") == 3
    assert result.get_str("tcp-address") == "0.0.0.0:4150"
    assert result.get_bool("snappy") is True
    assert result.get_list("lookupd-tcp-address") == ("a",)
    with pytest.raises(TypeError):
        result.get_int("snappy")  # a bool is not an int here
    with pytest.raises(TypeError):
        result.get_str("max-deflate-level")
    with pytest.raises(KeyError):
        result.get_str("nope")


# ------------------------------------------------------------------ value syntax


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2s", 2.0),
        ("250ms", 0.25),
        ("300ms", 0.3),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("2h45m", 9900.0),
        ("0", 0.0),
        ("+0", 0.0),
        ("-0", 0.0),
        ("-1s", -1.0),
        ("+1s", 1.0),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("3ns", 3e-9),
        ("0.5ns", 0.0),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6),
        ("1.5\u00b5s", 1.5e-6),
        ("1h1m1.000001s", 3661.000001),
        ("1.0000000000000000000001s", 1.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert _parse(f"-msg-timeout={text}").get_float("msg-timeout") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("9223372036854775807ns", 2**63 - 1),
        ("-9223372036854775808ns", -(2**63)),
        ("2562047h", 9223369200000000000),
        ("1.5h", 5_400_000_000_000),
    ],
)
def test_duration_nanoseconds(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text) == nanoseconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1", 'time: missing unit in duration "1"'),
        ("00", 'time: missing unit in duration "00"'),
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        (".", 'time: invalid duration "."'),
        (".s", 'time: invalid duration ".s"'),
        ("s", 'time: invalid duration "s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1e5", 'time: unknown unit "e" in duration "1e5"'),
        ("1\u00b5", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("2562048h", 'time: invalid duration "2562048h"'),
        ("0" * 5000 + "1" * 30 + "s", None),
    ],
)
def test_bad_durations(text: str, message: str | None) -> None:
    with pytest.raises(FlagValueError) as info:
        parse_go_duration(text)
    if message is not None:
        assert str(info.value) == message
    with pytest.raises(FlagError, match=r"for flag -msg-timeout: parse error$"):
        _parse(f"-msg-timeout={text}")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-0", 0),
        ("+5", 5),
        ("0x1f", 31),
        ("0X1F", 31),
        ("017", 15),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("0_7", 7),
        ("0x_1f", 31),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("-0x8000000000000000", -(2**63)),
    ],
)
def test_ints(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "parse error"),
        ("+", "parse error"),
        ("abc", "parse error"),
        ("0x", "parse error"),
        ("0b", "parse error"),
        ("08", "parse error"),
        ("_1", "parse error"),
        ("1_", "parse error"),
        ("1__0", "parse error"),
        ("1.0", "parse error"),
        ("1e3", "parse error"),
        ("\u0661", "parse error"),  # a non-ASCII digit
        ("9223372036854775808", "value out of range"),
        ("0x8000000000000000", "value out of range"),
        ("-9223372036854775809", "value out of range"),
        ("99999999999999999999x", "value out of range"),  # Go reports overflow first
    ],
)
def test_bad_ints(text: str, reason: str) -> None:
    with pytest.raises(FlagValueError, match=f"^{reason}$"):
        parse_go_int(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.5", 1.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("-0.25", -0.25),
        ("1e5", 1e5),
        ("1E-5", 1e-5),
        ("1e1_0", 1e10),
        ("1_0.5", 10.5),
        ("0x1p-2", 0.25),
        ("0x.8p1", 1.0),
        ("0X1P+2", 4.0),
        ("0x1_0p0", 16.0),
        ("1e-400", 0.0),
        ("Inf", math.inf),
        ("+Infinity", math.inf),
        ("-inf", -math.inf),
    ],
)
def test_floats(text: str, value: float) -> None:
    assert parse_go_float(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "parse error"),
        (".", "parse error"),
        ("1e", "parse error"),
        ("1e+", "parse error"),
        ("1_e5", "parse error"),
        ("1__0", "parse error"),
        ("0x1", "parse error"),  # a hex mantissa needs a p exponent
        (" 1", "parse error"),
        ("1 ", "parse error"),
        ("infinit", "parse error"),
        ("+nan", "parse error"),
        ("1e400", "value out of range"),
        ("0x1p5000", "value out of range"),
    ],
)
def test_bad_floats(text: str, reason: str) -> None:
    with pytest.raises(FlagValueError, match=f"^{reason}$"):
        parse_go_float(text)


def test_nan() -> None:
    assert math.isnan(parse_go_float("nAn"))


@pytest.mark.parametrize(
    ("text", "value"),
    [(text, True) for text in ("1", "t", "T", "TRUE", "true", "True")]
    + [(text, False) for text in ("0", "f", "F", "FALSE", "false", "False")],
)
def test_bools(text: str, value: bool) -> None:
    assert parse_go_bool(text) is value


@pytest.mark.parametrize("text", ["tRue", "yes", "on", "", " true", "2"])
def test_bad_bools(text: str) -> None:
    with pytest.raises(FlagValueError, match=r"^parse error$"):
        parse_go_bool(text)


@pytest.mark.parametrize(
    ("nanoseconds", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5\u00b5s"),
        (25_000_000, "25ms"),
        (250_000_000, "250ms"),
        (2_000_000_000, "2s"),
        (60_000_000_000, "1m0s"),
        (90_500_000_000, "1m30.5s"),
        (3_600_000_000_000, "1h0m0s"),
        (604_800_000_000_000, "168h0m0s"),
        (-1_000_000_000, "-1s"),
        (2**63 - 1, "2562047h47m16.854775807s"),
        (-(2**63), "-2562047h47m16.854775808s"),
    ],
)
def test_format_go_duration(nanoseconds: int, text: str) -> None:
    assert format_go_duration(nanoseconds) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (0.5, "0.5"),
        (2.0, "2"),
        (100000.0, "100000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (0.000012345, "1.2345e-05"),
        (1e21, "1e+21"),
        (123456789012.0, "1.23456789012e+11"),
        (1e-7, "1e-07"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_format_go_float(value: float, text: str) -> None:
    assert format_go_float(value) == text


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("abc", '"abc"'),
        ("", '""'),
        ('q"\\', '"q\\"\\\\"'),
        ("a\tb\n", '"a\\tb\\n"'),
        ("\x01\x7f", '"\\x01\\x7f"'),
        ("\u00e9\u4e16", '"\u00e9\u4e16"'),
        ("\u00a0", '"\\u00a0"'),
        ("\udcff", '"\\xff"'),  # an undecodable argv byte (surrogateescape)
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted
