"""Profiles, layout ids and names through the library, against the SPEC's
golden values."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest

import kvready

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_golden_name_and_part_of_the_spec():
    scope = hashlib.sha256(b"golden-compute").digest()
    lid = hashlib.sha256(b"golden-layout").digest()
    ident = kvready.Identity(scope, lid, [[4, 5], [0, 1, 2, 3]], [(4, 3), (1, 0)])
    assert ident.name(0, bytes(range(32))).hex() == (
        "ac0cbcea5a240bde17f6bac29386876a000102030405060708090a0b0c0d0e0f"
        "101112131415161718191a1b1c1d1e1f000100040003")
    assert len(ident.names(1, [bytes(32)] * 5)) == 5
    with pytest.raises(kvready.InvalidArgumentError, match="shard|index"):
        kvready.Identity(scope, lid, [[0]], [(2, 2)])
    with pytest.raises(kvready.InvalidArgumentError, match="layout id is empty"):
        kvready.Identity(scope, b"", [[0]])


def test_layout_id_of_the_golden_layout():
    doc = (ROOT / "staging" / "testdata" / "layout-simple.json").read_text()
    lid = kvready.layout_id(doc)
    assert lid.hex() == "cb34d92ec6d4961a36d053db281528986f5614c44e0cc7871dc06c0b897ffc9d"
    assert lid.tokens_per_block == 32
    with pytest.raises(kvready.InvalidArgumentError):
        kvready.layout_id("{}")


def test_profile_validation_reports_every_violation():
    profile = json.loads((ROOT / "docs" / "examples" / "profile.json").read_text())
    kvready.validate_profile(profile)
    profile["cache_dtype"] = "float16"
    profile["parallelism"]["tp"] = 2
    del profile["staging"]
    with pytest.raises(kvready.ProfileError) as ei:
        kvready.validate_profile(profile)
    msg = str(ei.value)
    for field in ("cache_dtype", "parallelism.tp", "staging"):
        assert field in msg
    with pytest.raises(kvready.ProfileError, match="not one JSON object"):
        kvready.validate_profile("{")
