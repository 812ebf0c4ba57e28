// Kerberized HBase helper for deploy/hbase/standalone.sh (Java's single-file
// source launcher on the classpath Maven resolved; conf/ with core-site.xml
// and hbase-site.xml first on it; -Djava.security.krb5.conf set).
//
//   java ... KerberosProbe.java ready HOST PORT QOP TIMEOUT_SECONDS PRINCIPAL KEYTAB
//       As WaitReady.java, through a SASL/GSSAPI Thrift1 connection (buffered,
//       binary) as PRINCIPAL requiring QOP (authentication|integrity|privacy):
//       getTableNames answers and a scan of hbase:meta returns a row.
//   java ... KerberosProbe.java grant TIMEOUT_SECONDS PRINCIPAL KEYTAB USER:ACTIONS[:SCOPE]...
//       As PRINCIPAL (an HBase superuser), grants each USER the ACTIONS (letters
//       of RWXCA) globally, or on SCOPE ("@namespace" or a table), through
//       HBase's RPC (AccessControlClient), retrying until the AccessController
//       is up (hbase:acl exists) or the timeout.
// Exits 0 on success, 1 with the last error after the timeout.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.security.sasl.Sasl;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.security.access.AccessControlClient;
import org.apache.hadoop.hbase.security.access.Permission;
import org.apache.hadoop.hbase.thrift.generated.Hbase;
import org.apache.hadoop.hbase.thrift.generated.TRowResult;
import org.apache.hadoop.hbase.thrift.generated.TScan;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSaslClientTransport;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransportException;

public class KerberosProbe {
  public static void main(String[] args) throws Exception {
    if (args.length == 7 && args[0].equals("ready")) {
      String host = args[1];
      int port = Integer.parseInt(args[2]);
      String qop = saslQop(args[3]);
      UserGroupInformation ugi = login(args[5], args[6]);
      retry(Long.parseLong(args[4]), () -> {
        String tables = ugi.doAs((PrivilegedExceptionAction<String>) () -> probe(host, port, qop));
        System.out.println("HBase ready: Kerberized Thrift1 on " + host + ":" + port + " (buffered, binary, qop "
            + args[3] + ", as " + args[5] + "), hbase:meta online, tables: " + tables);
        return null;
      });
    } else if (args.length >= 5 && args[0].equals("grant")) {
      UserGroupInformation ugi = login(args[2], args[3]);
      Configuration conf = HBaseConfiguration.create();
      List<String[]> grants = new ArrayList<>();
      for (int i = 4; i < args.length; i++) {
        String[] g = args[i].split(":", 3);
        if (g.length < 2) throw new IllegalArgumentException("a grant is USER:ACTIONS[:SCOPE], got " + args[i]);
        actions(g[1]); // checked before connecting
        grants.add(g);
      }
      retry(Long.parseLong(args[1]), () -> ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
        try (Connection c = ConnectionFactory.createConnection(conf)) {
          for (String[] g : grants) {
            String scope = g.length == 3 ? g[2] : "";
            grant(c, g[0], actions(g[1]), scope);
            System.out.println("granted " + g[0] + " '" + g[1] + "' " + (scope.isEmpty() ? "globally" : "on " + scope));
          }
        }
        return null;
      }));
    } else {
      System.err.println("usage: KerberosProbe ready HOST PORT QOP TIMEOUT_SECONDS PRINCIPAL KEYTAB\n"
          + "       KerberosProbe grant TIMEOUT_SECONDS PRINCIPAL KEYTAB USER:ACTIONS[:SCOPE]...");
      System.exit(2);
    }
  }

  // AccessControlClient declares Throwable.
  static void grant(Connection c, String user, Permission.Action[] actions, String scope) throws Exception {
    try {
      if (scope.isEmpty()) {
        AccessControlClient.grant(c, user, actions);
      } else if (scope.startsWith("@")) {
        AccessControlClient.grant(c, scope.substring(1), user, actions);
      } else {
        AccessControlClient.grant(c, TableName.valueOf(scope), user, null, null, actions);
      }
    } catch (Exception e) {
      throw e;
    } catch (Throwable t) {
      throw new Exception(t);
    }
  }

  static class Refused extends RuntimeException {
    Refused(String message) { super(message); }
  }

  interface Attempt { Object run() throws Exception; }

  static void retry(long timeoutSeconds, Attempt attempt) throws Exception {
    long deadline = System.currentTimeMillis() + timeoutSeconds * 1000L;
    String last = "no attempt made";
    while (System.currentTimeMillis() < deadline) {
      try {
        attempt.run();
        return;
      } catch (Throwable e) {
        last = e.toString();
        // A server that negotiates but refuses (no common qop, unknown principal)
        // will not change its mind: fail now, not at the timeout.
        for (Throwable c = e; c != null; c = c.getCause()) {
          if (c instanceof Refused) {
            System.err.println(c.getMessage());
            System.exit(1);
          }
        }
      }
      Thread.sleep(1000);
    }
    System.err.println("not done after " + timeoutSeconds + " s: " + last);
    System.exit(1);
  }

  static UserGroupInformation login(String principal, String keytab) throws Exception {
    UserGroupInformation.setConfiguration(HBaseConfiguration.create());
    return UserGroupInformation.loginUserFromKeytabAndReturnUGI(principal, keytab);
  }

  // HBase's names (SaslUtil.QualityOfProtection) to the SASL property's.
  static String saslQop(String qop) {
    switch (qop) {
      case "authentication": return "auth";
      case "integrity": return "auth-int";
      case "privacy": return "auth-conf";
      default: throw new IllegalArgumentException("QOP must be authentication, integrity or privacy, got " + qop);
    }
  }

  static Permission.Action[] actions(String letters) {
    List<Permission.Action> out = new ArrayList<>();
    for (char ch : letters.toCharArray()) {
      out.add(switch (ch) {
        case 'R' -> Permission.Action.READ;
        case 'W' -> Permission.Action.WRITE;
        case 'X' -> Permission.Action.EXEC;
        case 'C' -> Permission.Action.CREATE;
        case 'A' -> Permission.Action.ADMIN;
        default -> throw new IllegalArgumentException("ACTIONS are letters of RWXCA, got " + letters);
      });
    }
    return out.toArray(new Permission.Action[0]);
  }

  static String probe(String host, int port, String qop) throws Exception {
    TSocket socket = new TSocket(host, port);
    socket.setTimeout(10_000);
    Map<String, String> props = new HashMap<>();
    props.put(Sasl.QOP, qop);
    props.put(Sasl.SERVER_AUTH, "true");
    // The Thrift server's principal (service/host@REALM) from hbase-site.xml.
    String[] principal = HBaseConfiguration.create().get("hbase.thrift.kerberos.principal").split("[/@]");
    TSaslClientTransport transport =
        new TSaslClientTransport("GSSAPI", null, principal[0], principal[1], props, null, socket);
    socket.open(); // not listening yet: retried
    try {
      transport.open();
    } catch (TTransportException e) {
      // Listening, so set up: a failed negotiation is a refusal (a read timeout is not).
      for (Throwable c = e; c != null; c = c.getCause()) {
        if (c instanceof java.net.SocketTimeoutException) throw e;
      }
      socket.close();
      throw new Refused("SASL negotiation with " + host + ":" + port + " as " + principal[0] + "/" + principal[1]
          + " failed: " + e.getMessage());
    }
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
