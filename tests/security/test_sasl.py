"""The server side of SASL PLAIN and SCRAM: full exchanges against scramp's
client, refusals, and arbitrary bytes that never escape as anything but SASL errors."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping

import pytest
from annal.security.sasl import (
    AUTHENTICATION_FAILED,
    PLAIN,
    SUPPORTED_MECHANISMS,
    IllegalSaslState,
    PlainServer,
    SaslAuthenticationError,
    SaslConfigError,
    SaslError,
    SaslServer,
    SaslServerFactory,
    ScramServer,
    UnsupportedSaslMechanism,
    new_server,
)
from annal.security.scram import (
    MECHANISMS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    make_credential,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from scramp import ScramClient

from annal import errors

USERS = {
    "alice": "alice-secret",
    "jösé 用户": "pässwörd 密码",  # non-ASCII name and password
    "a,b=c": "p,w=d",  # the characters SCRAM escapes in names
    "=2C": "=3D",  # names that look escaped already
}
CREDENTIALS: dict[str, dict[str, ScramCredential]] = {
    user: {m: make_credential(m, password) for m in MECHANISMS} for user, password in USERS.items()
}
CREDENTIALS["only-256"] = {SCRAM_SHA_256: make_credential(SCRAM_SHA_256, "secret-256")}


def lookup(user: str) -> Mapping[str, ScramCredential]:
    return CREDENTIALS.get(user, {})


def scram_client(mechanism: str, user: str, password: str) -> ScramClient:
    return ScramClient([mechanism], user, password)


def first_step(mechanism: str, user: str, password: str) -> tuple[ScramServer, ScramClient]:
    """A server and client past the first round trip."""
    server = ScramServer(mechanism, lookup)
    client = scram_client(mechanism, user, password)
    server_first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    return server, client


def exchange(mechanism: str, user: str, password: str) -> ScramServer:
    """A whole SCRAM exchange; the client checks the server's signature."""
    server, client = first_step(mechanism, user, password)
    assert not server.complete
    server_final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(server_final.decode())
    return server


def refused(mechanism: str, user: str, password: str) -> str:
    with pytest.raises(SaslAuthenticationError) as caught:
        exchange(mechanism, user, password)
    assert caught.value.code is errors.SASL_AUTHENTICATION_FAILED
    return str(caught.value)


# -- SCRAM: exchanges -----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user", sorted(USERS))
def test_scram_exchange(mechanism: str, user: str) -> None:
    server = exchange(mechanism, user, USERS[user])
    assert server.complete
    assert server.authorization_id == user
    assert server.mechanism == mechanism


