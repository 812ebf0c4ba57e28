package dev.solus.pipelines.kafka;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The application's instances, each a child JVM running {@link DedupApp}, logging to
 * {@code WORK/<name>.log}. Their pids are appended to {@code WORK/children.pids} so that run.sh
 * can stop them even if this process dies; {@link #close} stops the ones still running.
 */
final class Instances implements AutoCloseable {
    private final Path work;
    private final List<String> appArgs;
    private final String heap;
    private final Map<String, Process> running = new LinkedHashMap<>();

    /** {@code appArgs}: DedupApp's arguments except STATE_DIR, which is per instance. */
    Instances(Path work, List<String> appArgs, String heap) {
        this.work = work;
        this.appArgs = appArgs;
        this.heap = heap;
    }

    /** Starts instance {@code name} with state directory {@code WORK/state-<stateName>}. */
    void start(String name, String stateName) {
        List<String> cmd = new ArrayList<>(List.of(
                ProcessHandle.current().info().command().orElse("java"),
                "-Xmx" + heap, "-XX:+UseSerialGC",
                "-cp", System.getProperty("java.class.path"), DedupApp.class.getName()));
        List<String> args = new ArrayList<>(appArgs);
        args.add(4, work.resolve("state-" + stateName).toString());
        args.add(name);
        cmd.addAll(args);
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(work.resolve(name + ".log").toFile())).start();
            Files.writeString(work.resolve("children.pids"), p.pid() + "\n", StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            running.put(name, p);
        } catch (IOException e) {
            throw new UncheckedIOException("starting instance " + name, e);
        }
    }

    /** kill -9 of instance {@code name}; returns once it is gone. */
    void kill(String name) throws InterruptedException {
        Process p = running.remove(name);
        p.destroyForcibly(); // SIGKILL
        p.waitFor();
    }

    /** The name of an instance that exited by itself (an error), or null. */
    String exited() {
        for (Map.Entry<String, Process> e : running.entrySet()) {
            if (!e.getValue().isAlive()) {
                return e.getKey() + " (exit code " + e.getValue().exitValue() + ", log " + work.resolve(e.getKey() + ".log") + ")";
            }
        }
        return null;
    }

    /** SIGTERM to every instance (a clean close), SIGKILL after 40 s. */
    @Override
    public void close() throws InterruptedException {
        running.values().forEach(Process::destroy);
        for (Process p : running.values()) {
            if (!p.waitFor(40, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor();
            }
        }
        running.clear();
    }
}
