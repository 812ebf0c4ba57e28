//! Per-cell TTL on real HBase: a cell Solus writes has timestamp = expiry
//! time and the `_ttl` attribute = `expiry_seconds` in ms, so HBase drops it
//! at expiry + expiry_seconds: gone from gets and scans then, and from a raw
//! scan after a flush and a major compaction.

use std::time::{Duration, Instant};

use solus::contract::layout;

use crate::common::*;
use crate::hbase_shared::{add_req, all_row_keys, row};

/// Runs HBase shell commands (JRuby) against the real HBase; returns the output.
fn shell(real: &RealHbase, commands: &str) -> String {
    let file = tempfile::Builder::new().suffix(".hbase").tempfile().unwrap();
    std::fs::write(file.path(), format!("{commands}\nexit\n")).unwrap();
    real.script("shell", &["-n", file.path().to_str().unwrap()], &[])
}

/// Rows a raw scan (`RAW => true`, all versions) of the table returns, the
/// clock probe rows left out.
fn raw_scan_rows(real: &RealHbase, table: &str) -> usize {
    let out = shell(real, &format!("scan '{table}', {{RAW => true, VERSIONS => 10}}"));
    assert!(
        out.lines().any(|l| l.trim_end().ends_with("row(s)")),
        "no row count in the shell's output: {out}"
    );
    // One line per cell, the row key first (binary bytes as \xNN); the
    // replicas' clock probe rows are not data.
    let rows: std::collections::BTreeSet<&str> = out
        .lines()
        .filter(|l| l.contains(" column="))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|row| !row.starts_with("\\x00clock-probe|"))
        .collect();
    rows.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_leave_hbase_after_expiry_plus_cell_ttl_also_through_major_compaction() {
    let Some(b) = TestBackend::real_hbase() else { return };
    let (real, _) = b.real.clone().unwrap();
    let s = TestServer::start(&b).await;
    const EXPIRY_S: u64 = 40;
    s.admin()
        .create_deduper(create_geom("c", "d", 1, 1, 10, EXPIRY_S))
        .await
        .unwrap();
    let start = Instant::now();
    s.data().add(add_req("c", "d", b"x".to_vec(), 1_000)).await.unwrap();

    let mut raw = b.raw_thrift();
    let key = layout::data_row_key(0, "c", "d");
    let cells = row(&mut raw, "solus_deduper", &key);
    assert_eq!(cells.len(), 1, "{cells:?}");
    let cell = cells.values().next().unwrap();
    let expire = i64::from_be_bytes(cell.value.as_deref().unwrap().try_into().unwrap());
    assert_eq!(cell.timestamp, Some(expire), "timestamp = expiry time");

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(absent(&s, "c", "d", &["x"]).await, [true], "absent after its TTL");
    assert_eq!(
        row(&mut raw, "solus_deduper", &key).len(),
        1,
        "HBase keeps it until expiry + expiry_seconds"
    );

    // Into an HFile while the cell is still alive for HBase (expiry + 40 s;
    // each shell run starts a JVM: about 8 s here, much more under load).
    shell(real, "flush 'solus_deduper'");
    let rows = raw_scan_rows(real, "solus_deduper");
    if start.elapsed() < Duration::from_secs(EXPIRY_S - 5) {
        assert_eq!(rows, 1, "flushed cell in a raw scan");
    } else {
        eprintln!(
            "the shell took {:.0?}: the flushed cell may have expired; its raw scan is not checked",
            start.elapsed()
        );
    }

    let gone_at = Duration::from_secs(EXPIRY_S + 2);
    tokio::time::sleep(gone_at.saturating_sub(start.elapsed())).await;
    assert!(
        row(&mut raw, "solus_deduper", &key).is_empty(),
        "get after expiry + TTL"
    );
    assert!(
        all_row_keys(&mut raw, "solus_deduper").is_empty(),
        "scan after expiry + TTL"
    );

    let compacted = shell(
        real,
        "conn = org.apache.hadoop.hbase.client.ConnectionFactory.createConnection(org.apache.hadoop.hbase.HBaseConfiguration.create)\n\
         adm = conn.getAdmin\n\
         t = org.apache.hadoop.hbase.TableName.valueOf('solus_deduper')\n\
         adm.majorCompact(t)\n\
         sleep 2\n\
         sleep 0.5 while adm.getCompactionState(t).toString != 'NONE'\n\
         puts 'compaction done'\n\
         conn.close",
    );
    assert!(compacted.contains("compaction done"), "{compacted}");
    assert_eq!(
        raw_scan_rows(real, "solus_deduper"),
        0,
        "raw scan after the major compaction"
    );
}
