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

class MemoryStore : SessionStore {
    @Volatile var blob: String? = null
    @Volatile var saves = 0
    @Volatile var clears = 0
    override fun load(): String? = blob
    override fun save(blob: String) { this.blob = blob; saves++ }
    override fun clear() { blob = null; clears++ }
}

class RecordingObserver : RequestObserver {
    val events = java.util.Collections.synchronizedList(mutableListOf<RequestEvent>())
    override fun onRequest(event: RequestEvent) { events.add(event) }
}

fun client(store: SessionStore, key: String = p("map_public_key"), observer: RequestObserver? = null) =
    CellbindClient(CellbindConfig(mapBytes, key, caPem, store, observer))

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
            val r = c.request("GET", "/api/routes/today", null)
            check(r.status.toInt() == 200) { "status ${r.status}" }
            check(String(r.body).contains("\"contractor_id\":\"$contractor\"")) { String(r.body) }

            val c2 = client(store)
            check(c2.session() == null) { "new client has a session before restore" }
            val restored = c2.restore()
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
        check(runBlocking { c.signOut() }) { "sign-out not confirmed by the cell" }
        check(store.blob == null) { "store not cleared" }
        expectError<CellbindException.NotSignedIn> {
            runBlocking { c.request("GET", "/api/routes/today", null) }
        }
        val c2 = client(store)
        check(c2.restore() == null) { "restored a cleared session" }
        expectError<CellbindException.NotSignedIn> {
            runBlocking { c2.request("GET", "/api/routes/today", null) }
        }
    },
    "a failing foreign store is Store" to {
        val broken = object : SessionStore {
            override fun load(): String? = null
            override fun save(blob: String) { throw IllegalStateException("keystore unavailable") }
            override fun clear() {}
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
        check(c.restore() != null) { "edited session not restored" }
        val e = expectError<CellbindException.Network> {
            runBlocking { c.request("GET", "/api/routes/today", null) }
        }
        check(e.kind == NetworkErrorKind.CONNECT) { "kind ${e.kind}" }
        check(!e.reachedCell) { "reachedCell true for a refused connection" }
        check(obs.events.size == 1) { "events ${obs.events}" }
        val ev = obs.events[0]
        check(ev.outcome == RequestOutcome.Network(NetworkErrorKind.CONNECT) && !ev.reachedCell && ev.status == null) { "event $ev" }
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
