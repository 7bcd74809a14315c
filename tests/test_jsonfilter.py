"""nsq_to_nsq's JSON filter, rule by rule; each expected body is what Go's nsq_to_nsq
v1.3.0 (go1.26) gives (tests/test_jsonfilter_vs_go.py checks a corpus against it)."""

from __future__ import annotations

import pytest

from nsqtools.jsonfilter import (
    DECODE_ERROR_LOG,
    MISSING_FIELD_LOG,
    Action,
    JsonFilter,
    Verdict,
    go_parse_float,
)

WHITELIST_AB = JsonFilter(whitelist=("a", "b"))


def published(json_filter: JsonFilter, body: bytes) -> bytes:
    verdict = json_filter.apply(body)
    assert verdict.action is Action.PUBLISH, verdict
    return verdict.body


def test_no_option_passes_every_body_unchanged() -> None:
    inactive = JsonFilter(require_value="1")  # a value without a field: Go ignores it
    assert not inactive.active
    for body in (b"not json", b"[1]", b'{"a":1.0}'):
        assert inactive.apply(body) == Verdict(Action.PUBLISH, body)


def test_require_field_alone_passes_the_body_byte_for_byte() -> None:
    body = b' {"a" : 1.0, "b":"\\u003c"}\n'
    assert published(JsonFilter(require_field="a"), body) == body


@pytest.mark.parametrize(
    "body",
    [b"", b"x", b"[1]", b'"a"', b"1", b"true", b'{"a":1}{}', b'{"a":1}\x0c', b"\xef\xbb\xbf{}"],
)
def test_not_an_object_is_dropped_with_go_s_log_line(body: bytes) -> None:
    verdict = JsonFilter(require_field="a").apply(body)
    assert verdict == Verdict(Action.DROP, log=DECODE_ERROR_LOG + body.decode(errors="replace"))


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1e400}',  # overflows float64, even nested
        b'{"b":[-1e400]}',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":"\x01"}',  # a raw control character
        b'{"a":01}',
        b'{"a":1.}',
        b'{"a":"\\ud8zz"}',
        b'{"a":1,}',
        b'{"\xff":1}\xff',  # invalid UTF-8 outside a string
    ],
)
def test_what_go_s_decoder_rejects_is_dropped(body: bytes) -> None:
    assert JsonFilter(whitelist=("a",)).apply(body).action is Action.DROP


def test_undecodable_body_is_logged_readably() -> None:
    verdict = JsonFilter(whitelist=("a",)).apply(b"\xff{")
    assert verdict.log == DECODE_ERROR_LOG + "\\xff{"


def test_null_is_an_empty_object() -> None:
    assert published(WHITELIST_AB, b"null") == b"{}"
    assert JsonFilter(require_field="a").apply(b" null ") == Verdict(Action.DROP)
    requeue = Verdict(Action.REQUEUE, log=MISSING_FIELD_LOG)
    assert JsonFilter(require_field="a", require_value="1").apply(b"null") == requeue


def test_missing_field_drops_silently_without_a_value_and_requeues_with_one() -> None:
    assert JsonFilter(require_field="a").apply(b'{"b":1}') == Verdict(Action.DROP)
    verdict = JsonFilter(require_field="a", require_value="x").apply(b'{"b":1}')
    assert verdict == Verdict(Action.REQUEUE, log=MISSING_FIELD_LOG)


