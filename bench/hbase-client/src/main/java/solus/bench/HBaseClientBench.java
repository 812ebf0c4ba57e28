package solus.bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.RegionMetrics;
import org.apache.hadoop.hbase.ServerName;
import org.apache.hadoop.hbase.Size;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.CompactionState;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hbase.thirdparty.com.google.common.hash.Hashing;
import org.apache.hbase.thirdparty.com.google.gson.JsonArray;
import org.apache.hbase.thirdparty.com.google.gson.JsonElement;
import org.apache.hbase.thirdparty.com.google.gson.JsonObject;
import org.apache.hbase.thirdparty.com.google.gson.JsonParser;

/**
 * Solus's logical work done with HBase's own Java client, the way the
 * original Java Solus does it: per request of `batch` entities, one
 * {@code Table.get(List<Get>)} with one Get per touched shard row asking only
 * that row's {@code <bit>#ttl} qualifiers, then (add-if-absent: for the
 * absent entities only; add: for all, without the get) one
 * {@code Table.put(List<Put>)} of {@code <bit>#ttl} = expiry ms with
 * {@code Put.setTTL}. Rows, qualifiers and cell values follow Solus's
 * byte-exact contract (src/contract, checked against test-vectors.json at
 * start-up), so it touches the same cells as Solus on the same deduper.
 *
 * <p>Usage: java -cp CLASSPATH HBaseClientBench.java --zk-port PORT --op
 * add-if-absent|check|add [options]; --help lists them. Prints a human line
 * on stderr and one JSON object on stdout; exit 0 on a finished run (failed
 * requests are counted, not fatal), 2 on bad arguments, 3 on a contract
 * mismatch, 1 on other errors.
 */
public final class HBaseClientBench {
  static final byte[] DATA_FAMILY = "S".getBytes(StandardCharsets.US_ASCII);
  static final byte[] META_FAMILY = "C".getBytes(StandardCharsets.US_ASCII);

  // ---- the contract (src/contract/hashing.rs, layout.rs) ----

  /** floorMod(h1, shards), h1 = Murmur3 x64-128 seed 0's first 8 bytes as a little-endian i64. */
  static int shardOf(byte[] entity, int shards) {
    long h1 = Hashing.murmur3_128(0).hashBytes(entity).asLong();
    return (int) Math.floorMod(h1, (long) shards);
  }

  /** k positions: MD5([salt] ++ entity) as big-endian i32s, abs(v % bitsPerShard). */
  static void bitPositions(MessageDigest md5, byte[] entity, int bitsPerShard, int[] out) {
    int k = out.length;
    for (int salt = 0; salt * 4 < k; salt++) {
      md5.reset();
      md5.update((byte) salt);
      byte[] d = md5.digest(entity);
      for (int j = 0; j < 4 && salt * 4 + j < k; j++) {
        int v = ((d[4 * j] & 0xff) << 24) | ((d[4 * j + 1] & 0xff) << 16)
            | ((d[4 * j + 2] & 0xff) << 8) | (d[4 * j + 3] & 0xff);
        out[salt * 4 + j] = Math.abs(v % bitsPerShard);
      }
    }
  }

  /** One-byte HBaseWD prefix (Java Arrays.hashCode, Math.abs, % 256) then the key. */
  static byte[] prefixed(String key) {
    byte[] k = key.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[k.length + 1];
    out[0] = (byte) (Math.abs(Arrays.hashCode(k)) % 256);
    System.arraycopy(k, 0, out, 1, k.length);
    return out;
  }

  static byte[] dataRow(int shard, String client, String deduper) {
    return prefixed(shard + "|" + client + "|" + deduper);
  }

  static byte[] ttlQualifier(int bit) {
    return (bit + "#ttl").getBytes(StandardCharsets.US_ASCII);
  }

  static byte[] longBytes(long v) {
    byte[] b = new byte[8];
    for (int i = 7; i >= 0; i--) {
      b[i] = (byte) v;
      v >>>= 8;
    }
    return b;
  }

  static long toLong(byte[] b) {
    long v = 0;
    for (byte x : b) v = (v << 8) | (x & 0xff);
    return v;
  }

  static String hex(byte[] b) {
    StringBuilder s = new StringBuilder();
    for (byte x : b) s.append(String.format("%02x", x & 0xff));
    return s.toString();
  }

