// Binding tests of the Kotlin bindings (package dev.cellbind) on the JVM, against a running dev
// fleet. Run by mobile/scripts/test-bindings.sh, which passes a properties file with:
// ca_cert, map_file, map_public_key, contractor_id, login, password, cell_id.

import dev.cellbind.*
import kotlinx.coroutines.runBlocking
import java.io.File
import java.util.Properties

val props = Properties().apply { File(args[0]).inputStream().use { load(it) } }
fun p(k: String): String = props.getProperty(k) ?: error("missing property $k")

val caPem = File(p("ca_cert")).readText()
val mapBytes = File(p("map_file")).readBytes()
val contractor = p("contractor_id")
val login = p("login")
val password = p("password")

// One blob per slot (the session, the outbox); `blob`, `saves` and `clears` are about the session.
class MemoryStore : SessionStore {
    val blobs = java.util.concurrent.ConcurrentHashMap<StoreSlot, String>()
    @Volatile var saves = 0
    @Volatile var clears = 0
    var blob: String?
        get() = blobs[StoreSlot.SESSION]
        set(v) { if (v == null) blobs.remove(StoreSlot.SESSION) else blobs[StoreSlot.SESSION] = v }
    override fun load(slot: StoreSlot): String? = blobs[slot]
    override fun save(slot: StoreSlot, blob: String) {
        blobs[slot] = blob
        if (slot == StoreSlot.SESSION) saves++
    }
    override fun clear(slot: StoreSlot) {
        blobs.remove(slot)
        if (slot == StoreSlot.SESSION) clears++
    }
}

class RecordingObserver : RequestObserver {
    val events = java.util.Collections.synchronizedList(mutableListOf<RequestEvent>())
    override fun onRequest(event: RequestEvent) { events.add(event) }
}

fun client(
    store: SessionStore,
    key: String = p("map_public_key"),
    observer: RequestObserver? = null,
    connectTimeoutMs: ULong? = null,
    requestTimeoutMs: ULong? = null,
    deviceKey: DeviceKey? = null,
) = CellbindClient(CellbindConfig(
    map = mapBytes,
    mapPublicKey = key,
    extraCaPem = caPem,
    store = store,
    observer = observer,
    connectTimeoutMs = connectTimeoutMs,
    requestTimeoutMs = requestTimeoutMs,
    deviceKey = deviceKey,
))

fun b64url(bytes: ByteArray): String = java.util.Base64.getUrlEncoder().withoutPadding().encodeToString(bytes)

/** RFC 7638: base64url(SHA-256(the canonical JWK)). */
fun thumbprint(canonicalJwk: String): String =
    b64url(java.security.MessageDigest.getInstance("SHA-256").digest(canonicalJwk.toByteArray()))

/**
 * A device key as an Android app backs it with the Keystore, here with the JVM's JCA: an EC
 * P-256 key pair, `SHA256withECDSA` signatures (DER, converted by the SDK), the public JWK from
 * the key's affine coordinates (32 bytes each, big-endian, unsigned, left-padded).
 */
class JcaDeviceKey : DeviceKey {
    private val pair = java.security.KeyPairGenerator.getInstance("EC").run {
        initialize(java.security.spec.ECGenParameterSpec("secp256r1"))
        generateKeyPair()
    }
    @Volatile var signs = 0

    private fun coordinate(v: java.math.BigInteger): String {
        val raw = v.toByteArray() // two's complement: may carry a leading 0, or be shorter
        val unsigned = if (raw.size > 32) raw.copyOfRange(raw.size - 32, raw.size) else raw
        val out = ByteArray(32)
        System.arraycopy(unsigned, 0, out, 32 - unsigned.size, unsigned.size)
        return b64url(out)
    }

    private val point = (pair.public as java.security.interfaces.ECPublicKey).w
    val x = coordinate(point.affineX)
    val y = coordinate(point.affineY)

    override fun publicKeyJwk(): String = """{"kty":"EC","crv":"P-256","x":"$x","y":"$y"}"""

