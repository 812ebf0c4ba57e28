//! Settings of the HBase backend (`storage.hbase.*`): where HBase's Thrift1
//! server listens, how to talk to it, and how hard to try.

use serde::Deserialize;

/// Thrift transport; must match the server's `hbase.regionserver.thrift.framed`.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Unframed, the server's default (`framed = false`).
    #[default]
    Buffered,
    /// Length-prefixed frames (`framed = true`; always used by the `hsha`,
    /// `nonblocking` and `threadedselector` server types).
    Framed,
}

/// Thrift protocol; must match the server's `hbase.regionserver.thrift.compact`.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// The server's default (`compact = false`).
    #[default]
    Binary,
    /// `compact = true`.
    Compact,
}

/// A SASL security layer (quality of protection), weakest first; the names
/// are HBase's `hbase.thrift.security.qop` values.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Qop {
    /// Authentication only: the calls travel in clear.
    Authentication,
    /// Each frame signed (tampering detected), not encrypted.
    Integrity,
    /// Each frame encrypted and signed.
    #[default]
    Privacy,
}

impl Qop {
    pub const ALL: [Qop; 3] = [Qop::Authentication, Qop::Integrity, Qop::Privacy];

    /// The RFC 4752 security-layer bit.
    pub fn layer_bit(self) -> u8 {
        match self {
            Qop::Authentication => 0x01,
            Qop::Integrity => 0x02,
            Qop::Privacy => 0x04,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Qop::Authentication => "authentication",
            Qop::Integrity => "integrity",
            Qop::Privacy => "privacy",
        }
    }
}

/// Which reads also ask for the legacy `<bit>` marker columns of the
/// original Java service (`storage.hbase.read_legacy_markers`).
///
/// Parses `"auto"`, `"always"` and `"never"`, and the key's older bool form:
/// `true` is `always` (what it meant: markers read on every deduper),
/// `false` is `never`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LegacyMarkers {
    /// Only for dedupers whose config does not say "no legacy markers":
    /// every deduper this Solus creates says so (`C:legacy`, docs/hbase.md),
    /// those created by the original service or an older Solus do not.
    #[default]
    Auto,
    /// For every deduper.
    Always,
    /// For none: only where no legacy writer ever wrote these tables.
    Never,
}

impl LegacyMarkers {
    /// Whether reads of `d` ask for marker columns.
    pub fn read_for(self, d: &crate::deduper::Deduper) -> bool {
        match self {
            LegacyMarkers::Auto => d.may_hold_legacy_markers,
            LegacyMarkers::Always => true,
            LegacyMarkers::Never => false,
        }
    }
}

/// Kerberos (SASL/GSSAPI) on every Thrift connection
/// (`storage.hbase.kerberos.*`); see docs/hbase.md, "Kerberos: Solus
/// settings, errors and throughput".
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct KerberosConfig {
    /// Authenticate every Thrift connection with SASL/GSSAPI. Needs the
    /// buffered transport. Default false.
    pub enabled: bool,
    /// Service part of the server principal. Default `hbase`.
    pub service: String,
    /// Host part of the server principal (`<service>/<server_host>@REALM`);
    /// empty = each address's host. Default empty.
    pub server_host: String,
    /// Lowest acceptable security layer; a server offering less is refused,
    /// never downgraded to. Default `privacy`.
    pub min_qop: Qop,
    /// Client principal, e.g. `solus/host@REALM`; empty = the keytab's (or
    /// ticket cache's) default. Default empty.
    pub principal: String,
    /// Client keytab: tickets are fetched from it into a private `MEMORY:`
    /// cache and fetched again when they expire. Default empty.
    pub keytab: String,
    /// Ticket cache used when there is no keytab, e.g.
    /// `FILE:/tmp/krb5cc_solus` (renewed by whoever runs kinit); empty =
    /// the library's default. Default empty.
    pub ticket_cache: String,
    /// Path of the krb5.conf to use (sets `KRB5_CONFIG` for the library);
    /// empty = the system's. Default empty.
    pub krb5_config: String,
    /// The MIT GSSAPI library, a name the loader searches for or a path.
    /// Default `libgssapi_krb5.so.2` (Debian package `libgssapi-krb5-2`).
    pub library: String,
}

impl Default for KerberosConfig {
    fn default() -> Self {
        KerberosConfig {
            enabled: false,
            service: "hbase".into(),
            server_host: String::new(),
            min_qop: Qop::Privacy,
            principal: String::new(),
            keytab: String::new(),
            ticket_cache: String::new(),
            krb5_config: String::new(),
            library: "libgssapi_krb5.so.2".into(),
        }
    }
}

