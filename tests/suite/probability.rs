//! Statistical behaviour on real key sets: false-positive rate at design
//! load, and a replay of a skewed real event stream with an exact set beside it.

use std::io::BufRead;

use solus::api::pb;

use crate::common::*;

/// The first `count` real package names, `None` (test skipped) without `../shared/data`.
fn pypi_names(test: &str, count: usize) -> Option<Vec<String>> {
    let path = shared_data(test, "pypi-names.txt")?;
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    Some(
        std::io::BufReader::new(file)
            .lines()
            .take(count)
            .map(|l| l.unwrap())
            .collect(),
    )
}

/// Insert `n` real names, query 200,000 disjoint ones: the observed rate
/// must sit near `p`. Hashing is deterministic and the key sets fixed, so the
/// result is reproducible; the band is wide (about +/-10 binomial standard
/// deviations) but a broken hash (correlated bits, bad shard spread) falls out.
pub async fn false_positive_rate_at_design_load(b: &TestBackend) {
    let (n, p) = (50_000usize, 0.01);
    let test = format!("false_positive_rate_at_design_load ({})", b.name);
    let Some(names) = pypi_names(&test, n + 200_000) else {
        return;
    };
    let mut settings = b.settings.clone();
    settings.limits.max_bits_per_shard = 65_536; // force several shards
    let s = TestServer::start_with(settings).await;
    let d = s
        .admin()
        .create_deduper(create_np("c", "fp", n as u64, p, 3600))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((d.shards, d.hash_functions, d.bits_per_shard), (8, 7, 60_024));
    let (inserted, queried) = names.split_at(n);
    let mut data = s.data();
    for chunk in inserted.chunks(5000) {
        let req = pb::AddRequest {
            request_id: None,
            client_id: "c".into(),
            deduper: "fp".into(),
            entities: ents(chunk),
            ttl_ms: 0,
        };
        data.add(req).await.unwrap();
    }
    let false_positives = absent_all(&mut data, "c", "fp", queried)
        .await
        .iter()
        .filter(|a| !**a)
        .count();
    let rate = false_positives as f64 / queried.len() as f64;
    assert!(
        (0.0075..0.0125).contains(&rate),
        "observed false-positive rate {rate} for p = {p}"
    );
    // And no false negatives among the inserted ones.
    assert!(absent_all(&mut data, "c", "fp", inserted).await.iter().all(|a| !a));
}

/// `solus replay` of 100,000 npm download-weighted events: 0 false negatives,
/// false-positive rate within 1.5 x p.
pub async fn replay_npm_events(b: &TestBackend) {
    let Some(events) = shared_data(&format!("replay_npm_events ({})", b.name), "npm-downloads.tsv") else {
        return;
    };
    let s = TestServer::start(b).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_solus"))
        .args([
            "replay",
            "--addr",
            &s.addr.to_string(),
            "--events",
            "100000",
            "--seed",
            "7",
            "--json",
        ])
        .args(["--expected-insertions", "30000", "--false-positive-rate", "0.01"])
        .arg("--input")
        .arg(events)
        .output()
        .await
        .expect("running solus replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "replay failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("replay --json output");
    assert_eq!(summary["events"], 100_000);
    assert_eq!(summary["false_negatives"], 0, "{summary}");
    let distinct = summary["distinct"].as_u64().unwrap();
    assert!(
        distinct > 10_000 && distinct < 100_000,
        "a skewed stream has many duplicates: {summary}"
    );
    let rate = summary["false_positive_rate"].as_f64().unwrap();
    assert!(rate <= 0.015, "false-positive rate {rate} above 1.5 x p: {summary}");
    assert!(stderr.contains("events/s"), "progress is shown: {stderr}");
}
