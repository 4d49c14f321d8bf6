#!/usr/bin/env python3
"""Binding tests of the `cellbind` Python module against a running dev fleet.

Standard library only. Usage, with the `cellbind` wheel installed (pip) in the interpreter's
environment:

    python3 test_bindings.py FLEET_JSON

(mobile/scripts/test-bindings.sh builds the wheel, installs it into a fresh venv and runs this
with the venv's Python.)
"""

import asyncio
import json
import os
import ssl
import sys
import traceback
import urllib.request

import cellbind

ROUTES = "/api/routes/today"
UNKNOWN_CONTRACTOR = "c-999999999"


class MemoryStore(cellbind.SessionStore):
    """The foreign session store: a Python object the Rust side calls back."""

    def __init__(self):
        self.blob = None
        self.saves = 0
        self.clears = 0

    def load(self):
        return self.blob

    def save(self, blob):
        self.blob = blob
        self.saves += 1

    def clear(self):
        self.blob = None
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

    def save(self, blob):
        raise OSError("keychain unavailable")


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

    def client(self, store, key=None, map_bytes=None, observer=None):
        return cellbind.CellbindClient(
            cellbind.CellbindConfig(
                map=self.map if map_bytes is None else map_bytes,
                map_public_key=self.fleet["map_public_key"] if key is None else key,
                extra_ca_pem=self.ca,
                store=store,
                observer=observer,
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
    assert json.loads(store.blob)["schema"] == 1
    assert env.tech["password"] not in store.blob

    r = await c.request("GET", ROUTES, None)
    assert r.status == 200, r
    route = json.loads(r.body)
    assert route["contractor_id"] == env.tech["contractor_id"], route

    # a new client object, restored from the foreign store (no sign-in)
    c2 = env.client(store)
    assert c2.session() is None
    restored = c2.restore()
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
    assert await c.sign_out() is True
    assert store.blob is None and store.clears >= 1
    await expect_error(cellbind.CellbindError.NotSignedIn, c.request("GET", ROUTES, None))
    # and a new client over the cleared store has nothing to restore
    c2 = env.client(store)
    assert c2.restore() is None
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
    assert c.restore() is not None
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
]


async def main(path):
    with open(path) as f:
        env = Env(json.load(f))
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
