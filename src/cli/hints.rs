//! Errors of the client commands in the command line's own words: what
//! happened, which flag or setting is involved, and what to do next.

use std::error::Error as StdError;
use std::io::ErrorKind;

use tonic::{Code, Status};

use super::Target;
use crate::api::code_name;

/// The port `--addr` means when it names none (the server's default `server.listen`).
pub const DEFAULT_PORT: u16 = 50051;

/// `--addr` as a tonic endpoint URL: `host:port`, `host` (port 50051),
/// `[v6]:port`, or the same behind `http://` / `https://`; `https` when `tls`.
/// Errors say what is wrong with the flag.
pub fn endpoint_url(addr: &str, tls: bool) -> anyhow::Result<String> {
    let bad = |why: String| {
        anyhow::anyhow!("--addr {addr:?} (or SOLUS_ADDR) {why}; give host:port, e.g. --addr 127.0.0.1:{DEFAULT_PORT}")
    };
    let trimmed = addr.trim();
    let (scheme, rest) = match trimmed.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        Some((other, _)) => {
            return Err(bad(format!(
                "has scheme {other:?}; only http:// and https:// are known"
            )));
        }
        None => ("http", trimmed),
    };
    if scheme == "https" && !tls {
        anyhow::bail!(
            "--addr {addr:?} asks for TLS (https://) but no --ca-cert was given: pass --ca-cert with the CA \
             certificate (PEM) that signed the server's certificate"
        );
    }
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() {
        return Err(bad("names no host".into()));
    }
    if authority.contains('/') {
        return Err(bad("has a path; the server address is only host and port".into()));
    }
    // `[v6]`, `[v6]:port`, `host`, `host:port`; a bare IPv6 address needs brackets.
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((ip, "")) => (format!("[{ip}]"), None),
            Some((ip, port)) => match port.strip_prefix(':') {
                Some(port) => (format!("[{ip}]"), Some(port)),
                None => return Err(bad("is not [address]:port".into())),
            },
            None => return Err(bad("opens [ without closing it".into())),
        },
        None => match authority.split_once(':') {
            Some((_, rest)) if rest.contains(':') => {
                return Err(bad(
                    "looks like an IPv6 address: write it in brackets, e.g. [::1]:50051".into(),
                ));
            }
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (authority.to_string(), None),
        },
    };
    if host.is_empty() {
        return Err(bad("names no host".into()));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(bad(format!("has port {p:?}, which is not 1 to 65535"))),
        },
    };
    let scheme = if tls { "https" } else { "http" };
    Ok(format!("{scheme}://{host}:{port}"))
}

/// `host:port` of an endpoint URL, as shown in messages.
pub fn shown_addr(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// The messages of an error and its sources, each once (tonic and hyper
/// repeat themselves: "tcp connect error: tcp connect error: ...").
pub fn causes(e: &(dyn StdError + 'static)) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        // A message already said by an outer one ("x: y" then "y") is left out.
        if !text.is_empty() && !out.iter().any(|seen| seen.contains(&text)) {
            out.push(text);
        }
        next = err.source();
    }
    out
}

/// The I/O error kind at the bottom of an error chain, if any.
fn io_kind(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = err.source();
    }
    None
}

