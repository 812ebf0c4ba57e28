import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

/**
 * Waits until the broker at args[0] (host:port) answers describeCluster with one node and a
 * controller, for at most args[1] seconds; exit 0 when it does, 1 with the last error otherwise.
 * Run by standalone.sh as a single-file program on the broker's own classpath.
 */
public final class WaitReady {
    public static void main(String[] args) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        String last = "no answer yet";
        try (Admin admin = Admin.create(p)) {
            while (System.nanoTime() < deadline) {
                try {
                    var cluster = admin.describeCluster();
                    int nodes = cluster.nodes().get(5, TimeUnit.SECONDS).size();
                    if (nodes >= 1 && cluster.controller().get(5, TimeUnit.SECONDS) != null) {
                        return;
                    }
                    last = nodes + " nodes, no controller";
                } catch (Exception e) {
                    last = String.valueOf(e.getCause() != null ? e.getCause() : e);
                }
                Thread.sleep(500);
            }
        }
        System.err.println("WaitReady: broker " + args[0] + " not ready after " + args[1] + " s: " + last);
        System.exit(1);
    }
}
