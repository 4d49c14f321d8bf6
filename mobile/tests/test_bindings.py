#!/usr/bin/env python3
"""Binding tests of the `cellbind` Python module against a running dev fleet.

Standard library only. Usage, with the `cellbind` wheel installed (pip) in the interpreter's
environment:

    python3 test_bindings.py FLEET_JSON

(mobile/scripts/test-bindings.sh builds the wheel, installs it into a fresh venv and runs this
with the venv's Python.)
"""

import asyncio
import base64
import hashlib
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

import cellbind

ROUTES = "/api/routes/today"
UNKNOWN_CONTRACTOR = "c-999999999"


class MemoryStore(cellbind.SessionStore):
    """The foreign session store: a Python object the Rust side calls back. One blob per slot
    (the session, the outbox); `blob`, `saves` and `clears` are about the session slot."""

    def __init__(self):
        self.blobs = {}
        self.saves = 0
        self.clears = 0

    @property
    def blob(self):
        return self.blobs.get(cellbind.StoreSlot.SESSION)

    @blob.setter
    def blob(self, value):
        self.blobs[cellbind.StoreSlot.SESSION] = value

    def load(self, slot):
        return self.blobs.get(slot)

    def save(self, slot, blob):
        self.blobs[slot] = blob
        if slot == cellbind.StoreSlot.SESSION:
            self.saves += 1

    def clear(self, slot):
        self.blobs.pop(slot, None)
        if slot == cellbind.StoreSlot.SESSION:
            self.clears += 1


class RecordingObserver(cellbind.RequestObserver):
    """The foreign request observer: records every event the client reports."""

    def __init__(self):
        self.events = []

    def on_request(self, event):
        self.events.append(event)


class ThrowingObserver(cellbind.RequestObserver):
    """An observer that fails: the requests must not."""

    def __init__(self):
        self.calls = 0

    def on_request(self, event):
        self.calls += 1
        raise RuntimeError("observer bug")


class BrokenStore(MemoryStore):
    """A store whose save fails with an exception the interface does not declare."""

    def save(self, slot, blob):
        raise OSError("keychain unavailable")


class RecordingOutboxObserver(cellbind.OutboxObserver):
    """The foreign outbox observer: what background flushes delivered or had refused."""

    def __init__(self):
        self.delivered = []
        self.rejected = []

    def on_delivered(self, write, status):
        self.delivered.append((write, status))

    def on_rejected(self, rejection):
        self.rejected.append(rejection)


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def thumbprint(canonical_jwk):
    """RFC 7638: base64url(SHA-256(the canonical JWK))."""
    return b64url(hashlib.sha256(canonical_jwk.encode()).digest())


