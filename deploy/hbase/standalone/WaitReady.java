// Readiness probe for deploy/hbase/standalone.sh, run with Java's single-file
// source launcher on the classpath Maven resolved (no build step).
//
//   java -cp CLASSPATH WaitReady.java HOST PORT TRANSPORT TIMEOUT_SECONDS
//
// TRANSPORT is "buffered" or "framed" (binary protocol, as Solus's defaults).
// Ready means, through the Thrift1 server itself: getTableNames answers (the
// master is initialised) and a scan of hbase:meta returns a row (meta is
// assigned and online). Prints the HBase version and exits 0 once ready;
// exits 1 with the last error after TIMEOUT_SECONDS.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import org.apache.hadoop.hbase.thrift.generated.Hbase;
import org.apache.hadoop.hbase.thrift.generated.TRowResult;
import org.apache.hadoop.hbase.thrift.generated.TScan;
import org.apache.hadoop.hbase.util.VersionInfo;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.layered.TFramedTransport;

public class WaitReady {
  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: WaitReady HOST PORT buffered|framed TIMEOUT_SECONDS");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    boolean framed = args[2].equals("framed");
    long deadline = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000L;
    String last = "no attempt made";
    while (System.currentTimeMillis() < deadline) {
      try {
        String tables = probe(host, port, framed);
        System.out.println("HBase " + VersionInfo.getVersion() + " ready: Thrift1 on "
            + host + ":" + port + " (" + args[2] + ", binary), hbase:meta online, tables: " + tables);
        return;
      } catch (Exception e) {
        last = e.toString();
      }
      Thread.sleep(1000);
    }
    System.err.println("HBase not ready after " + args[3] + " s: " + last);
    System.exit(1);
  }

  static String probe(String host, int port, boolean framed) throws Exception {
    TSocket socket = new TSocket(host, port);
    socket.setTimeout(10_000);
    TTransport transport = framed ? new TFramedTransport(socket) : socket;
    transport.open();
    try {
      Hbase.Client client = new Hbase.Client(new TBinaryProtocol(transport));
      List<ByteBuffer> names = client.getTableNames();
      TScan scan = new TScan();
      scan.setCaching(1);
      int id = client.scannerOpenWithScan(bytes("hbase:meta"), scan, new HashMap<>());
      try {
        List<TRowResult> rows = client.scannerGetList(id, 1);
        if (rows.isEmpty()) {
          throw new IllegalStateException("hbase:meta has no rows yet");
        }
      } finally {
        client.scannerClose(id);
      }
      StringBuilder out = new StringBuilder();
      for (ByteBuffer n : names) {
        if (out.length() > 0) out.append(", ");
        out.append(StandardCharsets.UTF_8.decode(n.duplicate()));
      }
      return out.length() == 0 ? "(none)" : out.toString();
    } finally {
      transport.close();
    }
  }

  static ByteBuffer bytes(String s) {
    return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
  }
}
