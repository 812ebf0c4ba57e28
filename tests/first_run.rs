//! What a new user sees when something is wrong, on the real binary: every
//! error names what happened, the flag or setting involved, and what to do
//! next, in the command line's words. One test per class of mistake.

mod common;
mod process;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use common::ports::free_port;
use process::SolusProcess;

/// Runs `solus <args>` with `env`; returns (success, stdout, stderr).
async fn solus(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_solus"));
    cmd.args(args)
        .stdin(Stdio::null())
        .env_remove("SOLUS_ADDR")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("solus {args:?} did not finish within 60 s"))
        .expect("running solus");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// `solus serve` that must refuse to start: its stderr. The server gets
/// free ports and a fresh data directory unless `env` says otherwise.
async fn serve_refused(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (listen, data) = (format!("127.0.0.1:{}", free_port()), dir.path().join("data"));
    let mut all = vec![
        ("SOLUS__SERVER__LISTEN", listen.as_str()),
        ("SOLUS__METRICS__LISTEN", ""),
        ("SOLUS__STORAGE__EMBEDDED__PATH", data.to_str().unwrap()),
    ];
    all.retain(|(k, _)| !env.iter().any(|(e, _)| e == k));
    all.extend_from_slice(env);
    let (ok, _, stderr) = solus(&["serve"], &all).await;
    assert!(!ok, "serve started with {env:?}:\n{stderr}");
    assert!(stderr.contains("error: "), "{stderr}");
    stderr
}

fn assert_mentions(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{n:?} missing from:\n{text}");
    }
}

#[tokio::test]
async fn nothing_listening_suggests_solus_serve_and_the_address_flag() {
    let addr = format!("127.0.0.1:{}", free_port());
    let (ok, _, e) = solus(&["check", "--addr", &addr, "--client", "c", "--deduper", "d", "x"], &[]).await;
    assert!(!ok);
    assert_mentions(
        &e,
        &[&addr, "connection refused", "solus serve", "--addr", "SOLUS_ADDR"],
    );
    assert!(!e.contains("tcp connect error"), "{e}");
    // The same through the environment variable.
    let (_, _, e) = solus(&["deduper", "list", "--client", "c"], &[("SOLUS_ADDR", &addr)]).await;
    assert_mentions(&e, &[&addr, "solus serve"]);
}

#[tokio::test]
async fn bad_addresses_are_refused_before_connecting() {
    for (addr, says) in [("127.0.0.1:http", "port"), ("::1", "brackets"), ("ftp://h:1", "scheme")] {
        let (ok, _, e) = solus(&["deduper", "list", "--client", "c", "--addr", addr], &[]).await;
        assert!(!ok);
        assert_mentions(&e, &["--addr", says]);
    }
}

