"""SCRAM credentials: Kafka's stored format, making and checking them, and
kafka-configs.sh's --add-config / --delete-config spellings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import unicodedata

import pytest
from annal.security.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramConfigError,
    ScramCredential,
    ScramCredentialUpsertion,
    format_credential,
    make_credential,
    parse_add_config,
    parse_credential,
    parse_delete_config,
    parse_mechanism,
    scram_credentials,
    verify_password,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from scramp import ScramMechanism

from annal import errors

# RFC 7677's example: user "user", password "pencil", this salt, 4096 iterations.
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CREDENTIAL = (
    "salt=W22ZaJ0SNY7soEsUEjb6gQ==,"
    "stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
    "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,"
    "iterations=4096"
)
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


def rfc5802_keys(
    mechanism: str, password: str, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """StoredKey and ServerKey computed independently, from the RFC's formulas
    over the password's UTF-8 bytes (what Kafka's clients hash)."""
    name = HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return hashlib.new(name, client_key).digest(), server_key


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- mechanisms -----------------------------------------------------------------------------------


def test_mechanisms_are_kafkas() -> None:
    assert MECHANISMS == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert (MIN_ITERATIONS, MAX_ITERATIONS, DEFAULT_ITERATIONS) == (4096, 16384, 4096)
    assert parse_mechanism("SCRAM-SHA-512") == SCRAM_SHA_512


@pytest.mark.parametrize("name", ["SCRAM-SHA-1", "scram-sha-256", "PLAIN", "", "SCRAM-SHA-256 "])
def test_unknown_mechanism_lists_the_supported(name: str) -> None:
    with pytest.raises(ScramConfigError, match="SCRAM-SHA-256, SCRAM-SHA-512") as caught:
        parse_mechanism(name)
    assert caught.value.code is errors.INVALID_CONFIG
    assert isinstance(caught.value, errors.AnnalError)


# -- the stored format ----------------------------------------------------------------------------


def test_rfc7677_example_in_kafkas_format() -> None:
    credential = make_credential(SCRAM_SHA_256, "pencil", salt=RFC7677_SALT)
    assert format_credential(credential) == RFC7677_CREDENTIAL
    assert parse_credential(RFC7677_CREDENTIAL, SCRAM_SHA_256) == credential
    assert (credential.stored_key, credential.server_key) == rfc5802_keys(
        SCRAM_SHA_256, "pencil", RFC7677_SALT, 4096
    )


def test_credential_matches_rfc7677_exchange() -> None:
    """scramp's own server, given the credential, accepts RFC 7677's client proof
    and answers RFC 7677's server signature."""
    credential = parse_credential(RFC7677_CREDENTIAL)
    info = (credential.salt, credential.stored_key, credential.server_key, 4096)
    server = ScramMechanism(SCRAM_SHA_256).make_server(
        lambda _user: info, s_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    server.set_client_first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server.get_server_first() == (
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    server.set_client_final(
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server.get_server_final() == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("iterations", [4096, 8192, 16384])
def test_round_trip(mechanism: str, iterations: int) -> None:
    credential = make_credential(mechanism, "alice-secret", iterations)
    text = format_credential(credential)
    assert text.startswith("salt=") and text.endswith(f",iterations={iterations}")
    assert [part.split("=", 1)[0] for part in text.split(",")] == [
        "salt",
        "stored_key",
        "server_key",
        "iterations",
    ]
    assert parse_credential(text, mechanism) == credential
    assert (
        len(credential.stored_key)
        == len(credential.server_key)
        == (32 if mechanism == SCRAM_SHA_256 else 64)
    )


@settings(max_examples=50, deadline=None)
@given(
    salt=st.binary(min_size=1, max_size=64),
    stored=st.binary(min_size=1, max_size=64),
    server=st.binary(min_size=1, max_size=64),
    iterations=st.integers(MIN_ITERATIONS, MAX_ITERATIONS),
)
def test_any_credential_round_trips(
    salt: bytes, stored: bytes, server: bytes, iterations: int
) -> None:
    credential = ScramCredential(salt, stored, server, iterations)
    assert parse_credential(format_credential(credential)) == credential


def test_parse_tolerates_spaces_around_fields() -> None:
    spaced = RFC7677_CREDENTIAL.replace(",", " , ").replace("=W22", "= W22")
    assert parse_credential(spaced) == parse_credential(RFC7677_CREDENTIAL)


def test_scram_credentials_of_a_user_config() -> None:
    config = {
        "SCRAM-SHA-256": RFC7677_CREDENTIAL,
        "producer_byte_rate": "1024",
    }
    assert scram_credentials(config) == {SCRAM_SHA_256: parse_credential(RFC7677_CREDENTIAL)}
    with pytest.raises(ScramConfigError, match="SCRAM-SHA-512 keys are 64 bytes"):
        scram_credentials({"SCRAM-SHA-512": RFC7677_CREDENTIAL})


SECRET_B64 = "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "field #1 has no '='"),
        (f"salt={SECRET_B64}", "missing stored_key, server_key, iterations"),
        (
            f"salt={SECRET_B64},stored_key={SECRET_B64},server_key={SECRET_B64}",
            "missing iterations",
        ),
        (RFC7677_CREDENTIAL + ",extra=1", "unknown field 'extra'"),
        (RFC7677_CREDENTIAL + f",{SECRET_B64}", r"unknown field \(not shown\) \(#5\)"),
        (RFC7677_CREDENTIAL + ",WG5d8oPm3Otc", "field #5 has no '='"),
        (RFC7677_CREDENTIAL + ",WG5d8oPm3Otc=", r"unknown field \(not shown\)"),
        (RFC7677_CREDENTIAL + f",salt={SECRET_B64}", "field 'salt' twice"),
        (RFC7677_CREDENTIAL.replace("salt=W22", "salt=!W22"), "'salt' is not valid base64"),
        (RFC7677_CREDENTIAL.replace("=WG5d", "=WG5"), "'stored_key' is not valid base64"),
        (RFC7677_CREDENTIAL.replace("server_key=wfPL", "server_key=wf\u00e9L"), "'server_key'"),
        (RFC7677_CREDENTIAL.replace("salt=W22ZaJ0SNY7soEsUEjb6gQ==", "salt="), "'salt' is empty"),
        (RFC7677_CREDENTIAL.replace("=4096", "=4k"), "'iterations' is not a decimal integer"),
        (RFC7677_CREDENTIAL.replace("=4096", "=-4096"), "not a decimal integer"),
        (RFC7677_CREDENTIAL.replace("=4096", "="), "not a decimal integer"),
        (RFC7677_CREDENTIAL.replace("=4096", "=4095"), r"4095 is outside .*\[4096, 16384\]"),
        (RFC7677_CREDENTIAL.replace("=4096", "=16385"), "16385 is outside"),
    ],
)
def test_parse_errors_name_the_field_not_the_secret(text: str, message: str) -> None:
    with pytest.raises(ScramConfigError, match=message) as caught:
        parse_credential(text)
    assert SECRET_B64 not in str(caught.value)
    assert "WG5d" not in str(caught.value) and "W22Z" not in str(caught.value)


def test_parse_checks_key_sizes_for_a_mechanism() -> None:
    with pytest.raises(ScramConfigError, match="stored_key is 32 bytes but SCRAM-SHA-512"):
        parse_credential(RFC7677_CREDENTIAL, SCRAM_SHA_512)
    with pytest.raises(ScramConfigError, match="unknown SCRAM mechanism"):
        parse_credential(RFC7677_CREDENTIAL, "SCRAM-SHA-1")


def test_credential_refuses_bad_parts() -> None:
    with pytest.raises(ScramConfigError, match="salt is empty"):
        ScramCredential(b"", b"k", b"k", 4096)
    with pytest.raises(ScramConfigError, match="stored_key must be bytes"):
        ScramCredential(b"s", "k", b"k", 4096)  # type: ignore[arg-type]
    with pytest.raises(ScramConfigError, match="iterations must be an int"):
        ScramCredential(b"s", b"k", b"k", True)
    with pytest.raises(ScramConfigError, match="outside"):
        ScramCredential(b"s", b"k", b"k", 100)


def test_repr_and_str_hide_salt_and_keys() -> None:
    credential = make_credential(SCRAM_SHA_512, "alice-secret", salt=b"a-salt-of-16-by!")
    for shown in (repr(credential), str(credential), f"{credential}", repr([credential])):
        assert shown == "ScramCredential(iterations=4096)" or "iterations=4096" in shown
        for secret in (credential.salt, credential.stored_key, credential.server_key):
            assert repr(secret) not in shown
            assert b64(secret) not in shown
            assert secret.hex() not in shown
        assert "a-salt" not in shown


# -- making and verifying -------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("password", ["alice-secret", "pässwörd", "密码 with spaces", "a,b=c"])
def test_make_and_verify(mechanism: str, password: str) -> None:
    credential = make_credential(mechanism, password)
    assert credential.iterations == DEFAULT_ITERATIONS
    assert len(credential.salt) >= 12
    assert verify_password(mechanism, credential, password)
    assert not verify_password(mechanism, credential, password + "x")
    assert not verify_password(mechanism, credential, password.upper() + "!")
    assert not verify_password(mechanism, credential, "")
    other = SCRAM_SHA_512 if mechanism == SCRAM_SHA_256 else SCRAM_SHA_256
    assert not verify_password(other, credential, password)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_keys_are_rfc5802s_over_utf8(mechanism: str) -> None:
    salt = b"kafka-style-salt-26-chars!"
    credential = make_credential(mechanism, "pässwörd", 8192, salt)
    assert credential.salt == salt and credential.iterations == 8192
    assert (credential.stored_key, credential.server_key) == rfc5802_keys(
        mechanism, "pässwörd", salt, 8192
    )


def test_verify_accepts_a_credential_kafka_made_from_any_utf8() -> None:
    """Kafka hashes raw UTF-8 (no SASLprep), so it can store a decomposed
    password; verification does the same and matches it, and only it."""
    decomposed = unicodedata.normalize("NFD", "pässwörd")
    salt = b"0123456789abcdef"
    stored, server = rfc5802_keys(SCRAM_SHA_256, decomposed, salt, 4096)
    credential = ScramCredential(salt, stored, server, 4096)
    assert verify_password(SCRAM_SHA_256, credential, decomposed)
    assert not verify_password(SCRAM_SHA_256, credential, "pässwörd")
    assert not verify_password(SCRAM_SHA_256, credential, "\ud800")  # not encodable


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("", "the password is empty"),
        (unicodedata.normalize("NFD", "pässwörd"), "changes under SASLprep"),
        ("non\u00a0breaking", "changes under SASLprep"),
        ("tab\there", "SASLprep .* forbids"),
        ("emoji \U0001f600", "SASLprep .* forbids"),
    ],
)
def test_make_refuses_passwords_kafka_clients_would_hash_differently(
    password: str, message: str
) -> None:
    with pytest.raises(ScramConfigError, match=message) as caught:
        make_credential(SCRAM_SHA_256, password)
    if password:
        assert password not in str(caught.value)