# --- a device key in pure Python ----------------------------------------------------------
# The test venv holds the wheel alone (scripts/install-test-deps installs no `cryptography`, and
# the wheel is installed with --no-deps), so the Python DeviceKey signs with Ed25519 written out
# from RFC 8032 §5.1 on the standard library (hashlib): a test key, slow and not constant-time.
# It also covers the EdDSA proofs, while the Kotlin test covers ES256 with DER signatures.

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, -1, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _ed_add(a, b):
    """Point addition in extended coordinates (x, y, z, t)."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    A = (y1 - x1) * (y2 - x2) % _P
    B = (y1 + x1) * (y2 + x2) % _P
    C = 2 * t1 * t2 * _D % _P
    D = 2 * z1 * z2 % _P
    E, F, G, H = B - A, D - C, D + C, B + A
    return (E * F % _P, G * H % _P, F * G % _P, E * H % _P)


def _ed_mul(s, p):
    q = (0, 1, 1, 0)
    while s:
        if s & 1:
            q = _ed_add(q, p)
        p = _ed_add(p, p)
        s >>= 1
    return q


def _ed_encode(p):
    x, y, z, _ = p
    zi = pow(z, -1, _P)
    x, y = x * zi % _P, y * zi % _P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _ed_base():
    y = 4 * pow(5, -1, _P) % _P
    x2 = (y * y - 1) * pow(_D * y * y + 1, -1, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if x & 1:
        x = _P - x
    return (x, y, 1, x * y % _P)


_ED_B = _ed_base()


class Ed25519DeviceKey(cellbind.DeviceKey):
    """The foreign device key: the Rust side asks it for its public JWK and for signatures."""

    def __init__(self, seed=None):
        h = hashlib.sha512(seed or os.urandom(32)).digest()
        a = int.from_bytes(h[:32], "little")
        self._a = (a & ((1 << 254) - 8)) | (1 << 254)
        self._prefix = h[32:]
        self.public = _ed_encode(_ed_mul(self._a, _ED_B))
        self.signs = 0

    def public_key_jwk(self):
        return json.dumps({"kty": "OKP", "crv": "Ed25519", "x": b64url(self.public)})

    def sign(self, data):
        data = bytes(data)
        r = int.from_bytes(hashlib.sha512(self._prefix + data).digest(), "little") % _L
        big_r = _ed_encode(_ed_mul(r, _ED_B))
        k = int.from_bytes(hashlib.sha512(big_r + self.public + data).digest(), "little") % _L
        self.signs += 1
        return big_r + int.to_bytes((r + k * self._a) % _L, 32, "little")

    def thumbprint(self):
        return thumbprint('{"crv":"Ed25519","kty":"OKP","x":"%s"}' % b64url(self.public))


class LockedDeviceKey(Ed25519DeviceKey):
    """A key whose keystore refuses to sign (an exception the interface does not declare)."""

    def sign(self, data):
        raise PermissionError("user authentication required")


def software_key_thumbprint(store):
    """The thumbprint of the software key the SDK stored beside the session: the public point
    (04 || x || y) ends the PKCS#8 document."""
    pkcs8 = b64url_decode(json.loads(store.blob)["device_key"])
    point = pkcs8[-65:]
    assert point[0] == 4, pkcs8.hex()
    return thumbprint('{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}'
                      % (b64url(point[1:33]), b64url(point[33:])))


def fetch_map(fleet):
    ctx = ssl.create_default_context(cafile=fleet["ca_cert"])
    url = fleet["cells"][0]["endpoint"] + "/v1/placement-map"
    with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
        return r.read()


class Env:
    def __init__(self, fleet):
        self.fleet = fleet
        self.map = fetch_map(fleet)
        with open(fleet["ca_cert"]) as f:
            self.ca = f.read()
        self.tech = fleet["demo"]["technicians"][0]

    def client(self, store, key=None, map_bytes=None, observer=None, outbox_observer=None,
               connect_timeout_ms=None, request_timeout_ms=None, device_key=None):
        return cellbind.CellbindClient(
            cellbind.CellbindConfig(
                map=self.map if map_bytes is None else map_bytes,
                map_public_key=self.fleet["map_public_key"] if key is None else key,
                extra_ca_pem=self.ca,
                store=store,
                observer=observer,
                outbox_observer=outbox_observer,
                connect_timeout_ms=connect_timeout_ms,
                request_timeout_ms=request_timeout_ms,
                device_key=device_key,
            )
        )

    async def sign_in(self, client, password=None, contractor=None):
        t = self.tech
        return await client.sign_in(
            contractor or t["contractor_id"], t["login"], password or t["password"]
        )


async def expect_error(variant, awaitable):
    """Awaits and checks that exactly `variant` (a CellbindError subclass) is raised."""
    try:
        result = await awaitable
    except cellbind.CellbindError as e:
        if type(e) is not variant:
            raise AssertionError(
                f"expected CellbindError.{variant.__name__}, got "
                f"CellbindError.{type(e).__name__}: {e}"
            ) from None
        return e
    raise AssertionError(f"expected CellbindError.{variant.__name__}, got result {result!r}")


def expect_error_sync(variant, fn):
    async def run():
        return fn()

    return expect_error(variant, run())


