package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * One {@link SolusServer} for all the tests of a class, started before the first and closed after
 * the last, with the class's client id and deduper names:
 * {@code @RegisterExtension static final SharedServer SERVER = new SharedServer("java-test", "d");}
 */
final class SharedServer implements BeforeAllCallback, AfterAllCallback {
    private final String clientId;
    private final String dedupers;
    private final AtomicInteger names = new AtomicInteger();
    private SolusServer server;

    /** {@code dedupers}: the prefix of the names {@link #deduper} gives, then 1, 2, ... */
    SharedServer(String clientId, String dedupers) {
        this.clientId = clientId;
        this.dedupers = dedupers;
    }

    SharedServer(String clientId) {
        this(clientId, "d");
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        server = SolusServer.start();
    }

    @Override
    public void afterAll(ExtensionContext context) {
        if (server != null) {
            server.close();
            server = null;
        }
    }

    SolusServer server() {
        return server;
    }

    /** A client of the shared server with the class's client id. */
    SolusClient.Builder client() {
        return client(server);
    }

    /** A client of {@code s} (a test's own server) with the class's client id. */
    SolusClient.Builder client(SolusServer s) {
        return SolusClient.builder().address(s.address()).clientId(clientId);
    }

    /** A fresh deduper of n = 100,000, p = 1%, expiry 1 h, created through {@code c}; its name. */
    String deduper(SolusClient c) {
        String name = dedupers + names.incrementAndGet();
        assertEquals(name, c.createDeduper(name, 100_000, 0.01, Duration.ofHours(1)).getName());
        return name;
    }
}
