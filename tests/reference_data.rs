//! The reference data the tests need travels with the repository
//! (`tests/data/`); the copy must not drift from the original in `../shared/`.

mod common;

/// `tests/data/test-vectors.json` is byte-for-byte `../shared/test-vectors.json`
/// (when the clone has `../shared` beside it; otherwise says it skipped).
#[test]
fn in_repo_test_vectors_equal_the_shared_original() {
    let ours = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/test-vectors.json");
    let original = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/test-vectors.json");
    let ours = std::fs::read(ours).unwrap_or_else(|e| panic!("reading {ours}: {e}"));
    match std::fs::read(original) {
        Ok(shared) => assert!(
            ours == shared,
            "tests/data/test-vectors.json differs from {original}: copy the original over it"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var_os("SOLUS_REQUIRE_SHARED_DATA").is_some_and(|v| v == "1") {
                panic!("{original} is missing and SOLUS_REQUIRE_SHARED_DATA=1");
            }
            common::skipped(
                "in_repo_test_vectors_equal_the_shared_original",
                &format!("{original} is absent"),
            );
        }
        Err(e) => panic!("reading {original}: {e}"),
    }
    let v: serde_json::Value = serde_json::from_slice(&ours).expect("valid JSON");
    assert!(!v["cases"].as_array().expect("cases").is_empty());
}