#[tokio::test]
async fn client_mistakes_are_named_in_flags() {
    // No sizing at all, -p alone, half of the explicit geometry, a bad id: refused before any connection.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let create = |extra: &[&str]| {
        let mut v = vec![
            "deduper",
            "create",
            "--addr",
            nowhere.as_str(),
            "--client",
            "c",
            "--name",
            "d",
        ];
        v.extend_from_slice(extra);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    for (extra, says) in [
        (&[][..], &["-n", "-p", "--hash-functions"][..]),
        (&["-p", "0.01"][..], &["-p needs -n"][..]),
        (
            &["--shards", "3"][..],
            &["--hash-functions", "--bits-per-shard", "missing"][..],
        ),
        (&["-n", "10", "--shards", "3"][..], &["not both"][..]),
        (&["-n", "10", "-p", "1.5"][..], &["-p must be", "between 0 and 1"][..]),
    ] {
        let args = create(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, _, e) = solus(&args, &[]).await;
        assert!(!ok, "{extra:?}");
        assert_mentions(&e, says);
        assert!(!e.contains("false_positive_rate") && !e.contains("connection"), "{e}");
    }
    let (_, _, e) = solus(
        &["add", "--addr", &nowhere, "--client", "a b", "--deduper", "d", "x"],
        &[],
    )
    .await;
    assert_mentions(&e, &["--client", "\"a b\""]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_answers_come_with_the_next_command() {
    let server = SolusProcess::start(&[]).await;
    let addr = format!("127.0.0.1:{}", server.port);
    let run = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--addr", addr.as_str()]);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let go = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        solus(&args, &[]).await
    };
    // -n alone: p defaults to 0.01.
    let (ok, out, e) = go(run(&[
        "deduper", "create", "--client", "shop", "--name", "orders", "-n", "1000",
    ]))
    .await;
    assert!(ok, "{e}");
    assert!(out.contains("\"false_positive_rate\":0.01"), "{out}");
    let (_, _, e) = go(run(&[
        "deduper", "create", "--client", "shop", "--name", "orders", "-n", "1000",
    ]))
    .await;
    assert_mentions(&e, &["ALREADY_EXISTS", "solus deduper get --client shop --name orders"]);
    let (_, _, e) = go(run(&["check", "--client", "shop", "--deduper", "nope", "x"])).await;
    assert_mentions(
        &e,
        &["NOT_FOUND", "solus deduper list --client shop", "solus deduper create"],
    );
    let (_, _, e) = go(run(&[
        "add",
        "--client",
        "shop",
        "--deduper",
        "orders",
        "--ttl-ms",
        "999999999999",
        "x",
    ]))
    .await;
    assert_mentions(&e, &["INVALID_ARGUMENT", "--ttl-ms"]);
    assert!(!e.contains("ttl_ms"), "{e}");
    // Deleting an active deduper: the two next commands, in the CLI's words.
    let (ok, _, e) = go(run(&["deduper", "delete", "--client", "shop", "--name", "orders"])).await;
    assert!(!ok);
    assert_mentions(
        &e,
        &[
            "FAILED_PRECONDITION",
            "is active",
            "solus deduper update --client shop --name orders --active false",
            "solus deduper delete --client shop --name orders --force",
        ],
    );
    assert!(!e.contains("UpdateDeduper") && !e.contains("force = true"), "{e}");
    let (ok, _, e) = go(run(&[
        "deduper", "update", "--client", "shop", "--name", "orders", "--active", "false",
    ]))
    .await;
    assert!(ok, "{e}");
    let (_, _, e) = go(run(&["add", "--client", "shop", "--deduper", "orders", "x"])).await;
    assert_mentions(
        &e,
        &[
            "inactive",
            "solus deduper update --client shop --name orders --active true",
        ],
    );
    assert!(!e.contains("UpdateDeduper"), "{e}");
    let (_, _, e) = go(run(&["deduper", "update", "--client", "shop", "--name", "orders"])).await;
    assert_mentions(&e, &["nothing to change", "--active"]);
    // Stats before the first pass: no claim about the server's interval.
    let (ok, _, e) = go(run(&["deduper", "stats", "--client", "shop", "--name", "orders"])).await;
    if !ok {
        assert_mentions(&e, &["no figures", "stats.refresh_interval_ms"]);
        assert!(!e.contains("default 60 s"), "{e}");
    }
    // Deleting an inactive one says so, and prints the config it had.
    let (ok, out, e) = go(run(&["deduper", "delete", "--client", "shop", "--name", "orders"])).await;
    assert!(ok, "{e}");
    assert_mentions(&e, &["deleted deduper \"orders\" of client \"shop\""]);
    assert!(out.contains("\"name\":\"orders\""), "{out}");

    // The metrics port speaks HTTP/1, not gRPC.
    let metrics = format!("127.0.0.1:{}", server.metrics_port.unwrap());
    let (ok, _, e) = solus(
        &["check", "--addr", &metrics, "--client", "c", "--deduper", "d", "x"],
        &[],
    )
    .await;
    assert!(!ok);
    assert_mentions(
        &e,
        &[
            &metrics,
            "is not a Solus gRPC server",
            "metrics.listen",
            "server.listen",
        ],
    );
    // TLS asked of a plaintext server.
    let ca = tempfile::NamedTempFile::new().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(ca.path(), cert.cert.pem()).unwrap();
    let (ok, _, e) = solus(
        &[
            "deduper",
            "list",
            "--client",
            "c",
            "--addr",
            &addr,
            "--ca-cert",
            ca.path().to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(!ok);
    assert_mentions(&e, &["does not speak TLS", "--ca-cert"]);

    // Replay's summary of the deduper has no Debug formatting.
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "a\nb\nc\n").unwrap();
    let (ok, _, e) = solus(
        &[
            "replay",
            "--addr",
            &addr,
            "--events",
            "10",
            "--input",
            keys.path().to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(ok, "{e}");
    assert_mentions(&e, &["sized for n=1000000 p=0.01"]);
    assert!(!e.contains("Some("), "{e}");

    // The server's own log: no colour into a pipe, no Debug of the authenticator or health status.
    let log = server.stderr();
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log that is not a terminal:\n{log}"
    );
    assert_mentions(&log, &["auth=off", "status=\"SERVING\""]);
    assert!(!log.contains("Authenticator("), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_in_use_names_the_setting() {
    let first = SolusProcess::start(&[]).await;
    let data = first.data_dir();
    let e = serve_refused(&[("SOLUS__STORAGE__EMBEDDED__PATH", data.to_str().unwrap())]).await;
    assert_mentions(
        &e,
        &[
            "storage.embedded.path",
            "in use by another process",
            "SOLUS__STORAGE__EMBEDDED__PATH",
        ],
    );
    assert!(!e.contains("FjallError"), "{e}");
}

#[tokio::test]
async fn an_unwritable_data_directory_names_the_setting() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let below_a_file = file.path().join("data");
    let e = serve_refused(&[("SOLUS__STORAGE__EMBEDDED__PATH", below_a_file.to_str().unwrap())]).await;
    assert_mentions(
        &e,
        &[
            "storage.embedded.path",
            "cannot create",
            "SOLUS__STORAGE__EMBEDDED__PATH",
        ],
    );
    assert!(!e.contains("Os {"), "{e}");
}

#[tokio::test]
async fn taken_ports_name_their_setting() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = serve_refused(&[("SOLUS__SERVER__LISTEN", &addr)]).await;
    assert_mentions(&e, &[&addr, "server.listen", "already in use", "SOLUS__SERVER__LISTEN"]);
    let e = serve_refused(&[("SOLUS__METRICS__LISTEN", &addr)]).await;
    assert_mentions(
        &e,
        &[
            &addr,
            "metrics.listen",
            "already in use",
            "metrics.listen = \"\"",
            "SOLUS__METRICS__LISTEN=",
        ],
    );
    let e = serve_refused(&[("SOLUS__SERVER__HEALTH_LISTEN", &addr)]).await;
    assert_mentions(&e, &["server.health_listen", "already in use"]);
    // Both default ports taken: both are named at once (one restart, not two).
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_addr = other.local_addr().unwrap().to_string();
    let e = serve_refused(&[
        ("SOLUS__SERVER__LISTEN", &addr),
        ("SOLUS__METRICS__LISTEN", &other_addr),
    ])
    .await;
    assert_mentions(
        &e,
        &[
            "server.listen",
            "SOLUS__SERVER__LISTEN=",
            &other_addr,
            "SOLUS__METRICS__LISTEN=",
        ],
    );
}

#[tokio::test]
async fn settings_mistakes_name_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("solus.toml");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "[storage]\nbackend = \"hbse\"\n").unwrap();
    let (ok, _, e) = solus(&["serve", "--config", path], &[]).await;
    assert!(!ok);
    assert_mentions(&e, &["storage.backend", "\"hbse\"", "\"embedded\" or \"hbase\"", path]);
    std::fs::write(&file, "[metrics]\nlisten_on = \"x\"\n").unwrap();
    let (ok, _, e) = solus(&["serve", "--config", path], &[]).await;
    assert!(!ok);
    assert_mentions(&e, &["unknown setting metrics.listen_on", path, "listen"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_underscore_variables_are_warned_about() {
    let server = SolusProcess::start(&[("SOLUS_SERVER_LISTEN", "0.0.0.0:1".into())]).await;
    assert_mentions(
        &server.stderr(),
        &["SOLUS_SERVER_LISTEN is ignored", "SOLUS__SERVER__LISTEN"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_transport_mismatch_points_at_the_transport_setting() {
    let emulator = hbase_emulator::Emulator::builder()
        .transport(hbase_emulator::Transport::Framed)
        .start("127.0.0.1:0")
        .unwrap();
    let server = SolusProcess::start(&[
        ("SOLUS__STORAGE__BACKEND", "hbase".into()),
        ("SOLUS__STORAGE__HBASE__ADDRESSES", emulator.addr().to_string()),
        ("SOLUS__STORAGE__HBASE__TRANSPORT", "buffered".into()),
    ])
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server.stderr().contains("storage.hbase.transport") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_mentions(&server.stderr(), &["storage.hbase.transport (buffered)", "--framed"]);
}

/// `solus health | head -1` panicked: "failed printing to stdout: Broken
/// pipe". A reader that leaves early ends a command quietly with success.
#[tokio::test]
async fn a_reader_that_leaves_early_ends_the_command_quietly() {
    let server = SolusProcess::start(&[]).await;
    let addr = format!("127.0.0.1:{}", server.port);
    // The way it was found, through a shell pipe (head exits after one line).
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{:?} health --addr {addr} | head -1",
            env!("CARGO_BIN_EXE_solus")
        ))
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("\"\""));
    // Deterministically: the pipe's reader is gone before the first line,
    // for a one-shot command and for one that streams a line per entity.
    let mut entities = vec!["check", "--addr", addr.as_str(), "--client", "c", "--deduper", "d"];
    let create = [
        "deduper", "create", "--addr", &addr, "--client", "c", "--name", "d", "-n", "1000",
    ];
    assert!(solus(&create, &[]).await.0);
    let many: Vec<String> = (0..5000).map(|i| format!("e{i}")).collect();
    entities.extend(many.iter().map(String::as_str));
    for args in [vec!["health", "--addr", addr.as_str()], entities] {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_solus"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("solus finished")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "solus {}: {:?}\n{stderr}", args[0], out.status);
        assert!(stderr.is_empty(), "solus {}: {stderr}", args[0]);
    }
}

/// `solus bench` (on a one-thread runtime, beside the server it measures)
/// drives a real server to exactly the count asked, with no failed request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_drives_a_server_to_the_count_asked() {
    let server = SolusProcess::start(&[]).await;
    let addr = format!("127.0.0.1:{}", server.port);
    // `solus bench` against the server, batches of 100, 4 in flight; `stop`
    // is `--requests N` or `--duration S`. Its JSON report.
    let bench = |op: &'static str, stop: [&'static str; 2]| {
        let addr = addr.clone();
        async move {
            let args = [
                "bench",
                "--addr",
                &addr,
                "--client",
                "b",
                "--deduper",
                "d",
                "--expected-insertions",
                "100000",
                "--op",
                op,
                "--batch",
                "100",
                "--concurrency",
                "4",
                stop[0],
                stop[1],
                "--key-space",
                "1000000",
                "--json",
                "--quiet",
            ];
            let (ok, out, e) = solus(&args, &[]).await;
            assert!(ok, "{op}: {e}");
            let report: serde_json::Value =
                serde_json::from_str(&out).unwrap_or_else(|err| panic!("{op}: {err}: {out}"));
            assert_eq!(report["errors"], serde_json::json!({}), "{op}: {out}");
            report
        }
    };
    for op in ["add-if-absent", "check", "add"] {
        let report = bench(op, ["--requests", "40"]).await;
        assert_eq!(report["requests"], 40, "{op}: {report}");
        assert_eq!(report["entities"], 4000, "{op}: {report}");
        assert!(report["entities_per_second"].as_f64().unwrap() > 0.0, "{op}: {report}");
    }
    // Timed, as bench/outsider.sh runs it: whole batches, stopped at the deadline.
    let report = bench("check", ["--duration", "1"]).await;
    let (requests, entities) = (
        report["requests"].as_u64().unwrap(),
        report["entities"].as_u64().unwrap(),
    );
    assert!(requests > 0 && entities == requests * 100, "{report}");
    let seconds = report["seconds"].as_f64().unwrap();
    assert!((0.9..5.0).contains(&seconds), "a 1 s run took {seconds} s: {report}");
}