    override fun sign(data: ByteArray): ByteArray {
        signs++
        return java.security.Signature.getInstance("SHA256withECDSA").run {
            initSign(pair.private)
            update(data)
            sign()
        }
    }

    fun thumbprint(): String = thumbprint("""{"crv":"P-256","kty":"EC","x":"$x","y":"$y"}""")
}

inline fun <reified E : CellbindException> expectError(block: () -> Unit): E {
    try {
        block()
    } catch (e: CellbindException) {
        if (e !is E) {
            throw AssertionError("expected ${E::class.simpleName}, got ${e::class.simpleName}: ${e.message}")
        }
        return e
    }
    throw AssertionError("expected ${E::class.simpleName}, got a result")
}

fun check(cond: Boolean, what: () -> String) { if (!cond) throw AssertionError(what()) }

// --- the offline outbox ---------------------------------------------------------------------

val outboxWrites = 20
// A seeded contractor of its own (every seeded contractor has the technician logins and the one
// demo password), so this test never shares one with the tests above or the Python tests.
val outboxContractor = "c-10022"
val outboxLogin = "tech-2"

fun signalEdges(sig: String) {
    val pids = p("edge_pids").split(",")
    val rc = ProcessBuilder(listOf("kill", "-$sig") + pids).inheritIO().start().waitFor()
    check(rc == 0) { "kill -$sig ${pids} exited $rc" }
}

val fleetTls: javax.net.ssl.SSLContext by lazy {
    val cf = java.security.cert.CertificateFactory.getInstance("X.509")
    val ks = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType()).apply { load(null, null) }
    File(p("ca_cert")).inputStream().use { input ->
        cf.generateCertificates(input).forEachIndexed { i, cert -> ks.setCertificateEntry("ca$i", cert) }
    }
    val tmf = javax.net.ssl.TrustManagerFactory.getInstance(javax.net.ssl.TrustManagerFactory.getDefaultAlgorithm())
    tmf.init(ks)
    javax.net.ssl.SSLContext.getInstance("TLS").apply { init(null, tmf.trustManagers, null) }
}

/** The contractor's applied completions at one cell's app (its internal API), as JSON text. */
fun appCompletions(cell: String, ctr: String): String {
    val http = java.net.http.HttpClient.newBuilder().sslContext(fleetTls).build()
    val req = java.net.http.HttpRequest.newBuilder(
        java.net.URI("${p("app_internal_url.$cell")}/internal/v1/contractors/$ctr/completions"))
        .header("Authorization", "Bearer ${p("app_internal_token.$cell")}")
        .build()
    val resp = http.send(req, java.net.http.HttpResponse.BodyHandlers.ofString())
    if (resp.statusCode() == 404) return ""
    check(resp.statusCode() == 200) { "completions at $cell: HTTP ${resp.statusCode()} ${resp.body()}" }
    return resp.body()
}

fun occurrences(text: String, key: String): Int =
    Regex(Regex.escape("\"idempotency_key\":\"$key\"")).findAll(text).count()

fun waitFor(what: String, timeoutMs: Long = 60_000, cond: () -> Boolean) {
    val deadline = System.nanoTime() + timeoutMs * 1_000_000
    while (!cond()) {
        check(System.nanoTime() < deadline) { "timed out waiting for $what" }
        Thread.sleep(50)
    }
}