@pytest.mark.parametrize("iterations", [0, 4095, 16385, 100_000])
def test_make_enforces_iteration_bounds(iterations: int) -> None:
    with pytest.raises(ScramConfigError, match=r"outside Kafka's bounds \[4096, 16384\]"):
        make_credential(SCRAM_SHA_512, "alice-secret", iterations)


def test_make_refuses_bad_mechanism_and_salt() -> None:
    with pytest.raises(ScramConfigError, match="unknown SCRAM mechanism 'SCRAM-SHA-1'"):
        make_credential("SCRAM-SHA-1", "alice-secret")
    with pytest.raises(ScramConfigError, match="at least 12"):
        make_credential(SCRAM_SHA_256, "alice-secret", salt=b"short")
    with pytest.raises(ScramConfigError, match="iterations must be an int"):
        make_credential(SCRAM_SHA_256, "alice-secret", 4096.0)  # type: ignore[arg-type]


def test_fresh_salts_differ() -> None:
    first = make_credential(SCRAM_SHA_256, "alice-secret")
    second = make_credential(SCRAM_SHA_256, "alice-secret")
    assert first.salt != second.salt and first.stored_key != second.stored_key


# -- --add-config / --delete-config ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SCRAM-SHA-512=[password=alice-secret]", [(SCRAM_SHA_512, "alice-secret", 4096)]),
        (
            "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
            [(SCRAM_SHA_256, "alice-secret", 8192)],
        ),
        (
            "SCRAM-SHA-256=[password=x],SCRAM-SHA-512=[password=y]",
            [(SCRAM_SHA_256, "x", 4096), (SCRAM_SHA_512, "y", 4096)],
        ),
        (
            "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
            "SCRAM-SHA-512=[password=alice-secret]",
            [(SCRAM_SHA_256, "alice-secret", 8192), (SCRAM_SHA_512, "alice-secret", 4096)],
        ),
        # the password runs to the closing bracket: ',' and '=' are its own
        ("SCRAM-SHA-512=[password=a,b=c,,d=]", [(SCRAM_SHA_512, "a,b=c,,d=", 4096)]),
        (
            "SCRAM-SHA-512=[password=p=1],SCRAM-SHA-256=[iterations=16384,password=,x]",
            [(SCRAM_SHA_512, "p=1", 4096), (SCRAM_SHA_256, ",x", 16384)],
        ),
        # as in Kafka, iterations after the password are part of the password
        (
            "SCRAM-SHA-512=[password=x,iterations=8192]",
            [(SCRAM_SHA_512, "x,iterations=8192", 4096)],
        ),
        (
            " SCRAM-SHA-256 = [ iterations = 8192 ,password=pässwörd] ,"
            " SCRAM-SHA-512=[password=y] ",
            [(SCRAM_SHA_256, "pässwörd", 8192), (SCRAM_SHA_512, "y", 4096)],
        ),
    ],
)
def test_add_config(text: str, expected: list[tuple[str, str, int]]) -> None:
    upsertions = parse_add_config(text)
    assert [(u.mechanism, u.password, u.iterations) for u in upsertions] == expected
    assert upsertions == [ScramCredentialUpsertion(*e) for e in expected]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--add-config is empty"),
        ("   ", "--add-config is empty"),
        ("hunter2", "entry #1 has no '='"),
        ("SCRAM-SHA-1=[password=hunter2]", "unknown SCRAM mechanism 'SCRAM-SHA-1'.*SCRAM-SHA-256"),
        ("producer_byte_rate=1024", "unknown SCRAM mechanism 'producer_byte_rate'"),
        ("SCRAM-SHA-512=password=hunter2", r"SCRAM-SHA-512: expected '\[' after '='"),
        ("SCRAM-SHA-512=", r"SCRAM-SHA-512: expected '\['"),
        ("SCRAM-SHA-512=[password=hunter2", r"SCRAM-SHA-512: no '\]' closes its settings"),
        ("SCRAM-SHA-512=[hunter2]", "SCRAM-SHA-512: expected key=value"),
        ("SCRAM-SHA-512=[]", "SCRAM-SHA-512: expected key=value"),
        ("SCRAM-SHA-512=[salt=abc,password=hunter2]", "unknown setting 'salt'"),
        ("SCRAM-SHA-512=[hunter2,password=hunter2]", r"unknown setting \(an unrecognised"),
        ("SCRAM-SHA-512=[iterations=8192]", "no password=... after iterations"),
        ("SCRAM-SHA-512=[iterations=lots,password=hunter2]", "iterations must be a decimal"),
        ("SCRAM-SHA-512=[iterations=-1,password=hunter2]", "iterations must be a decimal"),
        ("SCRAM-SHA-512=[iterations=4000,password=hunter2]", "SCRAM-SHA-512: iterations 4000"),
        ("SCRAM-SHA-512=[iterations=20000,password=hunter2]", r"20000 is outside .*16384\]"),
        (
            "SCRAM-SHA-512=[iterations=8192,iterations=8192,password=hunter2]",
            "iterations given twice",
        ),
        ("SCRAM-SHA-512=[password=]", "SCRAM-SHA-512: the password is empty"),
        ("SCRAM-SHA-512=[password= hunter2]", "starts or ends with whitespace"),
        ("SCRAM-SHA-512=[password=hunter2 ]", "starts or ends with whitespace"),
        ("SCRAM-SHA-512=[password=hun[ter2]", r"cannot hold '\[' or '\]'"),
        ("SCRAM-SHA-512=[password=hun]ter2]", r"unexpected text after the '\]'"),
        ("SCRAM-SHA-512=[password=hunter2],", "entry #2 has no '='"),
        ("SCRAM-SHA-512=[password=hunter2];", r"unexpected text after the '\]'"),
        (
            "SCRAM-SHA-512=[password=hunter2],SCRAM-SHA-512=[password=hunter3]",
            "names SCRAM-SHA-512 twice",
        ),
        ("SCRAM-SHA-512=[password=hunter2],x,y=[password=z]", "unknown SCRAM mechanism"),
        ("SCRAM-SHA-256=[password=hunter\u00a02]", "SCRAM-SHA-256: the password changes"),
    ],
)
def test_add_config_errors_name_the_part_not_the_password(text: str, message: str) -> None:
    with pytest.raises(ScramConfigError, match=message) as caught:
        parse_add_config(text)
    assert "hunter" not in str(caught.value)
    assert caught.value.code is errors.INVALID_CONFIG


