"""pipeline.settings.conninfo reads and writes key=value strings exactly as libpq (through psycopg) does,
and declines (None) whatever it would read differently: compared on hand-picked shapes and on
thousands of random strings made of the characters that matter."""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pipeline.settings import conninfo

SHAPES = [
    "", "   ", "host=127.0.0.1 port=5432 user=postgres dbname=lake",
    "user=postgres dbname=el_test host=127.0.0.1 port=5432", "host = h   port=1", "host= h", "host =h",
    "password='a b' user=x", r"password='it\'s' user=x", r"password=a\ b", r"password=a\\b", "password=''",
    "password=", "password= user=x", "host=h\tport=5\n", "dbname='' host=h", "host=h host=k", "options='-c x=y'",
    r"password=trail\\", "password=trail\\", "password='open", "nokey=1", "host", "host h", "=x", "host==x",
    "host='a'b", "host=a'b", "host=é dbname=ü", "host=h\x0bport=1", "host=h\u00a0port=1",
    "postgresql://u@h/d", "postgres://h", "sslmode=require application_name='my app' connect_timeout=10",
    "host=/tmp,/var/run port=5432,5433", "service=x",
]


def _libpq(text: str) -> dict[str, str] | None:
    try:
        return {k: str(v) for k, v in conninfo_to_dict(text).items()}
    except psycopg.Error:
        return None


@pytest.mark.parametrize("text", SHAPES)
def test_a_string_reads_as_libpq_reads_it_or_is_left_to_libpq(text):
    mine = conninfo.parse(text)
    if mine is not None:
        assert mine == _libpq(text) and list(mine) == list(_libpq(text) or {}), text


def test_random_strings_read_as_libpq_reads_them():
    rng = random.Random(7)
    atoms = ["host", "port", "user", "dbname", "password", "options", "bogus", "=", " ", "  ", "\t", "'", "\\",
             "a", "b c", "1", "x=y", "é", "\n", "", " host=", " user=", " password='", " options=", "' "]
    read = 0
    for _ in range(4000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 12)))
        mine = conninfo.parse(text)
        if mine is not None:
            read += 1
            theirs = _libpq(text)
            assert theirs is not None and mine == theirs and list(mine) == list(theirs), repr(text)
    assert read > 300  # the comparison reached the strings it reads, not only the ones it declines


def test_settings_render_as_make_conninfo_renders_them():
    rng = random.Random(11)
    values = ["", "a", "a b", "it's", "back\\slash", " lead", "tab\there", "é", "x=y", "'", "\\"]
    for _ in range(500):
        params = {key: rng.choice(values) for key in rng.sample(["host", "user", "password", "options", "port"],
                                                                 rng.randint(1, 5))}
        assert conninfo.render(params) == make_conninfo("", **params)
        assert conninfo.parse(conninfo.render(params) or "") == _libpq(make_conninfo("", **params))
    assert conninfo.render({"bogus": "1"}) is None


def test_the_keywords_are_the_libpq_psycopg_carries_in_its_order():
    assert tuple(o.keyword.decode() for o in pq.Conninfo.get_defaults()) == conninfo.KEYWORDS
