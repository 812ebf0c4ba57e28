//! HBase's error messages, shortened. HBase's Thrift server answers an
//! `IOError` whose message is the Java exception's whole stack trace: an
//! `AccessDeniedException` for a principal granted nothing is ~10 KB (60
//! `\tat ...` frames and a `Caused by` chain). Copied whole into a log line
//! and a gRPC status, that made ~22 KB of reply headers, beyond what gRPC
//! clients accept (docs/hbase.md, "Kerberos"). Solus keeps the exception
//! and its message only.

/// The longest summary, in bytes (before the "..." marking a cut).
pub const MAX_SUMMARY_BYTES: usize = 512;

/// A Java error text in one line of at most [`MAX_SUMMARY_BYTES`] (+ "...")
/// bytes: the lines before the first stack frame (the exception class and
/// its message), then the first `Caused by: ...` line unless its message is
/// already in them, joined with " | "; stack frames (`at ...`,
/// `... N more`), blank lines and deeper causes are dropped. A text without
/// frames is kept as it is, up to the bound.
pub fn summary(message: &str) -> String {
    let is_frame = |l: &str| {
        let t = l.trim_start();
        t.starts_with("at ") || (t.starts_with("... ") && t.ends_with(" more"))
    };
    let mut head: Vec<&str> = Vec::new();
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    for line in lines.by_ref() {
        if is_frame(line) || line.starts_with("Caused by:") {
            if line.starts_with("Caused by:") {
                push_cause(&mut head, line);
            }
            break;
        }
        head.push(line);
    }
    // A first cause after the top exception's frames.
    if !head.iter().any(|l| l.starts_with("Caused by:"))
        && let Some(cause) = lines.find(|l| l.starts_with("Caused by:"))
    {
        push_cause(&mut head, cause);
    }
    crate::text::truncate(&head.join(" | "), MAX_SUMMARY_BYTES)
}

/// Adds a `Caused by: X: message` line unless `message` is already said.
fn push_cause<'a>(head: &mut Vec<&'a str>, cause: &'a str) {
    let said = cause
        .split_once(": ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .is_some_and(|(_, message)| head.iter().any(|l| l.contains(message)));
    if !said {
        head.push(cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DENIED: &str = "org.apache.hadoop.hbase.security.AccessDeniedException: Insufficient permissions for user \
                          'stranger' (table=shop_dedupers, action=READ)";

    /// The shape of HBase 2.6.1's answer to a principal granted nothing.
    fn trace() -> String {
        let frames: String = (0..60)
            .map(|i| format!("\tat org.apache.hadoop.hbase.ipc.RpcHandler.run(RpcHandler.java:{i})\n"))
            .collect();
        format!(
            "org.apache.hadoop.hbase.security.AccessDeniedException: {DENIED}\n{frames}\nCaused by: \
             org.apache.hadoop.hbase.ipc.RemoteWithExtrasException(org.apache.hadoop.hbase.security.\
             AccessDeniedException): {DENIED}\n{frames}\t... 1 more\n"
        )
    }

    #[test]
    fn a_stack_trace_becomes_its_first_line() {
        let s = summary(&trace());
        assert_eq!(
            s,
            format!("org.apache.hadoop.hbase.security.AccessDeniedException: {DENIED}")
        );
    }

    #[test]
    fn a_new_cause_is_kept_and_deeper_ones_dropped() {
        let m = "java.io.IOException: put failed\n\tat a.b(C.java:1)\nCaused by: \
                 org.apache.hadoop.hbase.NotServingRegionException: region r is not online\n\tat d.e(F.java:2)\n\
                 Caused by: java.lang.IllegalStateException: deeper\n";
        assert_eq!(
            summary(m),
            "java.io.IOException: put failed | Caused by: org.apache.hadoop.hbase.NotServingRegionException: \
             region r is not online"
        );
    }

    #[test]
    fn plain_messages_are_kept_and_long_ones_cut_at_a_char_boundary() {
        let plain = "org.apache.hadoop.hbase.TableNotFoundException: solus_deduper";
        assert_eq!(summary(plain), plain);
        assert_eq!(summary("two\nlines"), "two | lines");
        let long = "é".repeat(400); // 800 bytes
        let s = summary(&long);
        assert!(s.ends_with("...") && s.len() <= MAX_SUMMARY_BYTES + 3, "{}", s.len());
        assert_eq!(s.trim_end_matches("...").chars().count(), MAX_SUMMARY_BYTES / 2);
        assert_eq!(crate::text::truncate("abc", 3), "abc");
        assert_eq!(crate::text::truncate("abcd", 3), "abc...");
    }
}
