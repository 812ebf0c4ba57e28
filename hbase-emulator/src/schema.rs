//! Table names and column-family descriptors, validated as HBase's
//! `ThriftUtilities.colDescFromThrift` and the master's sanity checks do.

use hbase_thrift::hbase::ColumnDescriptor;

use crate::column::ColumnName;
use crate::error::{HError, HResult};

/// HBase's `HConstants.FOREVER`: the TTL a family reports when it has none.
const FOREVER_SECS: i32 = i32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gz,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// HBase looks the algorithm up by its lower-case name.
    fn parse(name: &str) -> HResult<Self> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "gz" => Ok(Self::Gz),
            "snappy" => Ok(Self::Snappy),
            "lz4" => Ok(Self::Lz4),
            "zstd" => Ok(Self::Zstd),
            // Known to HBase, but the codec is usually not installed: the
            // master's compression sanity check fails the create.
            known @ ("lzo" | "bzip2" | "lzma" | "brotli") => Err(HError::io(format!(
                "org.apache.hadoop.hbase.DoNotRetryIOException: Compression algorithm \
                 '{known}' previously failed test (not available in hbase-emulator)"
            ))),
            _ => Err(HError::illegal(format!(
                "java.lang.IllegalArgumentException: Unsupported compression algorithm name: {name}"
            ))),
        }
    }

    /// `Compression.Algorithm.toString()`: the enum constant name.
    fn name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::Gz => "GZ",
            Self::Snappy => "SNAPPY",
            Self::Lz4 => "LZ4",
            Self::Zstd => "ZSTD",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BloomType {
    None,
    Row,
    RowCol,
}