@pytest.mark.parametrize(
    ("wanted", "body", "passes"),
    [
        ("1000", b'{"a":"1000"}', True),  # a string compares as text
        ("1000", b'{"a":1000}', True),
        ("1000", b'{"a":1e3}', True),
        ("+1e3", b'{"a":"1000"}', False),
        ("+1e3", b'{"a":1000.0}', True),
        ("0x1.f4p9", b'{"a":1000}', True),
        ("1_000", b'{"a":1000}', True),  # Go's ParseFloat takes underscores between digits
        ("1_000", b'{"a":"1_000"}', True),
        ("00001000", b'{"a":1000}', True),
        ("-0", b'{"a":0}', True),
        ("9007199254740993", b'{"a":9007199254740992}', True),  # equal as float64
        ("1e400", b'{"a":1e308}', False),  # out of range: not a number for Go
        ("inf", b'{"a":1e308}', False),
        ("NaN", b'{"a":"NaN"}', True),
        ("true", b'{"a":true}', False),  # other types never match
        ("null", b'{"a":null}', False),
        ("1", b'{"a":[1]}', False),
        ("x", b'{"a":"X"}', False),
    ],
)
def test_required_value(wanted: str, body: bytes, passes: bool) -> None:
    verdict = JsonFilter(require_field="a", require_value=wanted).apply(body)
    assert verdict == (Verdict(Action.PUBLISH, body) if passes else Verdict(Action.DROP))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("+1", 1.0),
        ("-1.5e-3", -0.0015),
        (".5", 0.5),
        ("5.", 5.0),
        ("1.e5", 1e5),
        ("1e1_0", 1e10),
        ("1_000.0_1", 1000.01),
        ("0x1p-2", 0.25),
        ("0X1.8P1", 3.0),
        ("0x_1p0", 1.0),
        ("0x.8p1", 1.0),
        ("-Inf", float("-inf")),
        ("INFINITY", float("inf")),
        ("1e-400", 0.0),  # underflow is no error
        ("0x1p-2000", 0.0),
        ("0e99999", 0.0),
    ],
)
def test_go_parse_float_accepts(text: str, value: float) -> None:
    assert go_parse_float(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "", " 1", "1 ", ".", "1e", "1e+", "1e_1", "_1", "1_", "1__0", "1.2.3", "--1",
        "0x", "0x1", "0x1p", "0b101", "0o17", "+nan", "-nan", "infin", "infinityx",
        "1e400", "0x1p2000", "1.7976931348623159e308", "\u0661",
    ],
)  # fmt: skip
def test_go_parse_float_rejects(text: str) -> None:
    assert go_parse_float(text) is None


def test_go_parse_float_nan() -> None:
    value = go_parse_float("nAn")
    assert value is not None and value != value


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"b":2,"c":3,"a":1}', b'{"a":1,"b":2}'),  # only listed keys, sorted
        (b'{"c":3}', b"{}"),
        (b'{"a":1,"a":2}', b'{"a":2}'),  # duplicate keys: the last wins
        (b'{"a":1e21,"b":1e-7}', b'{"a":1e+21,"b":1e-7}'),
        (b'{"a":1.0e2,"b":-0.0}', b'{"a":100,"b":0}'),  # integral: written as int64
        (b'{"a":12345678901234567890}', b'{"a":12345678901234567000}'),
        (b'{"a":9007199254740993}', b'{"a":9007199254740992}'),
        (b'{"a":9223372036854775807}', b'{"a":9223372036854776000}'),  # 2^63: no int64
        (b'{"a":-9223372036854775808}', b'{"a":-9223372036854775808}'),
        (b'{"a":0.1,"b":1.5e300}', b'{"a":0.1,"b":1.5e+300}'),
        (
            b'{"a":[-0.0,1.0,1e21,1e-7,0.000001,1e20,1.5e-10,5e-324]}',
            b'{"a":[-0,1,1e+21,1e-7,0.000001,100000000000000000000,1.5e-10,5e-324]}',
        ),
        (
            b'{"a":{"z":1,"b":[true,false,null,{}],"\xc3\xa9":"\xf0\x9f\x98\x80"}}',
            b'{"a":{"b":[true,false,null,{}],"z":1,"\xc3\xa9":"\xf0\x9f\x98\x80"}}',
        ),
    ],
)
def test_whitelist_encodes_as_go_s_json_marshal(body: bytes, expected: bytes) -> None:
    assert published(WHITELIST_AB, body) == expected