async def test_sign_in_request_and_restore(env):
    store = MemoryStore()
    c = env.client(store)
    assert c.session() is None
    info = await env.sign_in(c)
    assert info.contractor_id == env.tech["contractor_id"], info
    assert info.cell_id == env.tech["cell_id"], info
    assert store.saves == 1 and store.blob is not None
    assert json.loads(store.blob)["schema"] == 2
    assert env.tech["password"] not in store.blob
    # bound to the software key the SDK made and stored beside the session
    assert info.key_thumbprint is not None, info
    assert info.key_thumbprint == software_key_thumbprint(store), info

    r = await c.request("GET", ROUTES, None)
    assert r.status == 200, r
    route = json.loads(r.body)
    assert route["contractor_id"] == env.tech["contractor_id"], route

    # a new client object, restored from the foreign store (no sign-in)
    c2 = env.client(store)
    assert c2.session() is None
    restored = await c2.restore()
    assert restored is not None and restored.session_id == info.session_id, restored
    assert c2.session().cell_id == info.cell_id
    r2 = await c2.request("GET", ROUTES, None)
    assert r2.status == 200 and json.loads(r2.body)["contractor_id"] == env.tech["contractor_id"]

    # a write goes through too
    w = await c2.request("POST", "/api/jobs/j-py-1/complete", b"{}")
    assert w.status == 200, (w.status, w.body)


async def test_wrong_password_is_invalid_credentials(env):
    c = env.client(MemoryStore())
    await expect_error(cellbind.CellbindError.InvalidCredentials, env.sign_in(c, password="wrong-password"))
    assert c.session() is None


async def test_unknown_contractor(env):
    c = env.client(MemoryStore())
    await expect_error(
        cellbind.CellbindError.UnknownContractor, env.sign_in(c, contractor=UNKNOWN_CONTRACTOR)
    )


async def test_cleared_session_then_request_is_not_signed_in(env):
    store = MemoryStore()
    c = env.client(store)
    await env.sign_in(c)
    assert (await c.sign_out()).revoked is True
    assert store.blob is None and store.clears >= 1
    await expect_error(cellbind.CellbindError.NotSignedIn, c.request("GET", ROUTES, None))
    # and a new client over the cleared store has nothing to restore
    c2 = env.client(store)
    assert await c2.restore() is None
    await expect_error(cellbind.CellbindError.NotSignedIn, c2.request("GET", ROUTES, None))


async def test_bad_input_and_config_are_typed(env):
    c = env.client(MemoryStore())
    await expect_error(cellbind.CellbindError.InvalidInput, c.sign_in("not a contractor", "x", "y"))
    await expect_error_sync(cellbind.CellbindError.Config, lambda: env.client(MemoryStore(), key="AAAA"))
    tampered = env.map.replace(b'"version":', b'"version":9', 1)
    await expect_error_sync(
        cellbind.CellbindError.MapRefused, lambda: env.client(MemoryStore(), map_bytes=tampered)
    )


async def test_a_failing_foreign_store_is_a_store_error(env):
    c = env.client(BrokenStore())
    await expect_error(cellbind.CellbindError.Store, env.sign_in(c))
    assert c.session() is None


