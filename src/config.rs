//! Layered settings: built-in defaults < optional TOML file < environment
//! variables `SOLUS__<SECTION>__<KEY>` (e.g. `SOLUS__SERVER__LISTEN`).

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use crate::deduper::SizeLimits;
use crate::engine::Limits;
use crate::storage::embedded::EmbeddedConfig;
use crate::storage::hbase::HbaseConfig;

/// All settings; every field has a default, so no file is needed.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub limits: LimitsConfig,
    /// This datacenter's name: DC-level dedupers use the `<table>_<farm>` data
    /// table on HBase. Default `dc1`.
    pub farm: String,
    pub log: LogConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// gRPC listen address. Default `127.0.0.1:50051`.
    pub listen: SocketAddr,
    /// How often storage reachability is probed for health, in ms. Default 2,000.
    pub health_check_interval_ms: u64,
    /// Longest time any request may take, in ms, when the client sets no
    /// shorter deadline; past it the answer is `DEADLINE_EXCEEDED`. Default 30,000.
    pub request_timeout_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: ([127, 0, 0, 1], 50051).into(),
            health_check_interval_ms: 2_000,
            request_timeout_ms: 30_000,
        }
    }
}

/// Which storage backend serves the data.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// In-process, persistent, nothing to install (default).
    #[default]
    Embedded,
    /// Apache HBase through its Thrift1 server (`storage.hbase`).
    Hbase,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub backend: Backend,
    /// Data table name for global dedupers (HBase). Default `solus_deduper`.
    pub table: String,
    pub embedded: EmbeddedConfig,
    pub hbase: HbaseConfig,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: Backend::Embedded,
            table: "solus_deduper".into(),
            embedded: EmbeddedConfig::default(),
            hbase: HbaseConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most entities in one data request. Default 10,000.
    pub max_entities_per_request: usize,
    /// Largest entity, in bytes. Default 4,096.
    pub max_entity_bytes: usize,
    /// Largest decoded gRPC message, in bytes. Default 16 MiB.
    pub max_message_bytes: usize,
    /// Most shards a deduper may have. Default 65,536.
    pub max_shards: u32,
    /// Largest shard chosen when sizing from n and p, in bits. Default 1,048,576.
    pub max_bits_per_shard: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_entities_per_request: 10_000,
            max_entity_bytes: 4096,
            max_message_bytes: 16 << 20,
            max_shards: 65_536,
            max_bits_per_shard: 1 << 20,
        }
    }
}

impl LimitsConfig {
    pub fn engine_limits(&self) -> Limits {
        Limits {
            max_entities_per_request: self.max_entities_per_request,
            max_entity_bytes: self.max_entity_bytes,
            sizes: SizeLimits {
                max_bits_per_shard: self.max_bits_per_shard,
                max_shards: self.max_shards,
            },
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter, e.g. `info` or `solus=debug`. `RUST_LOG` wins when set. Default `info`.
    pub level: String,
    /// One JSON object per line instead of text. Default false.
    pub json: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            json: false,
        }
    }
}

impl Settings {
    /// Defaults, then `file` when given, then `SOLUS__*` environment variables.
    /// Errors name the file or key that could not be read.
    pub fn load(file: Option<&Path>) -> Result<Settings, config::ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(f) = file {
            builder = builder.add_source(config::File::from(f).format(config::FileFormat::Toml).required(true));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("SOLUS")
                .separator("__")
                .try_parsing(true),
        );
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), config::ConfigError> {
        let bad = |m: String| Err(config::ConfigError::Message(m));
        let l = &self.limits;
        if l.max_bits_per_shard == 0 || l.max_bits_per_shard > crate::contract::MAX_BITS_PER_SHARD {
            return bad(format!(
                "limits.max_bits_per_shard must be 1 to 2147483647, got {}",
                l.max_bits_per_shard
            ));
        }
        if l.max_shards == 0 {
            return bad("limits.max_shards must be at least 1".into());
        }
        if l.max_entities_per_request == 0 || l.max_entity_bytes == 0 || l.max_message_bytes < 1024 {
            return bad(
                "limits.max_entities_per_request and max_entity_bytes must be > 0, max_message_bytes >= 1024".into(),
            );
        }
        if self.farm.is_empty() {
            return bad("farm must not be empty".into());
        }
        if self.storage.backend == Backend::Hbase {
            self.storage.hbase.validate().or_else(bad)?;
        }
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            limits: LimitsConfig::default(),
            farm: "dc1".into(),
            log: LogConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_file() {
        let s = Settings::load(None).unwrap();
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(s.storage.backend, Backend::Embedded);
        assert_eq!(s.storage.table, "solus_deduper");
        assert_eq!(s.farm, "dc1");
        assert_eq!(s.limits.max_entities_per_request, 10_000);
        assert_eq!(s.limits.max_entity_bytes, 4096);
    }

    #[test]
    fn example_file_matches_the_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/solus.toml"));
        let s = Settings::load(Some(path)).unwrap();
        assert_eq!(format!("{s:?}"), format!("{:?}", Settings::default()));
    }

    #[test]
    fn file_then_environment_override() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(&file, "farm = \"eu\"\n[limits]\nmax_shards = 10\n[storage.embedded]\nfsync = true\n").unwrap();
        let mut env = std::collections::HashMap::new();
        env.insert("SOLUS__LIMITS__MAX_SHARDS".to_string(), "20".to_string());
        env.insert("SOLUS__SERVER__LISTEN".to_string(), "0.0.0.0:1234".to_string());
        let s: Settings = config::Config::builder()
            .add_source(config::File::from(file.as_path()))
            .add_source(
                config::Environment::with_prefix("SOLUS").separator("__").try_parsing(true).source(Some(env)),
            )
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        assert_eq!((s.farm.as_str(), s.limits.max_shards), ("eu", 20));
        assert!(s.storage.embedded.fsync);
        assert_eq!(s.server.listen.to_string(), "0.0.0.0:1234");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(&file, "[server]\nlisten_addr = \"x\"\n").unwrap();
        let e = Settings::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("listen_addr"), "{e}");
        std::fs::write(&file, "[limits]\nmax_bits_per_shard = 0\n").unwrap();
        let e = Settings::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("max_bits_per_shard"), "{e}");
    }
}