impl BloomType {
    /// `BloomType.valueOf`: exact, case-sensitive constant names.
    fn parse(name: &str) -> HResult<Self> {
        match name {
            "NONE" => Ok(Self::None),
            "ROW" => Ok(Self::Row),
            "ROWCOL" => Ok(Self::RowCol),
            "ROWPREFIX_FIXED_LENGTH" => Err(HError::io(
                "org.apache.hadoop.hbase.DoNotRetryIOException: ROWPREFIX_FIXED_LENGTH \
                 bloom filters need a prefix length, which Thrift1 cannot set",
            )),
            _ => Err(HError::illegal(format!(
                "java.lang.IllegalArgumentException: No enum constant \
                 org.apache.hadoop.hbase.regionserver.BloomType.{name}"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::Row => "ROW",
            Self::RowCol => "ROWCOL",
        }
    }
}

/// One column family's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FamilySchema {
    pub name: Vec<u8>,
    pub max_versions: usize,
    compression: Compression,
    bloom: BloomType,
    in_memory: bool,
    block_cache: bool,
    ttl_secs: i32,
}

impl FamilySchema {
    /// Validates a descriptor in the order the Java code does.
    pub fn from_thrift(cd: &ColumnDescriptor) -> HResult<Self> {
        let compression = Compression::parse(cd.compression.as_deref().unwrap_or(""))?;
        let bloom = BloomType::parse(cd.bloom_filter_type.as_deref().unwrap_or(""))?;
        let raw_name = cd.name.as_deref().unwrap_or_default();
        if raw_name.is_empty() {
            return Err(HError::illegal("column name is empty"));
        }
        // The name conventionally ends in ':'; only the part before it counts.
        let name = ColumnName::parse(raw_name).family().to_vec();
        check_family_name(&name)?;
        let max_versions = cd.max_versions.unwrap_or(0);
        if max_versions <= 0 {
            return Err(HError::illegal(
                "java.lang.IllegalArgumentException: Maximum versions must be positive",
            ));
        }
        let ttl = cd.time_to_live.unwrap_or(0);
        Ok(Self {
            name,
            max_versions: usize::try_from(max_versions).unwrap_or(usize::MAX),
            compression,
            bloom,
            in_memory: cd.in_memory.unwrap_or(false),
            block_cache: cd.block_cache_enabled.unwrap_or(false),
            // colDescFromThrift: a TTL <= 0 means "forever".
            ttl_secs: if ttl > 0 { ttl } else { FOREVER_SECS },
        })
    }

    /// `ThriftUtilities.colDescFromHbase`: the name gets a trailing `:`, the
    /// bloom vector fields keep their IDL defaults (0).
    pub fn to_thrift(&self) -> ColumnDescriptor {
        let mut name = self.name.clone();
        name.push(b':');
        ColumnDescriptor::new(
            name,
            i32::try_from(self.max_versions).unwrap_or(i32::MAX),
            self.compression.name().to_owned(),
            self.in_memory,
            self.bloom.name().to_owned(),
            0,
            0,
            self.block_cache,
            self.ttl_secs,
        )
    }

    /// Family TTL in milliseconds, `None` for forever.
    pub fn ttl_ms(&self) -> Option<i64> {
        (self.ttl_secs != FOREVER_SECS).then(|| i64::from(self.ttl_secs) * 1000)
    }
}

/// `ColumnFamilyDescriptorBuilder.isLegalColumnFamilyName`.
fn check_family_name(name: &[u8]) -> HResult<()> {
    let bad = |why: &str| {
        Err(HError::illegal(format!(
            "java.lang.IllegalArgumentException: Column Family {} {why}",
            String::from_utf8_lossy(name)
        )))
    };
    if name.is_empty() {
        return bad("name can not be empty");
    }
    if name[0] == b'.' {
        return bad("names cannot start with a period");
    }
    if name
        .iter()
        .any(|&b| b < 0x20 || b == 0x7f || matches!(b, b':' | b'\\' | b'/'))
    {
        return bad("contains illegal characters");
    }
    if name == b"recovered.edits" {
        return bad("name cannot be recovered.edits");
    }
    Ok(())
}

/// Normalises a table name (`default:t` is `t`) and checks it the way
/// `TableName.valueOf` does. Only the `default` namespace exists here. The
/// Java handler calls `valueOf` outside its `try`, so a bad name escapes as a
/// runtime exception (an internal-error application exception).
pub(crate) fn table_name(raw: &[u8]) -> HResult<Vec<u8>> {
    let invalid = |why: &str| {
        Err(HError::internal(format!(
            "java.lang.IllegalArgumentException: Illegal table name '{}': {why}",
            String::from_utf8_lossy(raw)
        )))
    };
    let qualifier = match raw.iter().position(|&b| b == b':') {
        None => raw,
        Some(i) if &raw[..i] == b"default" => &raw[i + 1..],
        Some(i) => {
            return Err(HError::io(format!(
                "org.apache.hadoop.hbase.NamespaceNotFoundException: {}",
                String::from_utf8_lossy(&raw[..i])
            )));
        }
    };
    if qualifier.is_empty() {
        return invalid("empty qualifier");
    }
    if matches!(qualifier[0], b'.' | b'-') {
        return invalid("illegal first character");
    }
    if !qualifier
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return invalid("only [a-zA-Z_0-9-.] are allowed");
    }
    Ok(qualifier.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cd(name: &str, versions: i32, compression: &str, bloom: &str) -> ColumnDescriptor {
        ColumnDescriptor::new(
            name.as_bytes().to_vec(),
            versions,
            compression.to_owned(),
            false,
            bloom.to_owned(),
            0,
            0,
            true,
            0,
        )
    }

    #[test]
    fn validates_descriptors() {
        let ok = FamilySchema::from_thrift(&cd("cf:", 3, "snappy", "ROW")).unwrap();
        assert_eq!(ok.name, b"cf");
        assert_eq!(ok.ttl_ms(), None);
        let back = ok.to_thrift();
        assert_eq!(back.name.as_deref(), Some(&b"cf:"[..]));
        assert_eq!(back.compression.as_deref(), Some("SNAPPY"));
        assert_eq!(back.time_to_live, Some(i32::MAX));
        let illegal = |d| matches!(FamilySchema::from_thrift(&d), Err(HError::IllegalArgument(_)));
        assert!(illegal(ColumnDescriptor::default()));
        assert!(illegal(cd("cf", 0, "NONE", "NONE")));
        assert!(illegal(cd("cf", 1, "FOO", "NONE")));
        assert!(illegal(cd("cf", 1, "NONE", "row")));
        assert!(illegal(cd(":", 1, "NONE", "NONE")));
    }

    #[test]
    fn table_names() {
        assert_eq!(table_name(b"default:t1").unwrap(), b"t1");
        assert!(table_name(b"-x").is_err());
        assert!(matches!(table_name(b"ns:t"), Err(HError::Io { .. })));
    }
}