  static byte[] unhex(String s) {
    byte[] b = new byte[s.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    return b;
  }

  /** Checks every case of test-vectors.json; returns the number checked, throws on a mismatch. */
  static int verifyVectors(Path path) throws Exception {
    JsonObject root = JsonParser.parseString(Files.readString(path)).getAsJsonObject();
    MessageDigest md5 = MessageDigest.getInstance("MD5");
    int checked = 0;
    for (JsonElement e : root.getAsJsonArray("cases")) {
      JsonObject c = e.getAsJsonObject();
      byte[] entity = unhex(c.get("entity_hex").getAsString());
      int shards = c.get("shards").getAsInt();
      byte[] h = Hashing.murmur3_128(0).hashBytes(entity).asBytes();
      expect(hex(h), c.get("murmur3_x64_128_seed0_hex").getAsString(), "murmur3", c);
      int shard = shardOf(entity, shards);
      expect(shard, c.get("shard").getAsInt(), "shard", c);
      JsonArray bits = c.getAsJsonArray("bits");
      int[] got = new int[c.get("hash_functions").getAsInt()];
      bitPositions(md5, entity, c.get("bits_per_shard").getAsInt(), got);
      JsonArray qs = c.getAsJsonArray("qualifiers");
      for (int i = 0; i < got.length; i++) {
        expect(got[i], bits.get(i).getAsInt(), "bit " + i, c);
        expect(new String(ttlQualifier(got[i]), StandardCharsets.US_ASCII), qs.get(i).getAsString(), "qualifier", c);
      }
      byte[] row = dataRow(shard, c.get("client_id").getAsString(), c.get("deduper").getAsString());
      expect(hex(row), c.get("row_key_hex").getAsString(), "row key", c);
      checked++;
    }
    for (JsonElement e : root.getAsJsonArray("encodings")) {
      JsonObject c = e.getAsJsonObject();
      if (!c.has("expire_time_ms")) continue;
      expect(hex(longBytes(c.get("expire_time_ms").getAsLong())), c.get("cell_value_hex").getAsString(), "cell value", c);
      checked++;
    }
    return checked;
  }

  static void expect(Object got, Object want, String what, JsonObject c) {
    if (!got.equals(want)) {
      throw new IllegalStateException("contract mismatch: " + what + " is " + got + ", test vector says " + want + " (" + c + ")");
    }
  }

  // ---- options ----

  static final class Opts {
    String zkQuorum = "127.0.0.1";
    int zkPort = 2181;
    String table = "solus_deduper";
    String client = "bench";
    String deduper = "bench";
    String op = "add-if-absent";
    int batch = 1000;
    int concurrency = 4;
    long keySpace = 1_000_000;
    double duration = 10;
    long ttlMs = 3_600_000;
    long seed = 1;
    Integer shards, bitsPerShard, hashFunctions;
    Long expirySeconds;
    Path vectors;
    boolean majorCompact = false;

    static final String HELP = String.join("\n",
        "HBaseClientBench: Solus's work with HBase's own client (see the class comment).",
        "  --zk-quorum HOST        ZooKeeper quorum (127.0.0.1)",
        "  --zk-port PORT          ZooKeeper client port (2181)",
        "  --table NAME            data table (solus_deduper)",
        "  --client ID             client id (bench)",
        "  --deduper NAME          deduper (bench); its geometry is read from <client>_dedupers",
        "  --shards N --bits-per-shard N --hash-functions N   geometry instead of the meta row (all three)",
        "  --expiry-seconds S      cell TTL (default: the deduper's expiry from its meta row, else 86400)",
        "  --op add-if-absent|check|add|settle   (add-if-absent); settle flushes --table's memstores",
        "                          and waits (at most --duration, default 10 s) until no compaction runs",
        "  --major-compact true|false   settle then major-compacts the table and waits for it (false)",
        "  --batch N               entities per request (1000)",
        "  --concurrency N         threads, one request in flight each (4)",
        "  --key-space N           keys key:<12 digits>, i uniform in [0, N) as `solus bench` (1000000)",
        "  --duration S            seconds (10)",
        "  --ttl-ms MS             expiry of writes from now, as `solus bench --ttl-ms` (3600000)",
        "  --seed N                key sampler seed (1)",
        "  --vectors PATH          test-vectors.json to verify the contract against (required)");

    static Opts parse(String[] args) {
      Opts o = new Opts();
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        if (a.equals("--help") || a.equals("-h")) {
          System.err.println(HELP);
          System.exit(0);
        }
        if (i + 1 >= args.length) usage(a + " needs a value");
        String v = args[++i];
        try {
          switch (a) {
            case "--zk-quorum": o.zkQuorum = v; break;
            case "--zk-port": o.zkPort = Integer.parseInt(v); break;
            case "--table": o.table = v; break;
            case "--client": o.client = v; break;
            case "--deduper": o.deduper = v; break;
            case "--op": o.op = v; break;
            case "--batch": o.batch = Integer.parseInt(v); break;
            case "--concurrency": o.concurrency = Integer.parseInt(v); break;
            case "--key-space": o.keySpace = Long.parseLong(v); break;
            case "--duration": o.duration = Double.parseDouble(v); break;
            case "--ttl-ms": o.ttlMs = Long.parseLong(v); break;
            case "--seed": o.seed = Long.parseLong(v); break;
            case "--shards": o.shards = Integer.parseInt(v); break;
            case "--bits-per-shard": o.bitsPerShard = Integer.parseInt(v); break;
            case "--hash-functions": o.hashFunctions = Integer.parseInt(v); break;
            case "--expiry-seconds": o.expirySeconds = Long.parseLong(v); break;
            case "--vectors": o.vectors = Path.of(v); break;
            case "--major-compact":
              if (!v.equals("true") && !v.equals("false")) usage("--major-compact takes true or false, got '" + v + "'");
              o.majorCompact = v.equals("true");
              break;
            default: usage("unknown option " + a);
          }
        } catch (NumberFormatException e) {
          usage(a + " takes a number, got '" + v + "'");
        }
      }
      if (!Arrays.asList("add-if-absent", "check", "add", "settle").contains(o.op)) {
        usage("--op must be add-if-absent, check, add or settle");
      }
      if (o.batch < 1 || o.concurrency < 1 || o.keySpace < 1 || !(o.duration > 0)) {
        usage("--batch, --concurrency, --key-space and --duration must be positive");
      }
      int given = (o.shards != null ? 1 : 0) + (o.bitsPerShard != null ? 1 : 0) + (o.hashFunctions != null ? 1 : 0);
      if (given != 0 && given != 3) usage("give --shards, --bits-per-shard and --hash-functions together, or none");
      if (o.vectors == null) usage("--vectors PATH (../shared/test-vectors.json) is required: the contract is checked first");
      return o;
    }

    static void usage(String why) {
      System.err.println("HBaseClientBench: " + why + "\n" + HELP);
      System.exit(2);
    }
  }