def test_scram_name_travels_escaped_and_is_looked_up_unescaped() -> None:
    asked: list[str] = []

    def recording(user: str) -> Mapping[str, ScramCredential]:
        asked.append(user)
        return lookup(user)

    server = ScramServer(SCRAM_SHA_256, recording)
    client = scram_client(SCRAM_SHA_256, "a,b=c", USERS["a,b=c"])
    client_first = client.get_client_first()
    assert client_first.startswith("n,,n=a=2Cb=3Dc,r=")
    client.set_server_first(server.evaluate(client_first.encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    assert asked == ["a,b=c"]
    assert server.authorization_id == "a,b=c"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scram_messages_have_rfc5802s_shape(mechanism: str) -> None:
    server, client = first_step(mechanism, "alice", "alice-secret")
    attributes = dict(a.split("=", 1) for a in client.server_first.split(","))
    assert list(attributes) == ["r", "s", "i"]
    assert attributes["r"].startswith(client.c_nonce.nonce)
    assert attributes["i"] == "4096"
    assert base64.b64decode(attributes["s"]) == CREDENTIALS["alice"][mechanism].salt
    server_final = server.evaluate(client.get_client_final().encode())
    assert server_final.startswith(b"v=")


def test_scram_accepts_the_y_flag() -> None:
    """'y': the client could bind to the channel but believes the server cannot."""
    server = ScramServer(SCRAM_SHA_512, lookup)
    client = ScramClient(
        [SCRAM_SHA_512], "alice", "alice-secret", channel_binding=("tls-unique", b"x" * 12)
    )
    client_first = client.get_client_first()
    assert client_first.startswith("y,,")
    client.set_server_first(server.evaluate(client_first.encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    assert server.authorization_id == "alice"


# -- SCRAM: refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_fail_alike(mechanism: str) -> None:
    wrong_password = refused(mechanism, "alice", "not-alice-secret")
    unknown_user = refused(mechanism, "mallory", "alice-secret")
    no_credential_for_mechanism = refused(SCRAM_SHA_512, "only-256", "secret-256")
    assert wrong_password == unknown_user == no_credential_for_mechanism == AUTHENTICATION_FAILED
    assert "alice-secret" not in wrong_password


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_gets_a_plausible_and_stable_server_first(mechanism: str) -> None:
    def server_first(user: str) -> dict[str, str]:
        _, client = first_step(mechanism, user, "whatever")
        return dict(a.split("=", 1) for a in client.server_first.split(","))

    first, again, other = server_first("mallory"), server_first("mallory"), server_first("eve")
    known = server_first("alice")
    assert first["s"] == again["s"] != other["s"]  # the same user sees the same salt
    assert first["i"] == known["i"] == "4096"
    assert len(base64.b64decode(first["s"])) == len(base64.b64decode(known["s"]))


def test_non_ascii_wrong_password_fails() -> None:
    assert refused(SCRAM_SHA_256, "jösé 用户", "pässwörd 密码!") == AUTHENTICATION_FAILED


def client_first_of(user: str = "alice") -> str:
    return scram_client(SCRAM_SHA_256, user, "x").get_client_first()


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"", "client-first message is empty"),
        (b"\xff\xfe", "client-first message is not valid UTF-8"),
        ("n,,n=jos\u00e9,r=abc".encode("latin-1"), "not valid UTF-8"),
        (b"n", "must start with the GS2 header"),
        (b"n,n=alice,r=abc", "GS2 channel-binding flag|other than an authorization id"),
        (b"x,,n=alice,r=abc", "GS2 channel-binding flag must be 'n'"),
        (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
        (b"p=tls-server-end-point,,n=alice,r=abc", "channel binding is not supported"),
        (b"n,a=alice,n=alice,r=abc", r"authorization id \(a=\)"),
        (b"n,zz,n=alice,r=abc", "other than an authorization id"),
        (b"n,,m=ext,n=alice,r=abc", r"mandatory SCRAM extensions \(m=\)"),
        (b"n,,n=alice", "expected n=<user>,r=<nonce>"),
        (b"n,,r=abc,n=alice", "expected n=<user>,r=<nonce>"),
        (b"n,,n=,r=abc", "the user name is empty"),
        (b"n,,n=a=2Xb,r=abc", "'=' must start '=2C'"),
        (b"n,,n=a=b,r=abc", "'=' must start '=2C'"),
        (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens are not supported"),
        (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation tokens are not supported"),
        (b"n,,n=alice,r=abc,tokenauth=false", "unsupported SCRAM extension 'tokenauth'"),
        (b"n,,n=alice,r=abc,foo=bar", "unsupported SCRAM extension 'foo'"),
        (b"n,,n=alice,r=", "invalid SCRAM client-first message"),
        (b"n,,n=alice,r=a\x00b", "invalid SCRAM client-first message"),
        (b"n,,n=alice,r=abc,x=1,x=2", "invalid SCRAM client-first message"),
        (b"n,,n=ali\x07ce,r=abc", "invalid SCRAM client-first message"),
        ("n,,n=\U0001f600,r=abc".encode(), "invalid SCRAM client-first message"),
    ],
)
def test_malformed_client_first(message: bytes, error: str) -> None:
    server = ScramServer(SCRAM_SHA_256, lookup)
    with pytest.raises(SaslAuthenticationError, match=error):
        server.evaluate(message)
    with pytest.raises(IllegalSaslState, match="has failed"):
        server.evaluate(client_first_of().encode())


def test_single_letter_extensions_are_carried() -> None:
    """An unknown one-letter attribute after the nonce is allowed by RFC 5802 and
    takes part in the proof; scramp's client never sends one, so only the first
    step is checked."""
    server = ScramServer(SCRAM_SHA_256, lookup)
    assert server.evaluate(b"n,,n=alice,r=abc,x=1").startswith(b"r=abc")


def client_final_parts(mechanism: str = SCRAM_SHA_256) -> tuple[ScramServer, dict[str, str]]:
    server, client = first_step(mechanism, "alice", "alice-secret")
    final = client.get_client_final()
    return server, dict(a.split("=", 1) for a in final.split(","))


def join(parts: Mapping[str, str]) -> bytes:
    return ",".join(f"{k}={v}" for k, v in parts.items()).encode()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"c": "eSws"}, r"channel binding \(c=\) does not repeat"),  # "y,," after "n,,"
        ({"c": "bixhPWFsaWNlLA=="}, r"channel binding \(c=\) does not repeat"),  # n,a=alice,
        ({"c": "!!"}, "invalid SCRAM client-final message"),
        ({"r": "not-the-nonce"}, r"nonce \(r=\) is not the one the server sent"),
        ({"p": "AAAA"}, AUTHENTICATION_FAILED),
        ({"p": "not base64!"}, "invalid SCRAM client-final message"),
        ({"p": ""}, "invalid SCRAM client-final message"),
    ],
)
def test_malformed_client_final(change: dict[str, str], error: str) -> None:
    server, parts = client_final_parts()
    with pytest.raises(SaslAuthenticationError, match=error):
        server.evaluate(join({**parts, **change}))
    assert not server.complete