val tests = linkedMapOf<String, () -> Unit>(
    "sign in, request, restore in a new client" to {
        runBlocking {
            val store = MemoryStore()
            val c = client(store)
            check(c.session() == null) { "fresh client has a session" }
            val info = c.signIn(contractor, login, password)
            check(info.contractorId == contractor) { "contractor ${info.contractorId}" }
            check(info.cellId == p("cell_id")) { "cell ${info.cellId}" }
            check(store.saves == 1 && store.blob != null) { "session not saved" }
            check(!store.blob!!.contains(password)) { "password persisted" }
            // bound to the software key the SDK made and stored beside the session
            check(info.keyThumbprint != null && store.blob!!.contains("\"device_key\":")) { "not bound: $info" }
            val r = c.request("GET", "/api/routes/today", null)
            check(r.status.toInt() == 200) { "status ${r.status}" }
            check(String(r.body).contains("\"contractor_id\":\"$contractor\"")) { String(r.body) }

            val c2 = client(store)
            check(c2.session() == null) { "new client has a session before restore" }
            val restored = runBlocking { c2.restore() }
            check(restored?.sessionId == info.sessionId) { "restored $restored" }
            val r2 = c2.request("GET", "/api/routes/today", null)
            check(r2.status.toInt() == 200) { "status ${r2.status}" }
            val w = c2.request("POST", "/api/jobs/j-kt-1/complete", "{}".toByteArray())
            check(w.status.toInt() == 200) { "write status ${w.status}: ${String(w.body)}" }
        }
    },
    "wrong password is InvalidCredentials" to {
        val c = client(MemoryStore())
        expectError<CellbindException.InvalidCredentials> {
            runBlocking { c.signIn(contractor, login, "wrong-password") }
        }
        check(c.session() == null) { "session after a failed sign-in" }
    },
    "unknown contractor is UnknownContractor" to {
        val c = client(MemoryStore())
        expectError<CellbindException.UnknownContractor> {
            runBlocking { c.signIn("c-999999999", login, password) }
        }
    },
    "cleared session then request is NotSignedIn" to {
        val store = MemoryStore()
        val c = client(store)
        runBlocking { c.signIn(contractor, login, password) }
        check(runBlocking { c.signOut() }.revoked) { "sign-out not confirmed by the cell" }
        check(store.blob == null) { "store not cleared" }
        expectError<CellbindException.NotSignedIn> {
            runBlocking { c.request("GET", "/api/routes/today", null) }
        }
        val c2 = client(store)
        check(runBlocking { c2.restore() } == null) { "restored a cleared session" }
        expectError<CellbindException.NotSignedIn> {
            runBlocking { c2.request("GET", "/api/routes/today", null) }
        }
    },
    "a failing foreign store is Store" to {
        val broken = object : SessionStore {
            override fun load(slot: StoreSlot): String? = null
            override fun save(slot: StoreSlot, blob: String) { throw IllegalStateException("keystore unavailable") }
            override fun clear(slot: StoreSlot) {}
        }
        val c = client(broken)
        expectError<CellbindException.Store> {
            runBlocking { c.signIn(contractor, login, password) }
        }
        check(c.session() == null) { "session kept although it could not be saved" }
    },
    "send with a query, a header, the caller's key and an observer" to {
        runBlocking {
            val obs = RecordingObserver()
            val c = client(MemoryStore(), observer = obs)
            c.signIn(contractor, login, password)
            val r = c.send(Request(
                method = "GET",
                path = "/api/routes/today",
                query = listOf(QueryParam("note", "a b&c")),
                headers = listOf(Header("X-Request-Id", "kt-r-1")),
            ))
            check(r.status.toInt() == 200) { "status ${r.status}" }
            check(String(r.body).contains("\"contractor_id\":\"$contractor\"")) { String(r.body) }

            val job = "j-kt-key-" + java.util.UUID.randomUUID().toString().take(8)
            val write = Request(
                method = "POST",
                path = "/api/jobs/$job/complete",
                body = "{}".toByteArray(),
                idempotencyKey = "kt-" + java.util.UUID.randomUUID(),
            )
            val first = c.send(write)
            val again = c.send(write)
            check(String(first.body).contains("\"replayed\":false")) { String(first.body) }
            check(String(again.body).contains("\"replayed\":true")) { "the app did not see the same key: ${String(again.body)}" }

            val events = obs.events.toList()
            check(events.any { it.reachedCell && it.status?.toInt() == 200 }) { "events $events" }
            val routes = events.filter { it.path == "/api/routes/today" }
            check(routes.size == 1 && routes[0].method == "GET" && routes[0].cellId == p("cell_id")) { "events $events" }
            check(routes[0].outcome is RequestOutcome.Answered) { "outcome ${routes[0].outcome}" }

            val n = obs.events.size
            expectError<CellbindException.InvalidInput> {
                runBlocking {
                    c.send(Request(method = "GET", path = "/api/routes/today",
                        headers = listOf(Header("Authorization", "Bearer x"))))
                }
            }
            check(obs.events.size == n) { "a refused request was observed" }
        }
    },
    "an unreachable cell is a Connect network error that never reached it" to {
        val store = MemoryStore()
        runBlocking { client(store).signIn(contractor, login, password) }
        // the same session, at an address where nothing listens
        val blob = store.blob!!
        val endpoint = Regex("\"endpoint\":\"[^\"]*\"")
        check(endpoint.containsMatchIn(blob)) { "no endpoint in the stored session" }
        store.blob = endpoint.replace(blob, "\"endpoint\":\"https://127.0.0.1:1\"")
        val obs = RecordingObserver()
        val c = client(store, observer = obs)
        check(runBlocking { c.restore() } != null) { "edited session not restored" }
        val e = expectError<CellbindException.Network> {
            runBlocking { c.request("GET", "/api/routes/today", null) }
        }
        check(e.kind == NetworkErrorKind.CONNECT) { "kind ${e.kind}" }
        check(!e.reachedCell) { "reachedCell true for a refused connection" }
        check(obs.events.size == 1) { "events ${obs.events}" }
        val ev = obs.events[0]
        check(ev.outcome == RequestOutcome.Network(NetworkErrorKind.CONNECT) && !ev.reachedCell && ev.status == null) { "event $ev" }
    },
    "outbox: 20 writes queued offline, client restarted, contractor moved, delivered once at the new owner" to {
        runBlocking {
            val store = MemoryStore()
            val c = client(store, connectTimeoutMs = 1_000UL, requestTimeoutMs = 2_000UL)
            val info = c.signIn(outboxContractor, outboxLogin, password)
            val source = info.cellId
            val target = p("cell_ids").split(",").first { it != source }
            val run = java.util.UUID.randomUUID().toString().take(8)
            var keys: List<String> = emptyList()
            var restarted: CellbindClient? = null
            signalEdges("STOP")
            try {
                val queued = (0 until outboxWrites).map { i ->
                    c.enqueue(Request(method = "POST", path = "/api/jobs/j-kt-outbox-$run-$i/complete",
                        body = "{}".toByteArray()))
                }
                keys = queued.map { it.idempotencyKey }
                check(keys.toSet().size == outboxWrites) { "keys $keys" }
                val blob = store.blobs[StoreSlot.OUTBOX] ?: error("outbox not persisted")
                check(blob.contains("\"schema\":1") && !blob.contains(password)) { "outbox blob" }

                val obs = RecordingObserver()
                val c2 = client(store, observer = obs, connectTimeoutMs = 1_000UL, requestTimeoutMs = 2_000UL)
                restarted = c2
                val restored = c2.restore()
                check(restored?.sessionId == info.sessionId) { "restored $restored" }
                check(c2.outbox().map { it.idempotencyKey } == keys) { "outbox after restore" }
                waitFor("the restore flush to fail") { obs.events.any { it.outcome is RequestOutcome.Network } }
                val report = c2.flush()
                check(report.delivered.isEmpty() && report.remaining.toInt() == outboxWrites && report.stopped != null) { "offline flush $report" }
            } finally {
                signalEdges("CONT")
            }
            val c2 = restarted ?: error("no restarted client")

            val migrate = ProcessBuilder(p("cellctl"), "migrate", outboxContractor, "--to", target, "--fleet", p("fleet_json"))
                .redirectErrorStream(true).start()
            val output = migrate.inputStream.bufferedReader().readText()
            check(migrate.waitFor() == 0) { "cellctl migrate failed: $output" }
            check(c2.outbox().size == outboxWrites) { "outbox changed while idle" }

            val report = c2.flush()
            check(report.delivered.map { it.idempotencyKey } == keys) { "delivered ${report.delivered.size}: $report" }
            check(report.rejected.isEmpty() && report.remaining.toInt() == 0 && report.stopped == null) { "report $report" }
            check(c2.outbox().isEmpty()) { "outbox not empty" }
            check(c2.session()?.cellId == target) { "session at ${c2.session()?.cellId}, not $target" }

            val atTarget = appCompletions(target, outboxContractor)
            val atSource = appCompletions(source, outboxContractor)
            for (k in keys) {
                check(occurrences(atTarget, k) == 1) { "key $k applied ${occurrences(atTarget, k)} times at $target" }
                check(occurrences(atSource, k) == 0) { "key $k applied at the old owner $source" }
            }
        }
    },
    "outbox: sign-out hands undelivered writes back" to {
        runBlocking {
            val store = MemoryStore()
            val c = client(store)
            c.signIn(contractor, login, password)
            val w = c.enqueue(Request(method = "POST", path = "/api/jobs/j-kt-out-1/complete", body = "{}".toByteArray()))
            expectError<CellbindException.InvalidInput> {
                runBlocking { c.enqueue(Request(method = "GET", path = "/api/routes/today")) }
            }
            val out = c.signOut()
            check(out.revoked) { "sign-out not confirmed" }
            check(out.undelivered.map { it.id } == listOf(w.id)) { "undelivered ${out.undelivered}" }
            check(store.blobs[StoreSlot.OUTBOX] == null && store.blob == null) { "store not cleared" }
        }
    },
    "a JCA P-256 DeviceKey (DER signatures) binds the session to its thumbprint" to {
        runBlocking {
            val key = JcaDeviceKey()
            val store = MemoryStore()
            val c = client(store, deviceKey = key)
            val info = c.signIn(contractor, login, password)
            check(info.keyThumbprint == key.thumbprint()) { "bound to ${info.keyThumbprint}, the key is ${key.thumbprint()}" }
            check(key.signs >= 1) { "the key signed nothing" }
            val r = c.request("GET", "/api/routes/today", null)
            check(r.status.toInt() == 200) { "status ${r.status}: ${String(r.body)}" }
            check(String(r.body).contains("\"contractor_id\":\"$contractor\"")) { String(r.body) }
            val w = c.request("POST", "/api/jobs/j-kt-key-1/complete", "{}".toByteArray())
            check(w.status.toInt() == 200) { "write status ${w.status}: ${String(w.body)}" }
            check(key.signs >= 3) { "signs ${key.signs}" }
            check(!store.blob!!.contains("device_key")) { "the app's key was stored" }
            check(c.session()?.keyThumbprint == key.thumbprint()) { "session ${c.session()}" }

            // a new client with the same key picks the session up and is served
            val c2 = client(store, deviceKey = key)
            check(c2.restore()?.sessionId == info.sessionId) { "not restored" }
            check(c2.request("GET", "/api/routes/today", null).status.toInt() == 200) { "restored session refused" }
            // with another key (the keystore lost this one) there is nothing to restore
            check(client(store, deviceKey = JcaDeviceKey()).restore() == null) { "restored with another key" }
        }
    },
    "a DeviceKey that cannot sign is DeviceKey" to {
        val locked = object : DeviceKey {
            val inner = JcaDeviceKey()
            override fun publicKeyJwk(): String = inner.publicKeyJwk()
            override fun sign(data: ByteArray): ByteArray = throw java.security.SignatureException("user authentication required")
        }
        val c = client(MemoryStore(), deviceKey = locked)
        val e = expectError<CellbindException.DeviceKey> {
            runBlocking { c.signIn(contractor, login, password) }
        }
        check(e.message?.contains("authentication required") == true) { "message ${e.message}" }
        check(c.session() == null) { "session after a failed sign-in" }
    },
    "bad configuration is Config" to {
        expectError<CellbindException.Config> { client(MemoryStore(), key = "AAAA") }
    },
)

var failed = 0
for ((name, body) in tests) {
    try {
        body()
        println("PASS $name")
    } catch (e: Throwable) {
        failed++
        println("FAIL $name: $e")
    }
}
println("kotlin bindings: ${tests.size - failed} passed, $failed failed")
if (failed > 0) kotlin.system.exitProcess(1)
