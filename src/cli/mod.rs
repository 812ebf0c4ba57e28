//! The `solus` command line: the server, operator client commands in the
//! spirit of `redis-cli`, contract inspection and the replay tool.

#[macro_use]
mod output;
pub mod bench;
mod client;
mod explain;
pub mod hints;
mod replay;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Solus: Bloom-filter deduplication over gRPC.
#[derive(Debug, Parser)]
#[command(name = "solus", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (settings: defaults < --config FILE < SOLUS__* env).
    Serve {
        /// TOML settings file (every key: deploy/solus.toml); SOLUS__<SECTION>__<KEY> variables override it.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Create, inspect and change dedupers.
    #[command(subcommand)]
    Deduper(DeduperCommand),
    /// Remember entities (arguments, or one per line on stdin).
    Add(DataArgs),
    /// Report each entity as absent or present (arguments, or stdin lines).
    Check(DataArgs),
    /// Report absence, then remember (arguments, or stdin lines).
    AddIfAbsent(DataArgs),
    /// Print an entity's shard, row key, bits and qualifiers as one JSON line.
    Explain(explain::ExplainArgs),
    /// Stream events sampled from a weighted key file through AddIfAbsent and
    /// check the answers against an exact set.
    Replay(replay::ReplayArgs),
    /// Load generator: requests/s, entities/s, latency percentiles, errors.
    Bench(bench::BenchArgs),
    /// Solus against Redis (one key per entity) on the same machine and keys.
    Compare(bench::CompareArgs),
    /// Print the server's health services: process, data path, journal.
    Health {
        #[command(flatten)]
        target: Target,
    },
}

/// Where the server is, and how to reach it.
#[derive(Debug, Args, Clone)]
pub struct Target {
    /// Server gRPC address: `host:port` (port 50051 when omitted) or `http(s)://host:port`.
    #[arg(long, default_value = "127.0.0.1:50051", env = "SOLUS_ADDR")]
    pub addr: String,
    /// Bearer token sent as `authorization: Bearer <token>` (servers with auth.enabled).
    #[arg(long, env = "SOLUS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) to verify the server with; switches to TLS.
    #[arg(long, env = "SOLUS_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Client certificate (PEM), for servers that require one; needs --client-key.
    #[arg(long, env = "SOLUS_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// Private key (PEM) of --client-cert.
    #[arg(long, env = "SOLUS_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Server name (DNS name) to verify in its certificate [default: the host of --addr].
    #[arg(long)]
    pub tls_domain: Option<String>,
}