@pytest.mark.parametrize(
    "message",
    [b"", b"\xff", b"c=biws", b"garbage", b"v=abc", b"c=biws,r=abc", b"c=biws,p=abc,r=x"],
)
def test_short_or_garbled_client_final(message: bytes) -> None:
    server, _ = client_final_parts()
    with pytest.raises(SaslAuthenticationError, match="client-final message"):
        server.evaluate(message)


def test_a_flipped_proof_bit_fails_as_a_wrong_password() -> None:
    server, parts = client_final_parts(SCRAM_SHA_512)
    proof = bytearray(base64.b64decode(parts["p"]))
    proof[0] ^= 1
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(join({**parts, "p": base64.b64encode(proof).decode()}))
    assert str(caught.value) == AUTHENTICATION_FAILED


# -- SCRAM: order ---------------------------------------------------------------------------------


def test_client_final_first_is_out_of_order() -> None:
    server = ScramServer(SCRAM_SHA_256, lookup)
    with pytest.raises(IllegalSaslState, match="expected the SCRAM client-first message") as caught:
        server.evaluate(b"c=biws,r=abc,p=AAAA")
    assert caught.value.code is errors.ILLEGAL_SASL_STATE


def test_client_first_twice_is_out_of_order() -> None:
    server, _ = first_step(SCRAM_SHA_256, "alice", "alice-secret")
    with pytest.raises(IllegalSaslState, match="expected the SCRAM client-final message"):
        server.evaluate(client_first_of().encode())


def test_nothing_after_completion() -> None:
    server = exchange(SCRAM_SHA_256, "alice", "alice-secret")
    for message in (b"", b"c=biws", client_first_of().encode()):
        with pytest.raises(IllegalSaslState, match="already complete"):
            server.evaluate(message)
    assert server.complete and server.authorization_id == "alice"


def test_nothing_after_failure() -> None:
    server, client = first_step(SCRAM_SHA_256, "alice", "wrong")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.get_client_final().encode())
    with pytest.raises(IllegalSaslState, match="has failed"):
        server.evaluate(b"c=biws,r=abc,p=AAAA")
    assert not server.complete


@pytest.mark.parametrize("server", [ScramServer(SCRAM_SHA_256, lookup), PlainServer(lookup)])
def test_no_authorization_id_before_completion(server: SaslServer) -> None:
    with pytest.raises(IllegalSaslState, match="not complete"):
        _ = server.authorization_id
    assert not server.complete


def test_lookup_failures_propagate_unchanged() -> None:
    class StoreDown(Exception):
        pass

    def broken(user: str) -> Mapping[str, ScramCredential]:
        raise StoreDown(user)

    scram = ScramServer(SCRAM_SHA_256, broken)
    with pytest.raises(StoreDown):
        scram.evaluate(client_first_of().encode())
    with pytest.raises(IllegalSaslState):
        scram.evaluate(client_first_of().encode())
    with pytest.raises(StoreDown):
        PlainServer(broken).evaluate(b"\0alice\0alice-secret")


# -- PLAIN ----------------------------------------------------------------------------------------


def plain(message: bytes) -> PlainServer:
    server = PlainServer(lookup)
    assert server.evaluate(message) == b""
    return server