impl<'de> Deserialize<'de> for LegacyMarkers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Bool(bool),
            Text(String),
        }
        match Form::deserialize(d)? {
            Form::Bool(true) => Ok(LegacyMarkers::Always),
            Form::Bool(false) => Ok(LegacyMarkers::Never),
            // Environment variables arrive as text, also for the bool form.
            Form::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "auto" => Ok(LegacyMarkers::Auto),
                "always" | "true" => Ok(LegacyMarkers::Always),
                "never" | "false" => Ok(LegacyMarkers::Never),
                other => Err(serde::de::Error::custom(format!(
                    "storage.hbase.read_legacy_markers: {other:?} is not one of \"auto\", \"always\", \"never\" \
                     (or a bool: true = always, false = never)"
                ))),
            },
        }
    }
}

/// Settings of the HBase backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HbaseConfig {
    /// HBase Thrift1 servers as `host:port`; connections go to the first
    /// reachable one, starting from a rotating position. A single string is
    /// split at commas (for `SOLUS__STORAGE__HBASE__ADDRESSES=h1:9090,h2:9090`).
    /// Default `["127.0.0.1:9090"]`.
    #[serde(deserialize_with = "one_or_many")]
    pub addresses: Vec<String>,
    /// Default `buffered`.
    pub transport: Transport,
    /// Default `binary`.
    pub protocol: Protocol,
    /// Most open Thrift connections (one call at a time each). Default 16.
    pub pool_size: u32,
    /// TCP connect timeout per address, in ms; also bounds the wait for a
    /// free pooled connection, plus `read_timeout_ms` when every connection
    /// is open and busy (one frees within a call). Default 1,000.
    pub connect_timeout_ms: u64,
    /// Socket read timeout, in ms: the longest wait for any part of an
    /// answer. Reads are split into per-row calls of at most
    /// `max_cells_per_read` columns, so it bounds small calls whatever the
    /// batch. A call that timed out is retried once at most (HBase is likely
    /// still working on it). Bit writes wait 2 ms more per cell of the call
    /// (`data::WRITE_MS_PER_CELL`). Default 5,000.
    pub read_timeout_ms: u64,
    /// Socket write timeout, in ms. Default 5,000.
    pub write_timeout_ms: u64,
    /// Extra attempts of an idempotent call (reads, bit writes, config reads)
    /// after a connection failure or a retryable HBase `IOError` (after a
    /// timeout once at most, see `read_timeout_ms`). Default 2.
    pub retries: u32,
    /// Wait before the first retry, in ms; doubles on each further retry.
    /// Default 50.
    pub retry_backoff_ms: u64,
    /// Create missing tables (data tables at start-up, a client's meta table
    /// on its first deduper). When false a missing table is an error naming
    /// it. Default true.
    pub create_tables: bool,
    /// Which reads also ask for the legacy `<bit>` marker columns (twice the
    /// columns): `auto` (dedupers not created by this Solus), `always`,
    /// `never`; a bool is read as before (`true` = `always`). Default `auto`.
    pub read_legacy_markers: LegacyMarkers,
    /// Most columns one read call asks of one shard row: each row is read
    /// for its own bits only (`getRowWithColumns`), and a row needing more
    /// columns than this is read in slices, in parallel, so every call stays
    /// small enough to answer within `read_timeout_ms` whatever the batch.
    /// Also bounds a call's (row, column) pairs when small requests share
    /// one `getRowsWithColumns` (see docs/hbase.md, "Reads"). Default 4,096.
    pub max_cells_per_read: u64,
    /// Largest Thrift request, in bytes (estimated from above for the binary
    /// protocol). HBase's framed server drops connections sending frames
    /// over `hbase.regionserver.thrift.framed.max_frame_size_in_mb` (2 MB by
    /// default); a bigger read or write is split into several calls.
    /// Default 1,048,576 (about 20,000 bit writes per call).
    pub max_request_bytes: u64,
    /// Close the cross-replica `AddIfAbsent` race with a guard cell per
    /// deduper whose slots claim shard rows, claimed with `checkAndPut`
    /// before the write and released after (one read and two `checkAndPut`s
    /// per round; a row another replica is writing is waited for and read
    /// again, `guard.rs`). Off, two replicas racing on
    /// one new entity can both answer "absent". Default true.
    pub add_if_absent_guard: bool,
    /// Largest tolerated offset of this replica's clock from HBase's, in ms,
    /// measured at start-up and on every health probe. Beyond it the replica
    /// reports `NOT_SERVING` and refuses writes until back within; TTLs
    /// shorter than twice this are refused (see docs/operations.md,
    /// "Clocks"). 0 measures without enforcing. At most
    /// [`MAX_CLOCK_OFFSET_MS`]. Default 500.
    pub max_clock_offset_ms: u64,
    /// Pooled connections older than this, in seconds, are closed and
    /// opened again (authenticating anew with Kerberos), so revoked
    /// credentials stop working within this bound; 0 = never. Default 3,600.
    pub max_connection_age_seconds: u64,
    /// Kerberos on the Thrift connections; off by default.
    pub kerberos: KerberosConfig,
}