impl Target {
    /// A plaintext target at `addr`, without a token.
    pub fn plain(addr: impl Into<String>) -> Target {
        Target {
            addr: addr.into(),
            token: None,
            ca_cert: None,
            client_cert: None,
            client_key: None,
            tls_domain: None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DeduperCommand {
    /// Create a deduper, sized from -n/-p or from explicit geometry.
    Create(client::CreateArgs),
    /// Show one deduper.
    Get {
        #[command(flatten)]
        target: Target,
        /// Client id that owns the deduper.
        #[arg(long)]
        client: String,
        /// Name of the deduper.
        #[arg(long)]
        name: String,
    },
    /// List a client's dedupers.
    List {
        #[command(flatten)]
        target: Target,
        /// Client id whose dedupers to list.
        #[arg(long)]
        client: String,
        /// Only active dedupers.
        #[arg(long)]
        active_only: bool,
    },
    /// Activate/deactivate a deduper, change its expiry, or resize it online.
    Update {
        #[command(flatten)]
        target: Target,
        /// Client id that owns the deduper.
        #[arg(long)]
        client: String,
        /// Name of the deduper.
        #[arg(long)]
        name: String,
        /// `true` to serve data calls again, `false` to refuse them (FAILED_PRECONDITION); bits are kept.
        #[arg(long)]
        active: Option<bool>,
        /// New longest and default TTL of an entity, in seconds.
        #[arg(long)]
        expiry_seconds: Option<u64>,
        /// Resize online to this many expected insertions: a successor
        /// generation is read at once, written after a few seconds, and the
        /// older one retires after its longest expiry (docs/operations.md, "Resizing").
        #[arg(long)]
        expected_insertions: Option<u64>,
        /// With the resize: the false-positive rate to size for (default: the current one).
        #[arg(long)]
        false_positive_rate: Option<f64>,
    },
    /// Delete a deduper: its config and its bits (frees the embedded memory budget).
    Delete {
        #[command(flatten)]
        target: Target,
        /// Client id that owns the deduper.
        #[arg(long)]
        client: String,
        /// Name of the deduper.
        #[arg(long)]
        name: String,
        /// Delete even while active (otherwise deactivate it first with `update --active false`).
        #[arg(long)]
        force: bool,
    },
    /// Show a deduper's live figures: fill, estimated live entities, estimated false-positive rate, load.
    Stats {
        #[command(flatten)]
        target: Target,
        /// Client id that owns the deduper.
        #[arg(long)]
        client: String,
        /// Name of the deduper.
        #[arg(long)]
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct DataArgs {
    #[command(flatten)]
    pub target: Target,
    /// Client id that owns the deduper.
    #[arg(long)]
    pub client: String,
    /// Name of the deduper.
    #[arg(long)]
    pub deduper: String,
    /// How long added entities are remembered, in milliseconds (0 = the deduper's --expiry-seconds).
    #[arg(long, default_value_t = 0)]
    pub ttl_ms: u64,
    /// Entities are hex-encoded bytes.
    #[arg(long)]
    pub hex: bool,
    /// Entities per request (a count).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Entities; read from stdin, one per line, when none are given.
    pub entities: Vec<String>,
}

/// Deduper level on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LevelArg {
    Global,
    Dc,
}

/// Runs a client-side command (everything but `serve`).
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve { .. } => unreachable!("serve is handled by main"),
        Command::Deduper(c) => client::deduper(c).await,
        Command::Add(a) => client::add(a).await,
        Command::Check(a) => client::check(a, false).await,
        Command::AddIfAbsent(a) => client::check(a, true).await,
        Command::Explain(a) => explain::run(a),
        Command::Replay(a) => replay::run(a).await,
        Command::Bench(a) => bench::run(a).await,
        Command::Compare(a) => bench::run_compare(a).await,
        Command::Health { target } => client::health(&target).await,
    }
}

/// Decodes a hex string (for `--hex`), with a clear error.
pub fn decode_hex(s: &str) -> anyhow::Result<Vec<u8>> {
    let s = s.trim();
    anyhow::ensure!(
        s.len() % 2 == 0,
        "entity {s:?} has an odd number of hex digits (--hex takes two digits per byte, e.g. 6f72)"
    );
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| anyhow::anyhow!("entity {s:?} is not hex; drop --hex to send it as text"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every argument of every subcommand, as `solus sub ... --flag`, with its help text.
    fn arguments(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String, String)>) {
        for arg in cmd.get_arguments() {
            if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            out.push((path.to_string(), arg.get_id().to_string(), help));
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                arguments(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
    }

    #[test]
    fn hex_entities_are_checked_without_panicking() {
        assert_eq!(super::decode_hex("6f72").unwrap(), b"or");
        // A multi-byte character across a digit pair used to panic on slicing.
        for bad in ["aé1", "zz", "abc"] {
            let e = super::decode_hex(bad).unwrap_err().to_string();
            assert!(e.contains("--hex"), "{bad}: {e}");
        }
    }

    /// No flag or positional argument without help, and every time or
    /// duration says its unit.
    #[test]
    fn every_argument_has_help_with_its_unit() {
        let mut all = Vec::new();
        arguments(&Cli::command(), "solus", &mut all);
        assert!(all.len() > 50, "walked only {} arguments", all.len());
        let mut missing = Vec::new();
        for (path, id, help) in &all {
            if help.trim().is_empty() {
                missing.push(format!("{path} {id}: no help"));
                continue;
            }
            let timed = ["duration", "_ms", "seconds", "ttl", "timeout", "interval"]
                .iter()
                .any(|w| id.contains(w));
            let lower = help.to_lowercase();
            let unit = ["second", "millisecond", " ms", "(ms", "ms)"]
                .iter()
                .any(|u| lower.contains(u));
            if timed && !unit {
                missing.push(format!("{path} {id}: a time without its unit: {help:?}"));
            }
        }
        assert!(missing.is_empty(), "arguments without help:\n{}", missing.join("\n"));
    }
}