@pytest.mark.parametrize("user", sorted(USERS))
def test_plain(user: str) -> None:
    message = f"\0{user}\0{USERS[user]}".encode()
    server = plain(message)
    assert server.complete and server.authorization_id == user and server.mechanism == PLAIN
    assert plain(f"{user}\0{user}\0{USERS[user]}".encode()).authorization_id == user


def test_plain_checks_any_stored_mechanism() -> None:
    assert plain(b"\0only-256\0secret-256").authorization_id == "only-256"


def plain_refused(message: bytes) -> str:
    server = PlainServer(lookup)
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(message)
    assert caught.value.code is errors.SASL_AUTHENTICATION_FAILED
    assert not server.complete
    with pytest.raises(IllegalSaslState, match="has failed"):
        server.evaluate(b"\0alice\0alice-secret")
    return str(caught.value)


def test_plain_wrong_password_and_unknown_user_fail_alike() -> None:
    wrong = plain_refused(b"\0alice\0hunter2")
    unknown = plain_refused(b"\0mallory\0hunter2")
    assert wrong == unknown == AUTHENTICATION_FAILED
    assert plain_refused("\0jösé 用户\0pässwörd 密码 ".encode()) == AUTHENTICATION_FAILED


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"bob\0alice\0alice-secret", "authorization id that is different from username"),
        (b"", r"expected authzid NUL username NUL password \(3 fields\), got 1"),
        (b"alice", "got 1 field"),
        (b"alice\0hunter2", "got 2 field"),
        (b"\0alice\0hunter2\0", "got 4 field"),
        (b"\0alice\0hun\0ter2", "got 4 field"),
        (b"\0\0hunter2", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"\0alice\0hunter2\xff", "SASL/PLAIN message is not valid UTF-8"),
        ("\0jösé\0hunter2".encode("latin-1"), "not valid UTF-8"),
    ],
)
def test_plain_malformed(message: bytes, error: str) -> None:
    text = plain_refused(message)
    assert re.search(error, text)
    assert "hunter" not in text and "ter2" not in text


def test_plain_nothing_after_completion() -> None:
    server = plain(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslState, match="already complete"):
        server.evaluate(b"\0alice\0alice-secret")


def test_plain_takes_bytes_like_messages() -> None:
    assert plain(bytearray(b"\0alice\0alice-secret")).complete  # type: ignore[arg-type]
    with pytest.raises(SaslAuthenticationError, match="must be bytes"):
        PlainServer(lookup).evaluate("\0alice\0alice-secret")  # type: ignore[arg-type]


# -- choosing a server ----------------------------------------------------------------------------


def test_new_server() -> None:
    enabled = [PLAIN, SCRAM_SHA_512]
    assert isinstance(new_server(PLAIN, enabled, lookup), PlainServer)
    scram = new_server(SCRAM_SHA_512, enabled, lookup)
    assert isinstance(scram, ScramServer) and scram.mechanism == SCRAM_SHA_512
    for mechanism in (SCRAM_SHA_256, "GSSAPI", "plain", "X" * 500):
        with pytest.raises(UnsupportedSaslMechanism, match="enabled are PLAIN, SCRAM-SHA-512"):
            new_server(mechanism, enabled, lookup)
    with pytest.raises(UnsupportedSaslMechanism, match="is not enabled: enabled are SCRAM-SHA-256"):
        new_server("GSSAPI", ["GSSAPI", SCRAM_SHA_256], lookup)
    with pytest.raises(UnsupportedSaslMechanism, match=r"enabled are \(none\)") as caught:
        new_server(PLAIN, [], lookup)
    assert caught.value.code is errors.UNSUPPORTED_SASL_MECHANISM


def test_scram_server_refuses_other_mechanisms() -> None:
    with pytest.raises(UnsupportedSaslMechanism, match="not a SCRAM mechanism"):
        ScramServer("SCRAM-SHA-1", lookup)