/// What to say when the client cannot connect to the server at `url`.
pub fn connect_error(target: &Target, url: &str, e: &(dyn StdError + 'static)) -> anyhow::Error {
    let addr = shown_addr(url);
    let start = "start one with `solus serve`, or point --addr (or SOLUS_ADDR) at a running server";
    let text = causes(e).join(": ").to_lowercase();
    let kind = io_kind(e);
    match kind {
        Some(ErrorKind::ConnectionRefused) => {
            anyhow::anyhow!("no Solus server is listening on {addr} (connection refused): {start}")
        }
        _ if kind == Some(ErrorKind::TimedOut) || text.contains("timed out") => anyhow::anyhow!(
            "connecting to {addr} timed out: the host does not answer (wrong host in --addr / SOLUS_ADDR, or a \
             firewall); {start}"
        ),
        _ if text.contains("dns error") || text.contains("failed to lookup") || text.contains("name or service") => {
            anyhow::anyhow!(
                "cannot resolve the host of --addr {addr} (or SOLUS_ADDR): {}; check its spelling",
                causes(e).last().map(String::as_str).unwrap_or("unknown host")
            )
        }
        _ if target.ca_cert.is_some() && (text.contains("invalidcontenttype") || text.contains("corrupt message")) => {
            anyhow::anyhow!(
                "{addr} does not speak TLS, but --ca-cert (or SOLUS_CA_CERT) asks for it: drop --ca-cert for a \
                 plaintext server, or turn TLS on at the server (server.tls.cert_file and key_file)"
            )
        }
        _ if target.ca_cert.is_some() && (text.contains("tls") || text.contains("certificate")) => anyhow::anyhow!(
            "TLS handshake with {addr} failed: {}. Check that --ca-cert signed the server's certificate, that \
             --tls-domain (default: the host of --addr) is a name in it, and that the server has TLS on \
             (server.tls.cert_file){}",
            causes(e).last().map(String::as_str).unwrap_or("unknown error"),
            if target.client_cert.is_none() {
                "; a server with server.tls.client_ca_file also needs --client-cert and --client-key"
            } else {
                ""
            }
        ),
        _ => anyhow::anyhow!("cannot connect to {addr}: {}; {start}", causes(e).join(": ")),
    }
}

/// What a client command was doing, for the next step an error suggests.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub target: &'a Target,
    /// `--client`.
    pub client: &'a str,
    /// `--deduper` / `--name`, when the call names one.
    pub deduper: Option<&'a str>,
}

/// Protobuf field names in server messages, as the command line's flags:
/// long forms only, which every command taking them accepts (`deduper
/// update` has no `-n`/`-p`). (`client_id`, `name` and `deduper` are
/// checked by the CLI before a call.)
const FLAGS: &[(&str, &str)] = &[
    ("client_id", "--client"),
    ("expected_insertions", "--expected-insertions"),
    ("false_positive_rate", "--false-positive-rate"),
    ("hash_functions", "--hash-functions"),
    ("bits_per_shard", "--bits-per-shard"),
    ("expiry_seconds", "--expiry-seconds"),
    ("ttl_ms", "--ttl-ms"),
];