async def test_send_with_query_headers_key_and_an_observer(env):
    obs = RecordingObserver()
    c = env.client(MemoryStore(), observer=obs)
    await env.sign_in(c)
    r = await c.send(
        cellbind.Request(
            method="GET",
            path=ROUTES,
            query=[cellbind.QueryParam(name="note", value="a b&c")],
            headers=[cellbind.Header(name="X-Request-Id", value="py-r-1")],
        )
    )
    assert r.status == 200, r
    assert json.loads(r.body)["contractor_id"] == env.tech["contractor_id"]

    # the caller's key reaches the app as it is: the second send is a replay there
    job = "j-py-key-" + os.urandom(4).hex()
    key = "py-" + os.urandom(8).hex()
    write = cellbind.Request(
        method="POST", path=f"/api/jobs/{job}/complete", body=b"{}", idempotency_key=key
    )
    first = await c.send(write)
    again = await c.send(write)
    assert first.status == 200 and again.status == 200, (first, again)
    assert json.loads(first.body)["replayed"] is False, first.body
    assert json.loads(again.body)["replayed"] is True, again.body

    answered = [e for e in obs.events if e.reached_cell and e.status == 200]
    assert answered, obs.events
    routes = [e for e in obs.events if e.path == ROUTES]
    assert len(routes) == 1, obs.events
    ev = routes[0]
    assert ev.method == "GET" and ev.cell_id == env.tech["cell_id"], ev
    assert ev.outcome == cellbind.RequestOutcome.ANSWERED(), ev.outcome
    assert ev.attempts >= 1 and ev.duration_ms >= 0, ev
    assert [e.path for e in obs.events] == ["/v1/sessions", ROUTES, write.path, write.path], obs.events

    # a header the SDK owns is refused before anything is sent
    n = len(obs.events)
    await expect_error(
        cellbind.CellbindError.InvalidInput,
        c.send(
            cellbind.Request(
                method="GET",
                path=ROUTES,
                headers=[cellbind.Header(name="Authorization", value="Bearer x")],
            )
        ),
    )
    assert len(obs.events) == n


async def test_an_unreachable_cell_is_a_connect_error_that_never_reached_it(env):
    store = MemoryStore()
    await env.sign_in(env.client(store))
    # the same session, at an address where nothing listens
    blob = json.loads(store.blob)
    blob["session"]["endpoint"] = "https://127.0.0.1:1"
    store.blob = json.dumps(blob)
    obs = RecordingObserver()
    c = env.client(store, observer=obs)
    assert await c.restore() is not None
    e = await expect_error(cellbind.CellbindError.Network, c.request("GET", ROUTES, None))
    assert e.kind == cellbind.NetworkErrorKind.CONNECT, e
    assert e.reached_cell is False, e
    assert len(obs.events) == 1, obs.events
    ev = obs.events[0]
    assert ev.outcome == cellbind.RequestOutcome.NETWORK(kind=cellbind.NetworkErrorKind.CONNECT), ev
    assert ev.reached_cell is False and ev.status is None, ev


async def test_a_throwing_observer_does_not_fail_requests(env):
    obs = ThrowingObserver()
    c = env.client(MemoryStore(), observer=obs)
    await env.sign_in(c)
    r = await c.request("GET", ROUTES, None)
    assert r.status == 200
    assert obs.calls == 2, obs.calls


# --- device-bound sessions (DPoP) ----------------------------------------------------------