def test_factory() -> None:
    factory = SaslServerFactory([SCRAM_SHA_256, PLAIN], lookup)  # type: ignore[arg-type]
    assert factory.enabled_mechanisms == (SCRAM_SHA_256, PLAIN)
    assert isinstance(factory(PLAIN), PlainServer)
    with pytest.raises(UnsupportedSaslMechanism):
        factory(SCRAM_SHA_512)
    with pytest.raises(SaslConfigError, match="'GSSAPI' are not implemented") as caught:
        SaslServerFactory(("GSSAPI", PLAIN), lookup)
    assert caught.value.code is errors.INVALID_CONFIG
    assert SUPPORTED_MECHANISMS == (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


# -- arbitrary input ------------------------------------------------------------------------------

SCRAM_ALPHABET = "nypacrmvei=,2CD3tokenauthrue+/biwsAZ09\x00\xe9\u7528"
scram_text = st.text(alphabet=SCRAM_ALPHABET, max_size=80)
messages = st.one_of(
    st.binary(max_size=200),
    scram_text.map(str.encode),
    st.tuples(st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n,a=x,"]), scram_text).map(
        lambda t: (t[0] + t[1]).encode()
    ),
    st.tuples(st.sampled_from(["alice", "mallory", "a=2Cb"]), scram_text).map(
        lambda t: f"n,,n={t[0]},r=abc{t[1]}".encode()
    ),
)


def feed(server: SaslServer, message: bytes) -> None:
    try:
        server.evaluate(message)
    except SaslError as exc:
        assert isinstance(exc, SaslAuthenticationError | IllegalSaslState)
        assert type(exc).code in (errors.SASL_AUTHENTICATION_FAILED, errors.ILLEGAL_SASL_STATE)


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), steps=st.lists(messages, min_size=1, max_size=4))
def test_arbitrary_scram_messages_raise_only_sasl_errors(
    mechanism: str, steps: list[bytes]
) -> None:
    server = ScramServer(mechanism, lookup)
    for message in steps:
        feed(server, message)
    assert not server.complete


@settings(max_examples=300, deadline=None)
@given(
    mechanism=st.sampled_from(MECHANISMS),
    user=st.sampled_from(["alice", "mallory", "a,b=c"]),
    final=st.one_of(
        messages,
        st.tuples(scram_text, scram_text).map(lambda t: f"c=biws,r={t[0]},p={t[1]}".encode()),
    ),
)
def test_arbitrary_client_final_raises_only_sasl_errors(
    mechanism: str, user: str, final: bytes
) -> None:
    server, _ = first_step(mechanism, user, "anything")
    feed(server, final)
    assert not server.complete


@settings(max_examples=100, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), data=st.data())
def test_mutated_client_final_raises_only_sasl_errors(mechanism: str, data: st.DataObject) -> None:
    server, client = first_step(mechanism, "alice", "alice-secret")
    final = bytearray(client.get_client_final().encode())
    index = data.draw(st.integers(0, len(final) - 1))
    final[index] = data.draw(st.integers(0, 255).filter(lambda b: b != final[index]))
    feed(server, bytes(final))
    assert not server.complete


@settings(max_examples=200, deadline=None)
@given(
    message=st.one_of(
        st.binary(max_size=100),
        st.lists(st.text(max_size=12), max_size=5).map(lambda p: "\0".join(p).encode()),
        st.text(max_size=20).map(lambda p: f"\0alice\0{p}".encode()),
    )
)
def test_arbitrary_plain_messages_raise_only_sasl_errors(message: bytes) -> None:
    server = PlainServer(lookup)
    feed(server, message)
    assert server.complete == (message == b"\0alice\0alice-secret")


def test_a_final_nonce_that_repeats_the_client_nonce_is_accepted_as_kafka_does() -> None:
    """librdkafka before 2.6.1 sends r=<client nonce><server nonce>; Kafka's brokers
    accept a final nonce ending with theirs, and so does annal (the proof is made
    over the message as sent).  Any other nonce is still refused."""
    import base64
    import hashlib
    import hmac

    credential = make_credential("SCRAM-SHA-256", "pw")
    for extra, accepted in [("", True), ("cnonce", True), ("other", False)]:
        server = ScramServer("SCRAM-SHA-256", lambda _user: {"SCRAM-SHA-256": credential})
        first_bare = "n=alice,r=cnonce"
        server_first = server.evaluate(b"n,," + first_bare.encode()).decode()
        nonce = server_first.split(",")[0][2:]
        without_proof = f"c=biws,r={extra}{nonce}"
        salted = hashlib.pbkdf2_hmac("sha256", b"pw", credential.salt, credential.iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        if accepted:
            assert server.evaluate(final).startswith(b"v=") and server.complete
        else:
            with pytest.raises(SaslAuthenticationError):
                server.evaluate(final)
