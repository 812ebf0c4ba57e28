//! `solus explain` against an independent implementation of the contract
//! (other Murmur3 and MD5 crates, the row-key rule re-derived from Java's
//! `Arrays.hashCode`) on hundreds of random entities and geometries.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The contract as written in `tests/data/test-vectors.json`, from scratch.
fn reference(entity: &[u8], shards: u32, k: usize, bps: u32, client: &str, deduper: &str) -> serde_json::Value {
    let h = murmur3::murmur3_x64_128(&mut &entity[..], 0).unwrap().to_le_bytes();
    let h1 = i64::from_le_bytes(h[..8].try_into().unwrap());
    let shard = h1.rem_euclid(i64::from(shards)) as u32;
    let mut bits = Vec::new();
    let mut salt = 0u8;
    while bits.len() < k {
        let mut input = vec![salt];
        input.extend_from_slice(entity);
        let d = md5_independent::compute(&input).0;
        for w in d.chunks(4) {
            if bits.len() < k {
                let v = i32::from_be_bytes(w.try_into().unwrap());
                bits.push((v % bps as i32).unsigned_abs());
            }
        }
        salt += 1;
    }
    let key = format!("{shard}|{client}|{deduper}");
    let mut hc: i32 = 1;
    for b in key.bytes() {
        hc = hc.wrapping_mul(31).wrapping_add(b as i8 as i32);
    }
    let prefix = (hc.wrapping_abs() % 256) as u8;
    let row_key_hex: String = std::iter::once(prefix)
        .chain(key.bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    let qualifiers: Vec<String> = bits.iter().map(|b| format!("{b}#ttl")).collect();
    serde_json::json!({ "shard": shard, "row_key_hex": row_key_hex, "bits": bits, "qualifiers": qualifiers })
}

#[test]
fn the_independent_implementation_agrees_with_the_shared_vectors() {
    // Guard: the independent implementation must itself match the vectors.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/test-vectors.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in v["cases"].as_array().unwrap() {
        let hex = case["entity_hex"].as_str().unwrap();
        let entity: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let got = reference(
            &entity,
            case["shards"].as_u64().unwrap() as u32,
            case["hash_functions"].as_u64().unwrap() as usize,
            case["bits_per_shard"].as_u64().unwrap() as u32,
            case["client_id"].as_str().unwrap(),
            case["deduper"].as_str().unwrap(),
        );
        assert_eq!(got["shard"], case["shard"]);
        assert_eq!(got["bits"], case["bits"]);
        assert_eq!(got["row_key_hex"], case["row_key_hex"]);
    }
}

#[test]
fn explain_matches_the_independent_implementation_on_random_cases() {
    let mut rng = StdRng::seed_from_u64(20261130);
    let clients = ["client-a", "c", "tenant_42", "x.y-z"];
    for i in 0..300 {
        let len = if i % 10 == 0 {
            rng.random_range(0..2000)
        } else {
            rng.random_range(0..64)
        };
        let entity: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let shards = if i % 3 == 0 {
            rng.random_range(1..=65_536)
        } else {
            rng.random_range(1..=100)
        };
        let k = rng.random_range(1..=64usize);
        let bps = match i % 4 {
            0 => i32::MAX as u32,
            1 => rng.random_range(1..=100),
            _ => rng.random_range(1..=i32::MAX as u32),
        };
        let client = clients[i % clients.len()];
        let deduper = format!("d{}", rng.random_range(0..1000));
        let expected = reference(&entity, shards, k, bps, client, &deduper);

        let hex: String = entity.iter().map(|b| format!("{b:02x}")).collect();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_solus"));
        cmd.args([
            "explain",
            "--hex",
            "--shards",
            &shards.to_string(),
            "--hash-functions",
            &k.to_string(),
        ])
        .args([
            "--bits-per-shard",
            &bps.to_string(),
            "--client",
            client,
            "--deduper",
            &deduper,
            "--",
            &hex,
        ]);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // Where generation 0's bits are: the deduper's own filter.
        let page_file = format!("filters/{client}/{deduper}.bits");
        let o = got.as_object_mut().unwrap();
        assert_eq!(o.remove("generation"), Some(serde_json::json!(0)));
        assert_eq!(o.remove("filter"), Some(serde_json::json!(deduper)));
        assert_eq!(o.remove("embedded_page_file"), Some(serde_json::json!(page_file)));
        assert_eq!(
            got, expected,
            "case {i}: entity {hex}, shards {shards}, k {k}, bits_per_shard {bps}"
        );
    }
}
