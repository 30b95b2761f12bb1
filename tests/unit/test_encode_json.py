"""Canonical JSON of results and payloads: the shortcut for None is what the long way makes."""

from __future__ import annotations

import hashlib
import json

import pytest

from tenure.errors import PayloadTooLarge
from tenure.validation import encode_json


def test_none_encodes_as_the_long_way_would() -> None:
    encoded = encode_json(None, "result", 1 << 20)
    assert (encoded.text, encoded.size) == (json.dumps(None), 4)
    assert encoded.sha256 == hashlib.sha256(b"null").hexdigest()
    assert encode_json([None], "result", 1 << 20).text == f"[{encoded.text}]"


def test_none_over_a_limit_of_three_bytes_is_refused() -> None:
    with pytest.raises(PayloadTooLarge, match="4 bytes, over the limit of 3 bytes"):
        encode_json(None, "result", 3)
    assert encode_json(None, "result", 4).size == 4
