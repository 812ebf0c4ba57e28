//! Security: bearer tokens (each case answers exactly its status), client
//! isolation in answers and messages, TLS with a self-signed CA, mutual TLS,
//! tokens re-read on SIGHUP, and the plaintext warning.

mod common;
mod process;

use std::path::Path;
use std::time::Duration;

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use solus::config::Settings;
use tokio::sync::oneshot;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use common::{TestBackend, TestServer, create_geom, ents};
use process::SolusProcess;

const TOKEN_A: &str = "client-a-token-5f0d9c1e7b";
const TOKEN_B: &str = "client-b-token-94ab22e0c3";
const TOKEN_ADMIN: &str = "admin-token-0c8e44d1a9f2";

fn request<T>(message: T, authorization: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(value) = authorization {
        r.metadata_mut().insert("authorization", value.parse().unwrap());
    }
    r
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Calls `rpc` on `client`/`deduper` with a valid message and the given
/// `authorization` value; the status code and message (`OK`, "" on success).
async fn call(ch: &Channel, rpc: &str, client: &str, deduper: &str, auth: Option<&str>) -> (Code, String) {
    let mut data = DeduperServiceClient::new(ch.clone());
    let mut admin = DeduperAdminServiceClient::new(ch.clone());
    let (c, d) = (client.to_string(), deduper.to_string());
    let result = match rpc {
        "Add" => data
            .add(request(
                pb::AddRequest {
                    request_id: None,
                    client_id: c,
                    deduper: d,
                    entities: ents(&["e1", "e2"]),
                    ttl_ms: 0,
                },
                auth,
            ))
            .await
            .map(drop),
        "CheckAbsence" => data
            .check_absence(request(
                pb::CheckAbsenceRequest {
                    record_ids: Vec::new(),
                    client_id: c,
                    deduper: d,
                    entities: ents(&["e1"]),
                },
                auth,
            ))
            .await
            .map(drop),
        "AddIfAbsent" => data
            .add_if_absent(request(
                pb::AddIfAbsentRequest {
                    record_ids: Vec::new(),
                    request_id: None,
                    client_id: c,
                    deduper: d,
                    entities: ents(&["e3"]),
                    ttl_ms: 0,
                },
                auth,
            ))
            .await
            .map(drop),
        "CreateDeduper" => admin
            .create_deduper(request(create_geom(client, deduper, 3, 2, 1000, 60), auth))
            .await
            .map(drop),
        "GetDeduper" => admin
            .get_deduper(request(pb::GetDeduperRequest { client_id: c, name: d }, auth))
            .await
            .map(drop),
        "ListDedupers" => admin
            .list_dedupers(request(
                pb::ListDedupersRequest {
                    client_id: c,
                    active_only: false,
                },
                auth,
            ))
            .await
            .map(drop),
        "UpdateDeduper" => admin
            .update_deduper(request(
                pb::UpdateDeduperRequest {
                    client_id: c,
                    name: d,
                    active: Some(true),
                    expiry_seconds: None,
                    expected_insertions: None,
                    false_positive_rate: None,
                },
                auth,
            ))
            .await
            .map(drop),
        other => panic!("unknown rpc {other}"),
    };
    match result {
        Ok(()) => (Code::Ok, String::new()),
        Err(s) => (s.code(), s.message().to_string()),
    }
}

const DATA_RPCS: [&str; 3] = ["Add", "CheckAbsence", "AddIfAbsent"];
const ADMIN_RPCS: [&str; 3] = ["GetDeduper", "ListDedupers", "UpdateDeduper"];

async fn names(ch: &Channel, client: &str, auth: &str) -> Vec<String> {
    DeduperAdminServiceClient::new(ch.clone())
        .list_dedupers(request(
            pb::ListDedupersRequest {
                client_id: client.into(),
                active_only: false,
            },
            Some(auth),
        ))
        .await
        .expect("ListDedupers")
        .into_inner()
        .dedupers
        .into_iter()
        .map(|d| d.name)
        .collect()
}

fn write_tokens(path: &Path, lines: &[(&str, &str)]) {
    let mut text = String::from("# test tokens\n\n");
    for (token, client) in lines {
        text.push_str(&format!("{token} {client}\n"));
    }
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_auth_case_answers_exactly_its_status() {
    let backend = TestBackend::embedded();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    write_tokens(
        &tokens,
        &[(TOKEN_A, "client-a"), (TOKEN_B, "client-b"), (TOKEN_ADMIN, "*")],
    );
    let mut settings = backend.settings.clone();
    settings.auth.enabled = true;
    settings.auth.tokens_file = Some(tokens);
    let s = TestServer::start_with(settings).await;
    let ch = s.channel.clone();
    let (a, b, admin) = (bearer(TOKEN_A), bearer(TOKEN_B), bearer(TOKEN_ADMIN));

    // The admin token creates for anyone; a client token for itself.
    assert_eq!(
        call(&ch, "CreateDeduper", "client-b", "secret-orders", Some(&admin))
            .await
            .0,
        Code::Ok
    );
    assert_eq!(
        call(&ch, "CreateDeduper", "client-a", "orders", Some(&a)).await.0,
        Code::Ok
    );

    // No token, a malformed header, an unknown token: UNAUTHENTICATED, for every RPC.
    let unknown = bearer("no-such-token-000000000000");
    let basic = format!("Basic {TOKEN_A}");
    for rpc in DATA_RPCS.iter().chain(&ADMIN_RPCS).chain(&["CreateDeduper"]) {
        for (what, auth) in [
            ("no token", None),
            ("malformed", Some(basic.as_str())),
            ("unknown", Some(&unknown)),
        ] {
            let (code, message) = call(&ch, rpc, "client-a", "orders", auth).await;
            assert_eq!(code, Code::Unauthenticated, "{rpc} with {what}: {message}");
            assert!(!message.contains(TOKEN_A), "{message}");
        }
    }

    // Own client: allowed, data and admin.
    for rpc in DATA_RPCS.iter().chain(&ADMIN_RPCS) {
        let (code, message) = call(&ch, rpc, "client-a", "orders", Some(&a)).await;
        assert_eq!(code, Code::Ok, "{rpc} on its own client: {message}");
    }

    // Another client's dedupers, existing or not: PERMISSION_DENIED, and no
    // message hints at that client's deduper names.
    for rpc in DATA_RPCS.iter().chain(&ADMIN_RPCS).chain(&["CreateDeduper"]) {
        for deduper in ["secret-orders", "not-there"] {
            let (code, message) = call(&ch, rpc, "client-b", deduper, Some(&a)).await;
            assert_eq!(code, Code::PermissionDenied, "{rpc} on client-b/{deduper}: {message}");
            assert!(!message.contains("secret-orders"), "{rpc}: {message}");
        }
    }
    assert_eq!(
        names(&ch, "client-b", &admin).await,
        ["secret-orders"],
        "nothing was created"
    );

    // The admin token reaches every client, data and admin.
    for rpc in DATA_RPCS.iter().chain(&ADMIN_RPCS) {
        assert_eq!(
            call(&ch, rpc, "client-b", "secret-orders", Some(&admin)).await.0,
            Code::Ok,
            "{rpc}"
        );
    }
    // Listing shows only the caller's own dedupers.
    assert_eq!(names(&ch, "client-a", &a).await, ["orders"]);
    assert_eq!(names(&ch, "client-b", &b).await, ["secret-orders"]);
    // Health stays open to probes without a token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    let probe = tonic_health::pb::HealthCheckRequest { service: String::new() };
    assert!(health.check(probe).await.is_ok());
    s.stop().await;
}

#[tokio::test]
async fn a_bad_tokens_file_stops_the_start() {
    let backend = TestBackend::embedded();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN_A}\n")).unwrap();
    let mut settings = backend.settings.clone();
    settings.auth.enabled = true;
    settings.auth.tokens_file = Some(tokens);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = solus::server::serve(settings, listener, async {})
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 1") && !e.contains(TOKEN_A), "{e}");
}

/// Certificates made by a throwaway CA, in PEM.
struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn make_pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "Solus test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("stream-processor");
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

/// A server on 127.0.0.1 with `settings`, without a client channel (TLS
/// clients are built by each test).
struct RawServer {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RawServer {
    async fn start(settings: Settings) -> RawServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = oneshot::channel();
        let join = tokio::spawn(solus::server::serve(settings, listener, async {
            let _ = rx.await;
        }));
        RawServer {
            port,
            stop: Some(tx),
            join,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.join.await.unwrap().unwrap();
    }
}

/// Connects over TLS (server name `localhost`), retrying while the server starts.
async fn tls_channel(port: u16, tls: ClientTlsConfig) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .timeout(Duration::from_secs(5));
    let mut last = None;
    for _ in 0..100 {
        match endpoint.connect().await {
            Ok(ch) => return Ok(ch),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.unwrap())
}

async fn health(ch: &Channel) -> Result<(), tonic::Status> {
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    h.check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .map(drop)
}

fn tls_settings(backend: &TestBackend, dir: &Path, pki: &Pki, mutual: bool) -> Settings {
    let write = |name: &str, pem: &str| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    let mut settings = backend.settings.clone();
    settings.server.tls.cert_file = Some(write("server.crt", &pki.server_cert));
    settings.server.tls.key_file = Some(write("server.key", &pki.server_key));
    if mutual {
        settings.server.tls.client_ca_file = Some(write("ca.crt", &pki.ca));
    }
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_self_signed_ca() {
    let (backend, dir, pki) = (TestBackend::embedded(), tempfile::tempdir().unwrap(), make_pki());
    let server = RawServer::start(tls_settings(&backend, dir.path(), &pki, false)).await;
    let trusted = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(&pki.ca));
    let ch = tls_channel(server.port, trusted).await.expect("TLS connection");
    health(&ch).await.expect("health over TLS");
    let (code, message) = call(&ch, "CreateDeduper", "c", "d", None).await;
    assert_eq!(code, Code::Ok, "{message}");
    assert_eq!(call(&ch, "AddIfAbsent", "c", "d", None).await.0, Code::Ok);

    // A plaintext client gets no answer from the TLS port.
    let plain = Channel::from_shared(format!("http://127.0.0.1:{}", server.port))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    assert!(health(&plain).await.is_err(), "plaintext request on the TLS port");
    // A client that does not trust the CA refuses the server.
    let other_ca = pki_ca_only();
    let untrusted = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(other_ca));
    let refused = Channel::from_shared(format!("https://127.0.0.1:{}", server.port))
        .unwrap()
        .tls_config(untrusted)
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    assert!(refused.is_err(), "certificate of an unknown CA accepted");
    server.stop().await;
}

fn pki_ca_only() -> String {
    make_pki().ca
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let (backend, dir, pki) = (TestBackend::embedded(), tempfile::tempdir().unwrap(), make_pki());
    let server = RawServer::start(tls_settings(&backend, dir.path(), &pki, true)).await;
    let ca = Certificate::from_pem(&pki.ca);
    let with_cert = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(ca.clone())
        .identity(Identity::from_pem(&pki.client_cert, &pki.client_key));
    let ch = tls_channel(server.port, with_cert).await.expect("mTLS connection");
    health(&ch).await.expect("health with a client certificate");
    assert_eq!(call(&ch, "CreateDeduper", "c", "d", None).await.0, Code::Ok);

    let without_cert = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(ca.clone());
    let anonymous = Channel::from_shared(format!("https://127.0.0.1:{}", server.port))
        .unwrap()
        .tls_config(without_cert)
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    // TLS 1.3 may finish the client's side of the handshake before the
    // server's refusal arrives: then the first call fails instead.
    if let Ok(ch) = anonymous {
        assert!(health(&ch).await.is_err(), "a client without a certificate was served");
        assert!(call(&ch, "CreateDeduper", "c", "x", None).await.0 != Code::Ok);
    }
    // A certificate from another CA is refused too.
    let stranger = make_pki();
    let foreign = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(ca)
        .identity(Identity::from_pem(&stranger.client_cert, &stranger.client_key));
    let foreign = Channel::from_shared(format!("https://127.0.0.1:{}", server.port))
        .unwrap()
        .tls_config(foreign)
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(ch) = foreign {
        assert!(health(&ch).await.is_err(), "a certificate of another CA was accepted");
    }
    // The server keeps serving the good client.
    health(&ch).await.expect("still serving");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_tokens_file_and_keeps_it_on_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    write_tokens(&tokens, &[(TOKEN_A, "client-a"), (TOKEN_ADMIN, "*")]);
    let server = SolusProcess::start(&[
        ("SOLUS__AUTH__ENABLED", "true".into()),
        ("SOLUS__AUTH__TOKENS_FILE", tokens.display().to_string()),
        ("SOLUS__METRICS__LISTEN", String::new()),
    ])
    .await;
    let ch = server.channel().await;
    let (a, b) = (bearer(TOKEN_A), bearer(TOKEN_B));
    assert_eq!(call(&ch, "CreateDeduper", "client-a", "d", Some(&a)).await.0, Code::Ok);
    assert_eq!(
        call(&ch, "ListDedupers", "client-b", "d", Some(&b)).await.0,
        Code::Unauthenticated
    );

    // Revoke A, add B, SIGHUP: the new file takes effect without a restart.
    write_tokens(&tokens, &[(TOKEN_B, "client-b"), (TOKEN_ADMIN, "*")]);
    server.signal("HUP");
    let mut swapped = false;
    for _ in 0..100 {
        if call(&ch, "ListDedupers", "client-b", "d", Some(&b)).await.0 == Code::Ok {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(swapped, "B not accepted after SIGHUP; stderr:\n{}", server.stderr());
    assert_eq!(
        call(&ch, "ListDedupers", "client-a", "d", Some(&a)).await.0,
        Code::Unauthenticated
    );

    // A broken file is refused and the tokens in force stay.
    std::fs::write(&tokens, format!("{TOKEN_A} client-a extra-field\n")).unwrap();
    server.signal("HUP");
    let mut refused = false;
    for _ in 0..100 {
        if server.stderr().contains("keeping the previous tokens") {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "no error logged; stderr:\n{}", server.stderr());
    assert_eq!(call(&ch, "ListDedupers", "client-b", "d", Some(&b)).await.0, Code::Ok);
    assert_eq!(
        call(&ch, "ListDedupers", "client-a", "d", Some(&a)).await.0,
        Code::Unauthenticated
    );
    let log = server.stderr();
    for token in [TOKEN_A, TOKEN_B, TOKEN_ADMIN] {
        assert!(!log.contains(token), "a token reached the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_on_a_non_loopback_address_warns_and_sighup_without_auth_is_harmless() {
    let warning = "plaintext gRPC on a non-loopback address";
    let mut exposed = SolusProcess::start_on("0.0.0.0", &[("SOLUS__METRICS__LISTEN", String::new())]).await;
    exposed.signal("TERM");
    assert!(
        exposed
            .wait_exit(Duration::from_secs(20))
            .await
            .expect("exit")
            .success()
    );
    assert!(exposed.stderr().contains(warning), "stderr:\n{}", exposed.stderr());

    let mut local = SolusProcess::start(&[("SOLUS__METRICS__LISTEN", String::new())]).await;
    // SIGHUP without auth is logged, and does not stop the server.
    local.signal("HUP");
    for _ in 0..100 {
        if local.stderr().contains("SIGHUP") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(local.stderr().contains("nothing to re-read"), "{}", local.stderr());
    local.channel().await;
    local.signal("TERM");
    assert!(local.wait_exit(Duration::from_secs(20)).await.expect("exit").success());
    assert!(!local.stderr().contains(warning), "stderr:\n{}", local.stderr());
}

#[tokio::test]
async fn unreadable_or_mismatched_tls_files_stop_the_start() {
    let (backend, dir, pki) = (TestBackend::embedded(), tempfile::tempdir().unwrap(), make_pki());
    let serve = |settings: Settings| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        solus::server::serve(settings, listener, async {})
            .await
            .unwrap_err()
            .to_string()
    };
    let mut missing = tls_settings(&backend, dir.path(), &pki, false);
    missing.server.tls.cert_file = Some(dir.path().join("nope.crt"));
    let e = serve(missing).await;
    assert!(e.contains("server.tls.cert_file") && e.contains("nope.crt"), "{e}");

    // A key that is not the certificate's.
    let other = make_pki();
    let mismatched = tls_settings(&backend, dir.path(), &pki, false);
    std::fs::write(mismatched.server.tls.key_file.as_ref().unwrap(), &other.server_key).unwrap();
    let e = serve(mismatched).await;
    assert!(e.contains("server.tls"), "{e}");
}

#[tokio::test]
async fn a_busy_metrics_port_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = TestBackend::embedded();
    let mut settings = backend.settings.clone();
    settings.metrics.listen = taken.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = solus::server::serve(settings, listener, async {})
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("metrics.listen"), "{e}");
}

/// The operator CLI reaches a server with mutual TLS and tokens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_tls_and_tokens() {
    let (backend, dir, pki) = (TestBackend::embedded(), tempfile::tempdir().unwrap(), make_pki());
    let tokens = dir.path().join("tokens");
    write_tokens(&tokens, &[(TOKEN_A, "client-a")]);
    let mut settings = tls_settings(&backend, dir.path(), &pki, true);
    settings.auth.enabled = true;
    settings.auth.tokens_file = Some(tokens);
    let server = RawServer::start(settings).await;
    let write = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p.display().to_string()
    };
    let (ca, cert, key) = (
        write("cli-ca.crt", &pki.ca),
        write("cli.crt", &pki.client_cert),
        write("cli.key", &pki.client_key),
    );
    let addr = format!("127.0.0.1:{}", server.port);
    let cli = |args: &[&str], token: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_solus"));
        cmd.args(args)
            .args(["--addr", &addr, "--ca-cert", &ca, "--tls-domain", "localhost"])
            .args(["--client-cert", &cert, "--client-key", &key])
            .env_remove("SOLUS_TOKEN");
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        cmd.output().unwrap()
    };
    // Wait for the server, then create, add and check through the CLI.
    let mut created = None;
    for _ in 0..100 {
        let out = cli(
            &[
                "deduper", "create", "--client", "client-a", "--name", "d", "-n", "1000", "-p", "0.01",
            ],
            Some(TOKEN_A),
        );
        if out.status.success() {
            created = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let created = created.unwrap_or_else(|| {
        let last = cli(
            &[
                "deduper", "create", "--client", "client-a", "--name", "d", "-n", "1000", "-p", "0.01",
            ],
            Some(TOKEN_A),
        );
        panic!(
            "deduper create over mutual TLS with a token: {}",
            String::from_utf8_lossy(&last.stderr)
        )
    });
    assert!(String::from_utf8_lossy(&created.stdout).contains("\"name\":\"d\""));
    assert!(
        cli(&["add", "--client", "client-a", "--deduper", "d", "e1"], Some(TOKEN_A))
            .status
            .success()
    );
    let check = cli(
        &["check", "--client", "client-a", "--deduper", "d", "e1", "e2"],
        Some(TOKEN_A),
    );
    assert_eq!(String::from_utf8_lossy(&check.stdout), "present e1\nabsent e2\n");
    // No token: refused with the status named and the flag that gives one.
    let refused = cli(&["check", "--client", "client-a", "--deduper", "d", "e1"], None);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("UNAUTHENTICATED") && stderr.contains("--token") && stderr.contains("SOLUS_TOKEN"),
        "{stderr}"
    );
    server.stop().await;
}

/// With TLS on, `server.health_listen` serves plaintext health only, for
/// probes that cannot speak TLS; the data services are not reachable there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_health_listener_beside_tls() {
    let (backend, dir, pki) = (TestBackend::embedded(), tempfile::tempdir().unwrap(), make_pki());
    let mut settings = tls_settings(&backend, dir.path(), &pki, true);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    settings.server.health_listen = format!("127.0.0.1:{port}");
    let server = RawServer::start(settings).await;
    let plain = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .timeout(Duration::from_secs(5));
    let mut ch = None;
    for _ in 0..100 {
        if let Ok(c) = plain.connect().await {
            ch = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ch = ch.expect("plaintext health port");
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    let mut status = 0;
    for _ in 0..50 {
        let r = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: "solus.v1.DeduperService".into(),
            })
            .await;
        status = r.map(|r| r.into_inner().status).unwrap_or(0);
        if status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let (code, _) = call(&ch, "CreateDeduper", "c", "d", None).await;
    assert_eq!(code, Code::Unimplemented, "only health is served on the plaintext port");
    server.stop().await;
}
