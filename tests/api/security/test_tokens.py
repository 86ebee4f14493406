"""Tokens and signed values on their own."""

from __future__ import annotations

import time

import pytest

from gpufleet.api.security.signing import sign, unsign
from gpufleet.client.credentials import client_headers
from gpufleet.users.tokens import hash_token, looks_like_token, new_token


def test_new_tokens_are_random_and_only_their_hash_is_kept() -> None:
    a, b = new_token(), new_token()
    assert a.secret != b.secret and looks_like_token(a.secret)
    assert a.token_hash == hash_token(a.secret) and a.secret not in a.token_hash
    assert a.prefix == a.secret[:10] and len(a.secret) >= 40


def test_signed_values_expire_and_resist_tampering() -> None:
    v = sign("k" * 40, "session", {"u": "x"}, ttl_s=60)
    assert unsign("k" * 40, "session", v)["u"] == "x"
    assert unsign("k" * 40, "ws-ticket", v) is None  # another purpose
    assert unsign("j" * 40, "session", v) is None  # another secret
    assert unsign("k" * 40, "session", v, now=time.time() + 61) is None  # expired
    head, raw, sig = v.split(".")
    assert unsign("k" * 40, "session", f"{head}.{raw}x.{sig}") is None
    for junk in ("", "v1", "v1..", "v2.a.b", "v1.é.b", "x" * 5000):
        assert unsign("k" * 40, "session", junk) is None


def test_client_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_TOKEN", raising=False)
    assert client_headers() == {}
    monkeypatch.setenv("GPUFLEET_TOKEN", " gf_abc \n")
    assert client_headers() == {"Authorization": "Bearer gf_abc"}
    assert client_headers("gf_other") == {"Authorization": "Bearer gf_other"}


def test_origin_matching_normalises_default_ports_and_case(tmp_path) -> None:
    from gpufleet.api.security.origins import origin_allowed
    from gpufleet.config import load_settings

    s = load_settings(data_dir=tmp_path, cors_origins=["https://Dash.Example.org:443"])
    assert origin_allowed(None, "x", s)  # not a browser
    assert origin_allowed("https://gpus.example.org", "gpus.example.org", s)
    assert origin_allowed("https://gpus.example.org", "gpus.example.org:443", s)
    assert origin_allowed("https://gpus.example.org:8443", "gpus.example.org:8443", s)
    assert not origin_allowed("https://gpus.example.org:8443", "gpus.example.org", s)
    assert origin_allowed("http://[::1]:8000", "[::1]:8000", s)
    assert origin_allowed("https://dash.example.org", "other", s)  # configured
    for bad in ("https://evil.example", "null", "file://x", "https://gpus.example.org/path", "https://u@gpus.example.org"):
        assert not origin_allowed(bad, "gpus.example.org", s), bad
