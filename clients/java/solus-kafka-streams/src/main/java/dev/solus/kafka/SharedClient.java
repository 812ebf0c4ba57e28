package dev.solus.kafka;

import dev.solus.client.SolusClient;
import java.time.Duration;
import java.util.Objects;

/**
 * One client for all the processors of a supplier: built by the first, closed by the last. The
 * close does not wait for answers: the records still waiting are in each task's pending-record
 * store, and their next owner asks again with the same record ids.
 */
final class SharedClient {
    private final SolusClient.Builder settings;
    private SolusClient client;
    private int users;

    SharedClient(SolusClient.Builder settings) {
        this.settings = Objects.requireNonNull(settings, "settings");
    }

    synchronized SolusClient acquire() {
        if (client == null) {
            client = settings.build();
        }
        users++;
        return client;
    }

    synchronized void release() {
        if (--users == 0) {
            client.close(Duration.ZERO);
            client = null;
        }
    }
}