async def test_the_ed25519_key_signs_rfc_8032s_first_vector(env):
    # RFC 8032 §7.1, TEST 1: the pure-Python key the next tests use is Ed25519
    key = Ed25519DeviceKey(seed=bytes.fromhex(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    assert key.public.hex() == (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert key.sign(b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")


async def test_a_python_device_key_binds_the_session(env):
    key = Ed25519DeviceKey()
    store = MemoryStore()
    c = env.client(store, device_key=key)
    info = await env.sign_in(c)
    assert info.key_thumbprint == key.thumbprint(), (info, key.thumbprint())
    assert key.signs >= 1
    r = await c.request("GET", ROUTES, None)
    assert r.status == 200 and json.loads(r.body)["contractor_id"] == env.tech["contractor_id"]
    w = await c.request("POST", "/api/jobs/j-py-key-1/complete", b"{}")
    assert w.status == 200, (w.status, w.body)
    signed = key.signs
    assert signed >= 3, signed
    # the app's key is never stored; a new client with the same key picks the session up
    assert "device_key" not in json.loads(store.blob)
    c2 = env.client(store, device_key=key)
    assert (await c2.restore()).session_id == info.session_id
    assert (await c2.request("GET", ROUTES, None)).status == 200
    # a new client knows no nonce of the edge yet: refused once for it, then proved again
    assert key.signs == signed + 2, (key.signs, signed)
    # ... and one with another key (the keystore lost it) has nothing to restore
    assert await env.client(store, device_key=Ed25519DeviceKey()).restore() is None
    assert await env.client(store).restore() is None


async def test_a_copied_token_without_the_key_is_refused(env):
    store = MemoryStore()
    c = env.client(store)
    info = await env.sign_in(c)
    token = json.loads(store.blob)["session"]["token"]
    ctx = ssl.create_default_context(cafile=env.fleet["ca_cert"])
    req = urllib.request.Request(info.endpoint + ROUTES,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        urllib.request.urlopen(req, context=ctx, timeout=10)
        raise AssertionError("the token alone was served")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code
        assert json.loads(e.read())["error"] == "DPOP_PROOF_MISSING"
    # the device that holds the key is served
    assert (await c.request("GET", ROUTES, None)).status == 200


async def test_a_device_key_that_cannot_sign_is_a_device_key_error(env):
    c = env.client(MemoryStore(), device_key=LockedDeviceKey())
    e = await expect_error(cellbind.CellbindError.DeviceKey, env.sign_in(c))
    assert "authentication required" in str(e), e
    assert c.session() is None
    bad = Ed25519DeviceKey()
    bad.public_key_jwk = lambda: '{"kty":"RSA","n":"AQAB","e":"AQAB"}'
    await expect_error_sync(cellbind.CellbindError.DeviceKey,
                            lambda: env.client(MemoryStore(), device_key=bad))


# --- the offline outbox -------------------------------------------------------------------

OUTBOX_WRITES = 20
# Seeded contractors of their own (every seeded contractor has the technician logins and the
# one demo password), so the outbox tests never share a contractor with the tests above, the
# CLI test or the Kotlin tests.
OUTBOX_CONTRACTOR = "c-10021"
OUTBOX_SMALL_CONTRACTOR = "c-10023"
OUTBOX_LOGIN = "tech-2"
# Short timeouts: with the edges stopped, every attempt waits for one.
OFFLINE_CONNECT_TIMEOUT_MS = 1_000
OFFLINE_REQUEST_TIMEOUT_MS = 2_000
MIGRATE_TIMEOUT_S = 180


def cellctl_path():
    if os.environ.get("CELLCTL"):
        return os.environ["CELLCTL"]
    root = pathlib.Path(__file__).resolve().parents[2]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    return str(target / "debug" / "cellctl")


def signal_edges(env, sig):
    for cell in env.fleet["cells"]:
        os.kill(cell["endpoint_pid"], sig)


def app_completions(env, cell_id, contractor):
    """The contractor's applied completions in the app data of one cell (its internal API)."""
    cell = next(c for c in env.fleet["cells"] if c["id"] == cell_id)
    ctx = ssl.create_default_context(cafile=env.fleet["ca_cert"])
    req = urllib.request.Request(
        f"{cell['app_internal_url']}/internal/v1/contractors/{contractor}/completions",
        headers={"Authorization": f"Bearer {cell['app_internal_token']}"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return json.loads(r.read())["completions"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise


async def wait_for(what, cond, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_outbox_delivers_exactly_once_across_restart_and_migration(env):
    """Acceptance: edges unreachable, 20 completions queued, the client dropped and restored
    from the same store, the contractor migrated, the edges back: each write applied exactly
    once, at the new owner."""
    ctr, password = OUTBOX_CONTRACTOR, env.tech["password"]
    store = MemoryStore()
    c = env.client(store, connect_timeout_ms=OFFLINE_CONNECT_TIMEOUT_MS,
                   request_timeout_ms=OFFLINE_REQUEST_TIMEOUT_MS)
    info = await c.sign_in(ctr, OUTBOX_LOGIN, password)
    source = info.cell_id
    target = next(cell["id"] for cell in env.fleet["cells"] if cell["id"] != source)
    run = os.urandom(4).hex()

    signal_edges(env, signal.SIGSTOP)
    try:
        queued = []
        for i in range(OUTBOX_WRITES):
            queued.append(c.enqueue(cellbind.Request(
                method="POST", path=f"/api/jobs/j-outbox-{run}-{i}/complete", body=b"{}")))
        keys = [w.idempotency_key for w in queued]
        assert len(set(keys)) == OUTBOX_WRITES, keys
        assert [w.id for w in queued] == sorted(w.id for w in queued), queued
        # persisted in its own schema-versioned blob before enqueue returned
        blob = json.loads(store.blobs[cellbind.StoreSlot.OUTBOX])
        assert blob["schema"] == 1 and len(blob["entries"]) == OUTBOX_WRITES, blob.keys()
        assert password not in store.blobs[cellbind.StoreSlot.OUTBOX]
        del c

        # the app restarts: a new client over the same store
        obs = RecordingObserver()
        c2 = env.client(store, observer=obs, connect_timeout_ms=OFFLINE_CONNECT_TIMEOUT_MS,
                        request_timeout_ms=OFFLINE_REQUEST_TIMEOUT_MS)
        restored = await c2.restore()
        assert restored is not None and restored.session_id == info.session_id, restored
        assert [w.idempotency_key for w in c2.outbox()] == keys
        # restore() started a flush in the background; it reaches no edge
        await wait_for("the restore flush to fail", lambda: any(
            isinstance(e.outcome, cellbind.RequestOutcome.NETWORK) for e in obs.events))
        report = await c2.flush()
        assert report.delivered == [] and report.rejected == [], report
        assert report.remaining == OUTBOX_WRITES and report.stopped, report
        assert not report.session_ended, report
    finally:
        signal_edges(env, signal.SIGCONT)

    # the contractor moves while the writes wait on the device (cells up, device idle)
    moved = subprocess.run(
        [cellctl_path(), "migrate", ctr, "--to", target, "--fleet", env.fleet_path],
        capture_output=True, text=True, timeout=MIGRATE_TIMEOUT_S)
    assert moved.returncode == 0, (moved.stdout, moved.stderr)
    assert len(c2.outbox()) == OUTBOX_WRITES

    report = await c2.flush()
    assert [w.idempotency_key for w in report.delivered] == keys, report
    assert report.rejected == [] and report.remaining == 0 and report.stopped is None, report
    assert c2.outbox() == []
    assert c2.session().cell_id == target, c2.session()
    assert json.loads(store.blobs[cellbind.StoreSlot.OUTBOX])["entries"] == []
    again = await c2.flush()
    assert again.delivered == [] and again.remaining == 0, again

    applied = [x for x in app_completions(env, target, ctr) if x.get("idempotency_key") in keys]
    assert sorted(x["idempotency_key"] for x in applied) == sorted(keys), applied
    assert sorted(x["job_id"] for x in applied) == sorted(
        f"j-outbox-{run}-{i}" for i in range(OUTBOX_WRITES)), applied
    at_source = [x for x in app_completions(env, source, ctr) if x.get("idempotency_key") in keys]
    assert at_source == [], at_source


async def test_outbox_rejections_background_flush_sign_out_and_bounds(env):
    ctr, password = OUTBOX_SMALL_CONTRACTOR, env.tech["password"]
    store = MemoryStore()
    outbox_obs = RecordingOutboxObserver()
    c = env.client(store, outbox_observer=outbox_obs)
    await c.sign_in(ctr, OUTBOX_LOGIN, password)
    run = os.urandom(4).hex()

    # a read is not queued; a bad write is refused for good at flush time, the next one lands
    await expect_error_sync(cellbind.CellbindError.InvalidInput, lambda: c.enqueue(
        cellbind.Request(method="GET", path=ROUTES)))
    bad = c.enqueue(cellbind.Request(method="POST", path="/api/jobs/j~bad/complete", body=b"{}"))
    good = c.enqueue(cellbind.Request(method="POST", path=f"/api/jobs/j-ok-{run}/complete",
                                      body=b"{}", idempotency_key=f"py-outbox-{run}"))
    assert good.idempotency_key == f"py-outbox-{run}"
    report = await c.flush()
    assert [r.write.id for r in report.rejected] == [bad.id], report
    assert report.rejected[0].status == 400 and report.rejected[0].code == "INVALID_REQUEST", report
    assert [w.id for w in report.delivered] == [good.id] and report.remaining == 0, report

    # a successful request flushes what is queued, in the background
    later = c.enqueue(cellbind.Request(method="POST", path=f"/api/jobs/j-bg-{run}/complete",
                                       body=b"{}"))
    r = await c.request("GET", ROUTES, None)
    assert r.status == 200
    await wait_for("the background flush",
                   lambda: later.id in [w.id for w, _ in outbox_obs.delivered])
    assert [st for w, st in outbox_obs.delivered if w.id == later.id] == [200], outbox_obs.delivered
    assert c.outbox() == []

    # bounded: the 101st write is refused and nothing changes
    for i in range(100):
        c.enqueue(cellbind.Request(method="POST", path=f"/api/jobs/j-full-{run}-{i}/complete",
                                   body=b"{}"))
    before = store.blobs[cellbind.StoreSlot.OUTBOX]
    full = await expect_error_sync(cellbind.CellbindError.OutboxFull, lambda: c.enqueue(
        cellbind.Request(method="POST", path=f"/api/jobs/j-over-{run}/complete", body=b"{}")))
    assert full.capacity == 100, full
    assert store.blobs[cellbind.StoreSlot.OUTBOX] == before

    # sign-out hands the undelivered writes back instead of dropping them
    out = await c.sign_out()
    assert out.revoked is True
    assert len(out.undelivered) == 100, len(out.undelivered)
    assert out.undelivered[0].path == f"/api/jobs/j-full-{run}-0/complete"
    assert store.blobs.get(cellbind.StoreSlot.OUTBOX) is None and store.blob is None
    await expect_error_sync(cellbind.CellbindError.NotSignedIn, lambda: c.enqueue(
        cellbind.Request(method="POST", path=f"/api/jobs/j-late-{run}/complete", body=b"{}")))


TESTS = [
    test_sign_in_request_and_restore,
    test_wrong_password_is_invalid_credentials,
    test_unknown_contractor,
    test_cleared_session_then_request_is_not_signed_in,
    test_bad_input_and_config_are_typed,
    test_a_failing_foreign_store_is_a_store_error,
    test_send_with_query_headers_key_and_an_observer,
    test_an_unreachable_cell_is_a_connect_error_that_never_reached_it,
    test_a_throwing_observer_does_not_fail_requests,
    test_the_ed25519_key_signs_rfc_8032s_first_vector,
    test_a_python_device_key_binds_the_session,
    test_a_copied_token_without_the_key_is_refused,
    test_a_device_key_that_cannot_sign_is_a_device_key_error,
    test_outbox_delivers_exactly_once_across_restart_and_migration,
    test_outbox_rejections_background_flush_sign_out_and_bounds,
]


async def main(path):
    with open(path) as f:
        env = Env(json.load(f))
    env.fleet_path = path
    failed = 0
    for t in TESTS:
        try:
            await t(env)
            print(f"PASS {t.__name__}")
        except Exception:
            failed += 1
            print(f"FAIL {t.__name__}")
            traceback.print_exc()
    print(f"python bindings: {len(TESTS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: test_bindings.py FLEET_JSON", file=sys.stderr)
        sys.exit(2)
    code = asyncio.run(main(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter finalization: the Rust runtime thread that delivered the last
    # async result may still be returning from the generated continuation callback (it wakes
    # the event loop, releasing the GIL to write its self-pipe); a thread that wants the GIL
    # back during finalization is terminated by CPython with a forced unwind, which aborts the
    # process from inside Rust. Apps never finalize the interpreter mid-flight like this.
    os._exit(code)
