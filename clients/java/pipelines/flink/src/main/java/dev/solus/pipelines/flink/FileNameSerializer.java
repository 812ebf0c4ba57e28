package dev.solus.pipelines.flink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/** Committables (pending file names) in checkpoints: UTF-8. */
final class FileNameSerializer implements SimpleVersionedSerializer<String> {
    @Override
    public int getVersion() {
        return 1;
    }

    @Override
    public byte[] serialize(String name) {
        return name.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public String deserialize(int version, byte[] bytes) {
        if (version != 1) {
            throw new IllegalArgumentException("unknown committable version " + version);
        }
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