  // ---- the geometry, from the deduper's meta row ----

  static void readGeometry(Connection conn, Opts o) throws IOException {
    if (o.shards != null && o.expirySeconds != null) return;
    TableName meta = TableName.valueOf(o.client + "_dedupers");
    byte[] row = prefixed("deDuperConfig|" + o.client + "|" + o.deduper);
    try (Table t = conn.getTable(meta)) {
      Result r = t.get(new Get(row).addFamily(META_FAMILY));
      if (r.isEmpty()) {
        if (o.shards == null) {
          throw new IOException("no meta row for deduper " + o.client + "/" + o.deduper + " in " + meta
              + " (create it through Solus first, or pass --shards --bits-per-shard --hash-functions)");
        }
        o.expirySeconds = 86_400L;
        return;
      }
      if (o.shards == null) {
        o.shards = (int) toLong(r.getValue(META_FAMILY, bytes("sh")));
        o.bitsPerShard = (int) toLong(r.getValue(META_FAMILY, bytes("bps")));
        o.hashFunctions = (int) toLong(r.getValue(META_FAMILY, bytes("hf")));
      }
      if (o.expirySeconds == null) {
        byte[] e = r.getValue(META_FAMILY, bytes("expiry"));
        o.expirySeconds = e == null ? 86_400L : toLong(e);
      }
    }
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.US_ASCII);
  }

  // ---- the load ----

  /** One request of `keys`: get (unless add), then put (unless check). */
  static final class Worker implements Runnable {
    final Opts o;
    final Table table;
    final SplittableRandom rng;
    final MessageDigest md5;
    final long deadlineNs;
    final byte[][] rows;
    final byte[][] qualifierCache;
    long[] latencies = new long[1024];
    int requests;
    long failed;
    long absentSeen;
    static final AtomicLong FIRST_ERROR_SHOWN = new AtomicLong();

    Worker(Opts o, Table table, long seed, long deadlineNs) throws Exception {
      this.o = o;
      this.table = table;
      this.rng = new SplittableRandom(seed);
      this.md5 = MessageDigest.getInstance("MD5");
      this.deadlineNs = deadlineNs;
      rows = new byte[o.shards][];
      for (int s = 0; s < o.shards; s++) rows[s] = dataRow(s, o.client, o.deduper);
      qualifierCache = new byte[Math.min(o.bitsPerShard, 1 << 21)][];
    }

    byte[] qualifier(int bit) {
      if (bit >= qualifierCache.length) return ttlQualifier(bit);
      byte[] q = qualifierCache[bit];
      if (q == null) qualifierCache[bit] = q = ttlQualifier(bit);
      return q;
    }

    @Override
    public void run() {
      int k = o.hashFunctions;
      int[] shard = new int[o.batch];
      int[][] bits = new int[o.batch][k];
      while (System.nanoTime() < deadlineNs) {
        long t0 = System.nanoTime();
        try {
          for (int i = 0; i < o.batch; i++) {
            byte[] key = String.format(Locale.ROOT, "key:%012d", rng.nextLong(o.keySpace)).getBytes(StandardCharsets.US_ASCII);
            shard[i] = shardOf(key, o.shards);
            bitPositions(md5, key, o.bitsPerShard, bits[i]);
          }
          long now = System.currentTimeMillis();
          boolean[] absent = new boolean[o.batch];
          if (o.op.equals("add")) {
            Arrays.fill(absent, true);
          } else {
            absent = read(shard, bits, now);
            for (boolean a : absent) if (a) absentSeen++;
          }
          if (!o.op.equals("check")) write(shard, bits, absent, now + o.ttlMs);
          long dt = System.nanoTime() - t0;
          if (requests == latencies.length) latencies = Arrays.copyOf(latencies, requests * 2);
          latencies[requests++] = dt;
        } catch (Exception e) {
          failed++;
          if (FIRST_ERROR_SHOWN.getAndIncrement() < 3) System.err.println("HBaseClientBench: request failed: " + e);
          if (failed > 100 && requests == 0) {
            System.err.println("HBaseClientBench: 100 requests failed and none succeeded; stopping this worker");
            return;
          }
        }
      }
    }

    /** One get per touched row with that row's qualifiers; absent[i] when a bit has no live cell. */
    boolean[] read(int[] shard, int[][] bits, long now) throws IOException {
      Map<Integer, TreeSet<Integer>> perRow = new TreeMap<>();
      for (int i = 0; i < shard.length; i++) {
        TreeSet<Integer> s = perRow.computeIfAbsent(shard[i], x -> new TreeSet<>());
        for (int b : bits[i]) s.add(b);
      }
      List<Get> gets = new ArrayList<>(perRow.size());
      List<Integer> order = new ArrayList<>(perRow.size());
      for (Map.Entry<Integer, TreeSet<Integer>> e : perRow.entrySet()) {
        Get g = new Get(rows[e.getKey()]);
        for (int b : e.getValue()) g.addColumn(DATA_FAMILY, qualifier(b));
        gets.add(g);
        order.add(e.getKey());
      }
      Result[] results = table.get(gets);
      Map<Integer, Result> byShard = new HashMap<>();
      for (int i = 0; i < results.length; i++) byShard.put(order.get(i), results[i]);
      boolean[] absent = new boolean[shard.length];
      for (int i = 0; i < shard.length; i++) {
        Result r = byShard.get(shard[i]);
        for (int b : bits[i]) {
          byte[] v = r.getValue(DATA_FAMILY, qualifier(b));
          if (v == null || v.length != 8 || toLong(v) <= now) {
            absent[i] = true;
            break;
          }
        }
      }
      return absent;
    }

    /** One put per touched row: the bits of the absent entities, ts = expiry, TTL = the deduper's expiry. */
    void write(int[] shard, int[][] bits, boolean[] absent, long expireMs) throws IOException {
      Map<Integer, TreeSet<Integer>> perRow = new TreeMap<>();
      for (int i = 0; i < shard.length; i++) {
        if (!absent[i]) continue;
        TreeSet<Integer> s = perRow.computeIfAbsent(shard[i], x -> new TreeSet<>());
        for (int b : bits[i]) s.add(b);
      }
      if (perRow.isEmpty()) return;
      byte[] value = longBytes(expireMs);
      List<Put> puts = new ArrayList<>(perRow.size());
      for (Map.Entry<Integer, TreeSet<Integer>> e : perRow.entrySet()) {
        // Stamped with the expiry as Solus stamps them: the newest expiry is the one version kept.
        Put p = new Put(rows[e.getKey()], expireMs);
        for (int b : e.getValue()) p.addColumn(DATA_FAMILY, qualifier(b), expireMs, value);
        p.setTTL(o.expirySeconds * 1000);
        puts.add(p);
      }
      table.put(puts);
    }
  }

  static double percentileMs(long[] sorted, double q) {
    if (sorted.length == 0) return 0;
    int i = (int) Math.ceil(q * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e6;
  }

  /**
   * Flushes the table and waits until no compaction runs on it (with
   * {@code --major-compact true}, then major-compacts it and waits again), at
   * most {@code --duration} seconds in all, so the next measured run starts
   * with empty memstores (and one store file per store) and pays for no
   * earlier run's flushes or compactions. Prints
   * one JSON line: seconds waited and whether HBase settled in time.
   */
  static void settle(Connection conn, Opts o) throws IOException, InterruptedException {
    TableName tn = TableName.valueOf(o.table);
    long start = System.nanoTime();
    long deadline = start + (long) (o.duration * 1e9);
    CompactionState state;
    long memstore;
    try (Admin admin = conn.getAdmin()) {
      // Not waited on: HBase 2.6.1's flush procedure can lose its completion ("procedure event for N
      // is null") and never return; the memstore size below says when the flush is done.
      Thread flusher = new Thread(() -> {
        try {
          admin.flush(tn);
        } catch (IOException e) {
          System.err.println("HBaseClientBench: flush of " + o.table + ": " + e);
        }
      });
      flusher.setDaemon(true);
      flusher.start();
      Thread.sleep(1000); // a flush that crosses the store-file threshold queues its compaction after it
      long flushedAt = System.nanoTime();
      do {
        state = admin.getCompactionState(tn);
        memstore = 0;
        for (ServerName sn : admin.getRegionServers()) {
          for (RegionMetrics m : admin.getRegionMetrics(sn, tn)) memstore += (long) m.getMemStoreSize().get(Size.Unit.BYTE);
        }
        if (state == CompactionState.NONE && memstore <= (1 << 20)) break;
        if (memstore > (1 << 20) && System.nanoTime() - flushedAt > 30_000_000_000L) {
          // The table flush was lost (its memstore still full 30 s on; seen before the run after
          // an Add: 66 MB left, 300 s waited, and that run paid the flush and compactions): ask
          // every region server to flush its regions instead, again every 30 s.
          System.err.printf(Locale.ROOT, "HBaseClientBench: memstore still %d bytes; flushing the region servers%n", memstore);
          for (ServerName sn : admin.getRegionServers()) {
            Thread nudge = new Thread(() -> {
              try {
                admin.flushRegionServer(sn);
              } catch (IOException e) {
                System.err.println("HBaseClientBench: flush of region server " + sn + ": " + e);
              }
            });
            nudge.setDaemon(true);
            nudge.start();
          }
          flushedAt = System.nanoTime();
        }
        Thread.sleep(500);
      } while (System.nanoTime() < deadline);
      if (o.majorCompact && state == CompactionState.NONE && memstore <= (1 << 20)) {
        // One store file per store afterwards: the next run's flushes then reach the minor-compaction
        // threshold at the same point whichever system wrote before it.
        admin.majorCompact(tn);
        Thread.sleep(1000); // the request is queued; its state shows once the compaction starts
        do {
          state = admin.getCompactionState(tn);
          if (state == CompactionState.NONE) break;
          Thread.sleep(500);
        } while (System.nanoTime() < deadline);
      }
    }
    double waited = (System.nanoTime() - start) / 1e9;
    boolean settled = state == CompactionState.NONE && memstore <= (1 << 20);
    System.err.printf(Locale.ROOT, "HBaseClientBench: flushed %s: compaction %s, memstore %d bytes after %.1f s%n",
        o.table, state, memstore, waited);
    System.out.printf(Locale.ROOT, "{\"system\":\"hbase-client\",\"op\":\"settle\",\"seconds\":%.1f,\"settled\":%b}%n",
        waited, settled);
  }

  public static void main(String[] args) throws Exception {
    Opts o = Opts.parse(args);
    int checked;
    try {
      checked = verifyVectors(o.vectors);
    } catch (IllegalStateException e) {
      System.err.println("HBaseClientBench: " + e.getMessage());
      System.exit(3);
      return;
    }
    System.err.println("HBaseClientBench: contract verified against " + o.vectors + " (" + checked + " vectors)");

    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", o.zkQuorum);
    conf.setInt("hbase.zookeeper.property.clientPort", o.zkPort);
    // A dead HBase fails a request within a minute (the default retries for 20), so a run ends near its duration.
    conf.setInt("hbase.client.operation.timeout", 60_000);
    try (Connection conn = ConnectionFactory.createConnection(conf)) {
      if (o.op.equals("settle")) {
        settle(conn, o);
        System.out.flush();
        System.exit(0); // the flusher thread may still wait on HBase's lost procedure: do not wait for it

      }
      readGeometry(conn, o);
      System.err.printf(Locale.ROOT,
          "HBaseClientBench: %s on %s, deduper %s/%s: shards %d, bits per shard %d, hash functions %d, expiry %d s;"
              + " batch %d, concurrency %d, key space %d, %.1f s%n",
          o.op, o.table, o.client, o.deduper, o.shards, o.bitsPerShard, o.hashFunctions, o.expirySeconds,
          o.batch, o.concurrency, o.keySpace, o.duration);
      TableName tn = TableName.valueOf(o.table);
      List<Worker> workers = new ArrayList<>();
      List<Table> tables = new ArrayList<>();
      long start = System.nanoTime();
      long deadline = start + (long) (o.duration * 1e9);
      for (int w = 0; w < o.concurrency; w++) {
        Table t = conn.getTable(tn);
        tables.add(t);
        workers.add(new Worker(o, t, o.seed * 1_000_003L + w, deadline));
      }
      List<Thread> threads = new ArrayList<>();
      for (Worker w : workers) {
        Thread t = new Thread(w, "bench-" + threads.size());
        t.start();
        threads.add(t);
      }
      for (Thread t : threads) t.join();
      double seconds = (System.nanoTime() - start) / 1e9;
      for (Table t : tables) t.close();

      long requests = 0, failed = 0, absent = 0;
      List<long[]> parts = new ArrayList<>();
      for (Worker w : workers) {
        requests += w.requests;
        failed += w.failed;
        absent += w.absentSeen;
        parts.add(Arrays.copyOf(w.latencies, w.requests));
      }
      long[] all = new long[(int) requests];
      int at = 0;
      for (long[] p : parts) {
        System.arraycopy(p, 0, all, at, p.length);
        at += p.length;
      }
      Arrays.sort(all);
      long entities = requests * o.batch;
      double eps = entities / seconds;
      double p50 = percentileMs(all, 0.50), p99 = percentileMs(all, 0.99);
      double max = all.length == 0 ? 0 : all[all.length - 1] / 1e6;
      System.err.printf(Locale.ROOT,
          "hbase-client %s: %d requests (%d entities) in %.1f s = %.0f entities/s; latency p50 %.2f ms, p99 %.2f ms,"
              + " max %.2f ms; failed requests %d%n",
          o.op, requests, entities, seconds, eps, p50, p99, max, failed);
      System.out.printf(Locale.ROOT,
          "{\"system\":\"hbase-client\",\"op\":\"%s\",\"batch\":%d,\"concurrency\":%d,\"shards\":%d,"
              + "\"bits_per_shard\":%d,\"hash_functions\":%d,\"requests\":%d,\"entities\":%d,\"seconds\":%.3f,"
              + "\"entities_per_second\":%.1f,\"latency_p50_ms\":%.3f,\"latency_p99_ms\":%.3f,\"latency_max_ms\":%.3f,"
              + "\"absent\":%d,\"failed_requests\":%d}%n",
          o.op, o.batch, o.concurrency, o.shards, o.bitsPerShard, o.hashFunctions, requests, entities, seconds,
          eps, p50, p99, max, o.op.equals("add") ? -1 : absent, failed);
    }
  }
}