/// A list, or one comma-separated string (environment variables are strings).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => s.split(',').map(|a| a.trim().to_string()).collect(),
        OneOrMany::Many(v) => v,
    })
}

impl Default for HbaseConfig {
    fn default() -> Self {
        HbaseConfig {
            addresses: vec!["127.0.0.1:9090".into()],
            transport: Transport::Buffered,
            protocol: Protocol::Binary,
            pool_size: 16,
            connect_timeout_ms: 1_000,
            read_timeout_ms: 5_000,
            write_timeout_ms: 5_000,
            retries: 2,
            retry_backoff_ms: 50,
            create_tables: true,
            read_legacy_markers: LegacyMarkers::Auto,
            max_cells_per_read: 4_096,
            max_request_bytes: 1 << 20,
            add_if_absent_guard: true,
            max_clock_offset_ms: 500,
            max_connection_age_seconds: 3_600,
            kerberos: KerberosConfig::default(),
        }
    }
}

/// Largest `max_clock_offset_ms` accepted, ms: twice it must stay within
/// the 60 s of clock slack of the delete markers (`lifecycle::DELETE_SLACK_MS`)
/// and of the remembered request and record cells' TTLs.
pub const MAX_CLOCK_OFFSET_MS: u64 = 30_000;

impl HbaseConfig {
    /// Checks the values make sense; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.addresses.is_empty() || self.addresses.iter().any(|a| a.trim().is_empty()) {
            return Err("storage.hbase.addresses must list at least one host:port".into());
        }
        if self.pool_size == 0 {
            return Err("storage.hbase.pool_size must be at least 1".into());
        }
        if self.connect_timeout_ms == 0 || self.read_timeout_ms == 0 || self.write_timeout_ms == 0 {
            return Err("storage.hbase connect/read/write timeouts must be at least 1 ms".into());
        }
        if self.max_cells_per_read == 0 {
            return Err("storage.hbase.max_cells_per_read must be at least 1".into());
        }
        if self.max_request_bytes < 4096 {
            return Err("storage.hbase.max_request_bytes must be at least 4096".into());
        }
        if self.max_clock_offset_ms > MAX_CLOCK_OFFSET_MS {
            return Err(format!(
                "storage.hbase.max_clock_offset_ms = {} is above {MAX_CLOCK_OFFSET_MS}: the delete markers and the \
                 remembered request and record cells keep 60 s of slack for replicas' clocks to differ (twice the \
                 bound), so a larger bound could hide new bits or forget a record early; fix the replicas' time \
                 synchronisation instead (0 measures without enforcing)",
                self.max_clock_offset_ms
            ));
        }
        let k = &self.kerberos;
        if k.enabled {
            if self.transport == Transport::Framed {
                return Err(
                    "storage.hbase.kerberos.enabled needs storage.hbase.transport = \"buffered\": \
                            HBase's Thrift server supports SASL on the buffered transport only (with framed \
                            and a qop it refuses to start)"
                        .into(),
                );
            }
            if k.service.trim().is_empty() {
                return Err("storage.hbase.kerberos.service must not be empty (HBase's is \"hbase\")".into());
            }
            if k.library.trim().is_empty() {
                return Err("storage.hbase.kerberos.library must not be empty (default libgssapi_krb5.so.2)".into());
            }
            if !k.keytab.is_empty() && !k.ticket_cache.is_empty() {
                return Err(
                    "storage.hbase.kerberos.keytab and ticket_cache are exclusive: with a keytab, tickets \
                            go to a private MEMORY: cache"
                        .into(),
                );
            }
            if !k.keytab.is_empty() {
                if let Err(e) = std::fs::File::open(&k.keytab) {
                    return Err(format!(
                        "storage.hbase.kerberos.keytab = {:?} cannot be read: {e}",
                        k.keytab
                    ));
                }
            }
            for (key, path) in [("krb5_config", &k.krb5_config)] {
                if !path.is_empty() && !std::path::Path::new(path).is_file() {
                    return Err(format!("storage.hbase.kerberos.{key} = {path:?} is not a file"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> HbaseConfig {
        config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    }

    #[test]
    fn addresses_from_a_list_or_a_comma_separated_string() {
        assert_eq!(parse("addresses = [\"a:1\", \"b:2\"]").addresses, ["a:1", "b:2"]);
        // What an environment variable gives.
        assert_eq!(parse("addresses = \"a:1, b:2\"").addresses, ["a:1", "b:2"]);
        let c = parse("transport = \"framed\"\nprotocol = \"compact\"");
        assert_eq!((c.transport, c.protocol), (Transport::Framed, Protocol::Compact));
        assert_eq!(c.addresses, ["127.0.0.1:9090"]);
    }

    #[test]
    fn nonsense_is_refused_with_the_key() {
        assert!(HbaseConfig::default().validate().is_ok());
        let bad = |f: fn(&mut HbaseConfig)| {
            let mut c = HbaseConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(bad(|c| c.addresses.clear()).contains("addresses"));
        assert!(bad(|c| c.pool_size = 0).contains("pool_size"));
        assert!(bad(|c| c.read_timeout_ms = 0).contains("timeouts"));
        assert!(bad(|c| c.max_request_bytes = 100).contains("max_request_bytes"));
        let clock = bad(|c| c.max_clock_offset_ms = 30_001);
        assert!(
            clock.contains("storage.hbase.max_clock_offset_ms = 30001 is above 30000"),
            "{clock}"
        );
        let edge = HbaseConfig {
            max_clock_offset_ms: MAX_CLOCK_OFFSET_MS,
            ..HbaseConfig::default()
        };
        assert!(edge.validate().is_ok());
        let framed = bad(|c| {
            c.kerberos.enabled = true;
            c.transport = Transport::Framed;
        });
        assert!(
            framed.contains("kerberos.enabled") && framed.contains("buffered transport only"),
            "{framed}"
        );
        let keytab = bad(|c| {
            c.kerberos.enabled = true;
            c.kerberos.keytab = "/nonexistent/solus.keytab".into();
        });
        assert!(
            keytab.contains("storage.hbase.kerberos.keytab") && keytab.contains("/nonexistent"),
            "{keytab}"
        );
        // Off, the Kerberos settings are not looked at.
        let mut off = HbaseConfig::default();
        off.kerberos.keytab = "/nonexistent/solus.keytab".into();
        off.transport = Transport::Framed;
        assert!(off.validate().is_ok());
    }

    #[test]
    fn kerberos_settings_parse_with_privacy_by_default() {
        let c = parse("[kerberos]\nenabled = true\nkeytab = \"/k\"\nmin_qop = \"integrity\"");
        assert!(c.kerberos.enabled);
        assert_eq!((c.kerberos.min_qop, c.kerberos.keytab.as_str()), (Qop::Integrity, "/k"));
        assert_eq!(HbaseConfig::default().kerberos.min_qop, Qop::Privacy);
        assert_eq!(HbaseConfig::default().kerberos.service, "hbase");
        assert!(Qop::Authentication < Qop::Integrity && Qop::Integrity < Qop::Privacy);
    }

    #[test]
    fn legacy_markers_from_a_word_or_the_older_bool() {
        assert_eq!(HbaseConfig::default().read_legacy_markers, LegacyMarkers::Auto);
        for (toml, want) in [
            ("read_legacy_markers = \"auto\"", LegacyMarkers::Auto),
            ("read_legacy_markers = \"always\"", LegacyMarkers::Always),
            ("read_legacy_markers = \"never\"", LegacyMarkers::Never),
            ("read_legacy_markers = true", LegacyMarkers::Always),
            ("read_legacy_markers = false", LegacyMarkers::Never),
            // What an environment variable gives.
            ("read_legacy_markers = \"false\"", LegacyMarkers::Never),
        ] {
            assert_eq!(parse(toml).read_legacy_markers, want, "{toml}");
        }
        let e = config::Config::builder()
            .add_source(config::File::from_str(
                "read_legacy_markers = \"sometimes\"",
                config::FileFormat::Toml,
            ))
            .build()
            .unwrap()
            .try_deserialize::<HbaseConfig>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("read_legacy_markers") && e.contains("sometimes"), "{e}");
    }
}