/// `message` with each protobuf field name (a whole word) replaced by its
/// flag, and a leading `shards` (as in "shards must be ...") by `--shards`.
pub fn in_flag_words(message: &str) -> String {
    let message = match message.strip_prefix("shards ") {
        Some(rest) => format!("--shards {rest}"),
        None => message.to_string(),
    };
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match FLAGS.iter().find(|(field, _)| field == word) {
            Some((_, flag)) => out.push_str(flag),
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in message.chars() {
        if is_word(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Whether a status came from the connection rather than from a Solus
/// server's answer (an HTTP/1 server, a TLS port spoken to in plaintext, a
/// dropped connection).
fn is_transport_failure(s: &Status) -> bool {
    s.source().is_some() || matches!(s.message(), "transport error" | "operation was canceled")
}

/// A failed call as an error in the command line's words.
pub fn call_error(s: Status, call: Call<'_>) -> anyhow::Error {
    let addr = endpoint_url(&call.target.addr, call.target.ca_cert.is_some())
        .map(|u| shown_addr(&u).to_string())
        .unwrap_or_else(|_| call.target.addr.clone());
    let code = code_name(s.code());
    let msg = s.message();
    let c = call.client;
    let d = call.deduper.unwrap_or("NAME");
    if is_transport_failure(&s) && !matches!(s.code(), Code::DeadlineExceeded) {
        // Status' own Display is its Debug form; the innermost cause says the most.
        let detail = s
            .source()
            .and_then(|source| causes(source).pop())
            .unwrap_or_else(|| s.message().to_string());
        let tls_hint = if call.target.ca_cert.is_none() {
            " If the server has TLS on (server.tls.cert_file), pass --ca-cert."
        } else {
            ""
        };
        return anyhow::anyhow!(
            "{addr} is not a Solus gRPC server ({detail}). Check --addr (or SOLUS_ADDR): it must be the server's \
             gRPC port (server.listen, 127.0.0.1:50051 by default), not its metrics port (metrics.listen, 9464 by \
             default, plain HTTP) nor another program's.{tls_hint}"
        );
    }
    match s.code() {
        Code::NotFound => anyhow::anyhow!(
            "{code}: {msg}. See client {c:?}'s dedupers with `solus deduper list --client {c}`, or create it with \
             `solus deduper create --client {c} --name {d} -n <expected entities> -p 0.01`"
        ),
        // The server's text names the RPC fields (UpdateDeduper active = false, force = true).
        Code::FailedPrecondition if msg.contains("is active; deactivate") => anyhow::anyhow!(
            "{code}: deduper {d:?} of client {c:?} is active, and only an inactive one is deleted: deactivate it \
             first with `solus deduper update --client {c} --name {d} --active false`, or delete it anyway with \
             `solus deduper delete --client {c} --name {d} --force`"
        ),
        Code::FailedPrecondition if msg.contains("inactive") => anyhow::anyhow!(
            "{code}: deduper {d:?} of client {c:?} is inactive; reactivate it with \
             `solus deduper update --client {c} --name {d} --active true`"
        ),
        Code::AlreadyExists => anyhow::anyhow!(
            "{code}: {msg}; choose another --name, or see the existing one with \
             `solus deduper get --client {c} --name {d}`"
        ),
        Code::InvalidArgument => anyhow::anyhow!("{code}: {}", in_flag_words(msg)),
        Code::Unauthenticated if call.target.token.is_none() => anyhow::anyhow!(
            "{code}: {msg}: the server requires a bearer token (auth.enabled); pass --token <token> or set SOLUS_TOKEN"
        ),
        Code::Unauthenticated => anyhow::anyhow!(
            "{code}: {msg}: the server does not know the token of --token / SOLUS_TOKEN; use one listed in its \
             auth.tokens_file"
        ),
        Code::PermissionDenied => anyhow::anyhow!(
            "{code}: {msg}: the token of --token / SOLUS_TOKEN belongs to another client; use --client of that \
             token, that client's token, or an admin token"
        ),
        Code::Unimplemented => anyhow::anyhow!(
            "{code}: {msg}: the server at {addr} does not offer this call; is --addr (or SOLUS_ADDR) a Solus server?"
        ),
        Code::Unavailable => anyhow::anyhow!(
            "{code}: {msg}. The server or its storage is unavailable for now: retry later; the server's log says more"
        ),
        _ => anyhow::anyhow!("{code}: {}", in_flag_words(msg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_the_grpc_port_never_to_80() {
        let url = |a: &str| endpoint_url(a, false).unwrap();
        assert_eq!(url("127.0.0.1"), "http://127.0.0.1:50051");
        assert_eq!(url("localhost:7000"), "http://localhost:7000");
        assert_eq!(url("http://127.0.0.1"), "http://127.0.0.1:50051");
        assert_eq!(url("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
        assert_eq!(url("[::1]"), "http://[::1]:50051");
        assert_eq!(url("[::1]:1"), "http://[::1]:1");
        assert_eq!(endpoint_url("h", true).unwrap(), "https://h:50051");
        assert_eq!(endpoint_url("https://h:1", true).unwrap(), "https://h:1");
        for (bad, says) in [
            ("127.0.0.1:abc", "port \"abc\""),
            ("127.0.0.1:0", "not 1 to 65535"),
            ("::1", "brackets"),
            ("ftp://h", "scheme"),
            ("", "no host"),
            (":50051", "no host"),
            ("h:1/path", "path"),
        ] {
            let e = endpoint_url(bad, false).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("--addr"), "{bad}: {e}");
        }
        let e = endpoint_url("https://h", false).unwrap_err().to_string();
        assert!(e.contains("--ca-cert"), "{e}");
    }

    #[test]
    fn field_names_become_flags() {
        assert_eq!(
            in_flag_words(
                "give either expected_insertions and false_positive_rate, or all of hash_functions, shards and bits_per_shard; got neither"
            ),
            "give either --expected-insertions and --false-positive-rate, or all of --hash-functions, shards \
             and --bits-per-shard; got neither"
        );
        assert_eq!(
            in_flag_words("ttl_ms 5 exceeds deduper \"d\"'s expiry; limits.max_shards"),
            "--ttl-ms 5 exceeds deduper \"d\"'s expiry; limits.max_shards"
        );
        assert_eq!(
            in_flag_words("shards must be 1 to 9, got 0"),
            "--shards must be 1 to 9, got 0"
        );
        assert_eq!(in_flag_words("é 4 shards, ttl_msx"), "é 4 shards, ttl_msx");
    }
}
