package dev.solus.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * A real {@code solus serve} for tests: the cargo-built binary named by the {@code solus.bin}
 * system property or the {@code SOLUS_BIN} environment variable, with a fresh embedded data
 * directory kept across {@link #restart()}. The server binds port 0 for gRPC and metrics and the
 * ports it got are read from its log ("solus listening addr=", "metrics on"): no port is picked by
 * binding and releasing a socket, which another process could take in between. A restart binds
 * the same ports again.
 */
public final class SolusServer implements AutoCloseable {
    private final Path binary;
    private final Path dir;
    /** 0 until the first start has bound one (the server binds port 0 and logs what it got). */
    private int grpcPort;
    private int metricsPort;
    private Process process;

    private final Map<String, String> env;

    private SolusServer(Map<String, String> env) throws IOException {
        this.env = env;
        this.binary = binary();
        this.dir = Files.createTempDirectory("solus-java-test");
    }

    /** Starts a server and waits until it accepts connections. */
    public static SolusServer start() {
        return start(Map.of());
    }

    /**
     * Starts a server with extra settings as environment variables (e.g.
     * {@code SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS}) and waits until it accepts connections.
     */
    public static SolusServer start(Map<String, String> env) {
        try {
            SolusServer s = new SolusServer(env);
            s.launch();
            return s;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The cargo-built {@code solus} binary the tests run. */
    public static Path binary() {
        String p = System.getProperty("solus.bin");
        if (p == null || p.isBlank() || p.startsWith("${")) {
            p = System.getenv("SOLUS_BIN");
        }
        if (p == null || p.isBlank()) {
            throw new IllegalStateException("no Solus server binary: run `cargo build` at the repository root, then "
                    + "give its path as SOLUS_BIN=.../target/debug/solus or -Dsolus.bin=...");
        }
        Path path = Path.of(p).toAbsolutePath();
        if (!Files.isExecutable(path)) {
            throw new IllegalStateException("SOLUS_BIN / solus.bin = " + path + " is not an executable file: run `cargo build`");
        }
        return path;
    }

    /** {@code 127.0.0.1:<port>} of the gRPC listener (the same across restarts). */
    public String address() {
        return "127.0.0.1:" + grpcPort;
    }

    /** Stops the server with SIGTERM (in-flight requests finish) and waits for it to exit. */
    public void stop() {
        if (process == null) {
            return;
        }
        process.destroy();
        try {
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        process = null;
    }

    /** Stops it, then starts it again on the same ports and data directory. */
    public void restart() {
        stop();
        try {
            launch();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Starts it again after {@link #stop()}. */
    public void startAgain() {
        try {
            launch();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Freezes the server with SIGSTOP: connections stay open, nothing is answered. */
    public void pause() {
        signal("-STOP");
    }

    /** Lets a {@link #pause() paused} server run again (SIGCONT). */
    public void resume() {
        signal("-CONT");
    }

    private void signal(String sig) {
        if (process == null) {
            throw new IllegalStateException("solus serve is not running");
        }
        try {
            Process kill = new ProcessBuilder("kill", sig, Long.toString(process.pid())).inheritIO().start();
            if (kill.waitFor() != 0) {
                throw new IllegalStateException("kill " + sig + " " + process.pid() + " exited with " + kill.exitValue());
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while sending " + sig);
        }
    }

    /** {@code solus_requests_total{rpc=<rpc>,code=<code>}} from /metrics (0 when absent). */
    public long requests(String rpc, String code) {
        String text = metrics();
        Matcher m = Pattern.compile("^solus_requests_total\\{rpc=\"" + Pattern.quote(rpc) + "\",code=\""
                + Pattern.quote(code) + "\"\\} (\\d+)$", Pattern.MULTILINE).matcher(text);
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    /** The Prometheus text of /metrics. */
    public String metrics() {
        try (Socket s = new Socket("127.0.0.1", metricsPort)) {
            s.getOutputStream().write(("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            try (InputStream in = s.getInputStream()) {
                String resp = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                int body = resp.indexOf("\r\n\r\n");
                return body < 0 ? resp : resp.substring(body + 4);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading http://127.0.0.1:" + metricsPort + "/metrics", e);
        }
    }

    /** The server's log (stdout and stderr) so far. */
    public String log() {
        try {
            return Files.readString(dir.resolve("server.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Override
    public void close() {
        stop();
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // a temporary directory left behind is harmless
        }
    }

    private static final Pattern LISTENING = Pattern.compile("solus listening addr=127\\.0\\.0\\.1:(\\d+)");
    private static final Pattern METRICS = Pattern.compile("metrics on http://127\\.0\\.0\\.1:(\\d+)/metrics");

    private void launch() throws IOException {
        Path logFile = dir.resolve("server.log");
        long logStart = Files.exists(logFile) ? Files.size(logFile) : 0;
        ProcessBuilder pb = new ProcessBuilder(binary.toString(), "serve");
        pb.environment().put("SOLUS__SERVER__LISTEN", address());
        pb.environment().put("SOLUS__METRICS__LISTEN", "127.0.0.1:" + metricsPort);
        pb.environment().put("SOLUS__STORAGE__EMBEDDED__PATH", dir.resolve("data").toString());
        pb.environment().put("SOLUS__SERVER__DRAIN_TIMEOUT_MS", "5000");
        pb.environment().put("NO_COLOR", "1");
        pb.environment().remove("RUST_LOG");
        pb.environment().putAll(env);
        pb.environment().remove("SOLUS_BIN");
        pb.redirectErrorStream(true);
        pb.redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("server.log").toFile()));
        process = pb.start();
        Process started = process;
        Runtime.getRuntime().addShutdownHook(new Thread(started::destroyForcibly));
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        boolean metricsOn = !env.containsKey("SOLUS__METRICS__LISTEN") || !env.get("SOLUS__METRICS__LISTEN").isEmpty();
        while (System.nanoTime() < until) {
            if (!process.isAlive()) {
                throw new IllegalStateException("solus serve exited with " + process.exitValue() + ":\n" + log());
            }
            String text = log();
            text = text.length() >= logStart ? text.substring((int) logStart) : text;
            Matcher listening = LISTENING.matcher(text);
            Matcher metrics = METRICS.matcher(text);
            if (!listening.find() || (metricsOn && !metrics.find())) {
                sleep();
                continue;
            }
            grpcPort = Integer.parseInt(listening.group(1));
            if (metricsOn) {
                metricsPort = Integer.parseInt(metrics.group(1));
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", grpcPort), 200);
                return;
            } catch (IOException notYet) {
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException("interrupted while waiting for solus serve");
                }
            }
        }
        throw new IllegalStateException("solus serve did not listen on " + address() + " within 60 s:\n" + log());
    }

    private static void sleep() {
        try {
            Thread.sleep(20);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for solus serve");
        }
    }

    /** For messages: where the log is. */
    @Override
    public String toString() {
        return "solus serve at " + address() + " (data " + dir + ")";
    }

}