def test_whitelist_escapes_strings_as_go() -> None:
    body = b'{"a":"<>&\xe2\x80\xa8\xe2\x80\xa9\x7f","b":"\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\\\/"}'
    expected = (
        b'{"a":"\\u003c\\u003e\\u0026\\u2028\\u2029\x7f",'
        b'"b":"\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\/"}'
    )
    assert published(WHITELIST_AB, body) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # each invalid byte is one U+FFFD (a truncated sequence too, and UTF-8 surrogates)
        (b'{"a":"\xff\xe2\x82","b":"\xed\xa0\x80"}', b'{"a":"' + b"\xef\xbf\xbd" * 3 + b'",'
         b'"b":"' + b"\xef\xbf\xbd" * 3 + b'"}'),
        # a lone surrogate escape is U+FFFD; a pair is one astral character
        (b'{"a":"\\ud800x","b":"\\ud83d\\ude00\\udc00"}',
         b'{"a":"\xef\xbf\xbdx","b":"\xf0\x9f\x98\x80\xef\xbf\xbd"}'),
        (b'{"a":"\\ud800\\ud800\\udc00\\\\ud800"}',
         b'{"a":"\xef\xbf\xbd\xf0\x90\x80\x80\\\\ud800"}'),
        # keys made equal by U+FFFD are duplicates, in Go's order: the last wins
        (b'{"a":{"\\ud800":1,"\\udc00":2},"b":{"\xff":1,"\\ud800":3,"\xfe":2}}',
         b'{"a":{"\xef\xbf\xbd":2},"b":{"\xef\xbf\xbd":2}}'),
    ],
)  # fmt: skip
def test_whitelist_replaces_what_is_not_unicode_as_go(body: bytes, expected: bytes) -> None:
    assert published(WHITELIST_AB, body) == expected


def test_required_field_and_whitelist_together() -> None:
    json_filter = JsonFilter(require_field="k", require_value="1", whitelist=("a",))
    assert published(json_filter, b'{"k":1,"a":"<"}') == b'{"a":"\\u003c"}'
    assert json_filter.apply(b'{"k":2,"a":1}') == Verdict(Action.DROP)


DEEP = 2000  # deeper than Python's json decoder goes (Go's limit is 10000)


def nested(value: bytes, depth: int = DEEP) -> bytes:
    return b'{"a":' + b"[" * depth + value + b"]" * depth + b"}"


def test_go_s_nesting_limit_is_10000_containers() -> None:
    json_filter = JsonFilter(whitelist=("a",))
    assert published(json_filter, nested(b"", 9999)) == nested(b"", 9999)
    assert json_filter.apply(nested(b"", 10000)).action is Action.DROP


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b' 1.0 , -0.0,1e21 ,\t1e-7,true,false,null,""', b"1,-0,1e+21,1e-7,true,false,null,\"\""),
        (b'{"k":1,"k":2,"\\ud800":"\xff<","\\udc00":"\\ud83d\\ude00"}',
         b'{"k":2,"\xef\xbf\xbd":"\xf0\x9f\x98\x80"}'),
        (b'[], {}, [{}], {"b":{"c":[]}}', b'[],{},[{}],{"b":{"c":[]}}'),
    ],
)  # fmt: skip
def test_deeply_nested_values_decode_as_shallow_ones(value: bytes, expected: bytes) -> None:
    json_filter = JsonFilter(whitelist=("a",))
    assert published(json_filter, nested(value, 1)) == nested(expected, 1)
    assert published(json_filter, nested(value)) == nested(expected)


@pytest.mark.parametrize(
    "value",
    [b"1e400", b"NaN", b'"\x01"', b"1,", b"01", b'{"k" 1}', b'{"k":1,}', b"tru", b"]", b"[]]"],
)
def test_deeply_nested_invalid_values_are_dropped(value: bytes) -> None:
    assert JsonFilter(whitelist=("a",)).apply(nested(value)).action is Action.DROP
