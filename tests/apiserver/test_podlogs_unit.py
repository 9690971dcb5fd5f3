"""pods/log pieces that need no server: which lines a request gets (tail, then since), the
timestamps prefix, the container a request means and the options kube-apiserver refuses."""

from __future__ import annotations

import pytest

from tpujob.local.apiserver.errors import ApiError
from tpujob.local.apiserver.podlogs import LogOptions, container_name, parse_options, render, select
from tpujob.local.containerlog import format_timestamp

pytestmark = pytest.mark.unit

S = 1_000_000_000
LINES = [(format_timestamp(t * S), f"line {t}\n".encode()) for t in (10, 20, 30, 40)]


@pytest.mark.parametrize(("options", "since", "expected"), [
    (LogOptions(), None, [10, 20, 30, 40]),
    (LogOptions(tail_lines=2), None, [30, 40]),
    (LogOptions(tail_lines=0), None, []),
    (LogOptions(tail_lines=9), None, [10, 20, 30, 40]),
    (LogOptions(), 20 * S, [20, 30, 40]),           # at the time counts
    (LogOptions(), 20 * S + 1, [30, 40]),
    (LogOptions(tail_lines=3), 30 * S, [30, 40]),
    (LogOptions(tail_lines=1), 10 * S, [40]),
])
def test_select(options, since, expected):
    assert [line for _, line in select(LINES, options, since)] == \
        [f"line {t}\n".encode() for t in expected]


def test_timestamps_prefix_nine_digits_utc():
    assert format_timestamp(1_700_000_000_123_000_000) == "2023-11-14T22:13:20.123000000Z"
    assert render(LINES[:1], True) == b"1970-01-01T00:00:10.000000000Z line 10\n"
    assert render(LINES[:1], False) == b"line 10\n"


POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}],
                                           "initContainers": [{"name": "init"}]}}


@pytest.mark.parametrize(("asked", "expected"), [
    ("a", "a"), ("init", "init"),
    ("", "a container name must be specified for pod p, choose one of: [a b] or one of the "
         "init containers: [init]"),
    ("c", "container c is not valid for pod p"),
])
def test_container_name(asked, expected):
    if expected == asked:
        assert container_name(POD, asked) == asked
        return
    with pytest.raises(ApiError) as err:
        container_name(POD, asked)
    assert (err.value.code, err.value.message) == (400, expected)


def test_only_container_is_the_default():
    assert container_name({"metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "only"}]}}, "") == "only"


@pytest.mark.parametrize(("query", "code", "message"), [
    ({"tailLines": "-1"}, 422, 'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: '
                               "must be greater than or equal to 0"),
    ({"limitBytes": "0"}, 422, 'PodLogOptions "p" is invalid: limitBytes: Invalid value: 0: '
                               "must be greater than 0"),
    ({"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"}, 422,
     'PodLogOptions "p" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` '
     "may be specified"),
    ({"tailLines": "x"}, 400, 'strconv.ParseInt: parsing "x": invalid syntax'),
])
def test_refused_options(query, code, message):
    with pytest.raises(ApiError) as err:
        parse_options(query, "p")
    assert (err.value.code, err.value.message) == (code, message)


def test_options_parsed():
    options = parse_options({"container": "c", "follow": "true", "previous": "1",
                             "tailLines": "5", "sinceSeconds": "30", "timestamps": "true"}, "p")
    assert options == LogOptions(container="c", follow=True, previous=True, timestamps=True,
                                 tail_lines=5, since_seconds=30)


@pytest.mark.parametrize("tail, expected", [
    (0, 0), (1, 1), (299, 299), (300, 300), (301, 300), (400, 300), (599, 300), (600, 300),
    (10_000, 300)])
def test_tail_lines_past_the_log_give_the_whole_log(tail, expected):
    # n+1 .. 2n-1 once gave too few lines (a negative slice start): tailLines=400 on a
    # 300-line log returned 100.
    lines = [(format_timestamp(i), f"line {i}\n".encode()) for i in range(300)]
    got = select(lines, LogOptions(tail_lines=tail), None)
    assert len(got) == expected
    assert got == lines[len(lines) - expected:] if expected else got == []
