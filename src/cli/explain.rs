//! `solus explain`: the contract applied to one entity, for operators reading
//! HBase by hand and for cross-checking other implementations.

use clap::Args;

use super::decode_hex;
use crate::contract::{MAX_BITS_PER_SHARD, MAX_HASH_FUNCTIONS, hashing, layout};

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The deduper's number of shards (`solus deduper get` shows it).
    #[arg(long)]
    pub shards: u32,
    /// k: bits set per entity (the deduper's hash_functions).
    #[arg(long)]
    pub hash_functions: u32,
    /// Bits in each shard (the deduper's bits_per_shard).
    #[arg(long)]
    pub bits_per_shard: u32,
    /// Client id that owns the deduper (part of the row key).
    #[arg(long)]
    pub client: String,
    /// Name of the deduper (part of the row key).
    #[arg(long)]
    pub deduper: String,
    /// The generation of a resized deduper (`solus deduper get` lists them,
    /// each with its own geometry): its bits are in the filter
    /// `<deduper>~g<N>` (0, the default: the deduper's own name).
    #[arg(long, default_value_t = 0)]
    pub generation: u32,
    /// ENTITY is hex-encoded bytes.
    #[arg(long)]
    pub hex: bool,
    /// The entity to place (text, or hex bytes with --hex).
    pub entity: String,
}

pub fn run(a: ExplainArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.shards >= 1, "--shards must be at least 1");
    anyhow::ensure!(
        (1..=MAX_HASH_FUNCTIONS).contains(&a.hash_functions),
        "--hash-functions must be 1 to {MAX_HASH_FUNCTIONS}"
    );
    anyhow::ensure!(
        (1..=MAX_BITS_PER_SHARD).contains(&a.bits_per_shard),
        "--bits-per-shard must be 1 to {MAX_BITS_PER_SHARD}"
    );
    // Explain is a calculator for reading HBase by hand, so it accepts any
    // ids, but says when the server would refuse the request.
    for (field, value) in [("client", &a.client), ("deduper", &a.deduper)] {
        if let Err(e) = crate::deduper::validate_name(field, value) {
            eprintln!("warning: the server would refuse this: {e}");
        }
    }
    let entity = if a.hex {
        decode_hex(&a.entity)?
    } else {
        a.entity.into_bytes()
    };
    if entity.is_empty() {
        eprintln!("warning: the server refuses empty entities");
    }
    let shard = hashing::shard_of(&entity, a.shards);
    let mut bits = vec![0u32; a.hash_functions as usize];
    hashing::bit_positions(&entity, a.bits_per_shard, &mut bits);
    let filter = crate::generations::physical_name(&a.deduper, a.generation);
    let row_key: String = layout::data_row_key(shard, &a.client, &filter)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let qualifiers: Vec<String> = bits.iter().map(|&b| layout::ttl_qualifier(b)).collect();
    let page_file = format!("filters/{}/{filter}.bits", a.client);
    let json = serde_json::json!({ "shard": shard, "row_key_hex": row_key, "bits": bits, "qualifiers": qualifiers,
        "generation": a.generation, "filter": filter, "embedded_page_file": page_file });
    outln!("{json}");
    Ok(())
}