def test_upsertion_hides_its_password() -> None:
    upsertion = parse_add_config("SCRAM-SHA-256=[iterations=8192,password=alice-secret]")[0]
    for shown in (repr(upsertion), str(upsertion), repr([upsertion])):
        assert "alice-secret" not in shown
    assert repr(upsertion) == "ScramCredentialUpsertion(mechanism='SCRAM-SHA-256', iterations=8192)"
    credential = upsertion.credential()
    assert credential.iterations == 8192
    assert verify_password(SCRAM_SHA_256, credential, "alice-secret")
    salted = upsertion.credential(salt=RFC7677_SALT)
    assert salted.salt == RFC7677_SALT


def test_upsertion_validates_itself() -> None:
    with pytest.raises(ScramConfigError, match="unknown SCRAM mechanism"):
        ScramCredentialUpsertion("PLAIN", "secret")
    with pytest.raises(ScramConfigError, match="SCRAM-SHA-256: iterations 1 is outside"):
        ScramCredentialUpsertion(SCRAM_SHA_256, "secret", 1)
    with pytest.raises(ScramConfigError, match="SCRAM-SHA-256: the password is empty"):
        ScramCredentialUpsertion(SCRAM_SHA_256, "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SCRAM-SHA-512", [SCRAM_SHA_512]),
        ("SCRAM-SHA-256,SCRAM-SHA-512", [SCRAM_SHA_256, SCRAM_SHA_512]),
        (" SCRAM-SHA-512 , SCRAM-SHA-256 ", [SCRAM_SHA_512, SCRAM_SHA_256]),
        ("SCRAM-SHA-512,SCRAM-SHA-512", [SCRAM_SHA_512]),
    ],
)
def test_delete_config(text: str, expected: list[str]) -> None:
    assert parse_delete_config(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "item #1 is empty"),
        ("SCRAM-SHA-512,,SCRAM-SHA-256", "item #2 is empty"),
        ("SCRAM-SHA-512,", "item #2 is empty"),
        ("SCRAM-SHA-1", "unknown SCRAM mechanism 'SCRAM-SHA-1'.*SCRAM-SHA-256, SCRAM-SHA-512"),
        ("SCRAM-SHA-512=[password=x]", r"unknown SCRAM mechanism \(an unrecognised name\)"),
    ],
)
def test_delete_config_errors(text: str, message: str) -> None:
    with pytest.raises(ScramConfigError, match=message):
        parse_delete_config(text)
