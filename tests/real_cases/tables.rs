//! `deploy/hbase/create-tables.hbase`, run by HBase's own shell, makes the
//! tables Solus accepts with `storage.hbase.create_tables = false`.

use hbase_thrift::hbase::THbaseSyncClient;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_tables_script_makes_the_tables_solus_accepts() {
    let Some(mut b) = TestBackend::real_hbase() else { return };
    let (real, _) = b.real.clone().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/hbase/create-tables.hbase");
    // A table name of its own: nothing else in these tests creates it.
    let env = [
        ("SOLUS_TABLE", "script_deduper"),
        ("SOLUS_FARM", "dc1"),
        ("SOLUS_CLIENTS", "shop"),
    ];
    let out = real.script("shell", &["-n", script], &env);
    assert!(out.contains("created: script_deduper (256 regions)"), "{out}");

    let mut raw = b.raw_thrift();
    for table in ["script_deduper", "script_deduper_dc1", "shop_dedupers"] {
        let regions = raw.get_table_regions(table.into()).unwrap();
        assert_eq!(regions.len(), 256, "{table}: one region per hash-prefix value");
    }
    let data = raw.get_column_descriptors("script_deduper".into()).unwrap();
    let s = &data[b"S:".as_slice()];
    assert_eq!(
        (s.max_versions, s.compression.as_deref(), s.bloom_filter_type.as_deref()),
        (Some(1), Some("GZ"), Some("ROWCOL"))
    );
    let meta = raw.get_column_descriptors("shop_dedupers".into()).unwrap();
    let c = &meta[b"C:".as_slice()];
    assert_eq!((c.max_versions, c.in_memory), (Some(1), Some(true)));

    // A second run leaves them as they are.
    let again = real.script("shell", &["-n", script], &env);
    assert!(again.contains("exists, left as is: script_deduper"), "{again}");

    b.settings.storage.table = "script_deduper".into();
    b.settings.storage.hbase.create_tables = false;
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("shop", "orders", 100_000, 0.01, 3600))
        .await
        .expect("CreateDeduper on the script's tables");
    assert_eq!(add(&s, "shop", "orders", &["o-1", "o-2"], 0).await, 2);
    assert_eq!(absent(&s, "shop", "orders", &["o-1", "o-3"]).await, [false, true]);
    let mut dc = create_geom("shop", "clicks", 3, 4, 1000, 60);
    dc.level = solus::api::pb::Level::Dc as i32;
    s.admin().create_deduper(dc).await.expect("a DC-level deduper");
    assert_eq!(add_if_absent(&s, "shop", "clicks", &["c-1"], 0).await, [true]);

    // A client the script did not cover: refused, naming the table and the setting.
    let err = s
        .admin()
        .create_deduper(create_np("other", "x", 1000, 0.01, 60))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("other_dedupers") && err.message().contains("create_tables"),
        "{err:?}"
    );
    assert!(raw.get_table_names().unwrap().iter().all(|t| t != b"other_dedupers"));
}
