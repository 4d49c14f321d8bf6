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

fun client(store: SessionStore, key: String = p("map_public_key")) =
    CellbindClient(CellbindConfig(mapBytes, key, caPem, store))

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
