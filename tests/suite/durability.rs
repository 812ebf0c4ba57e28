//! Acknowledged writes survive a restart of the server.

use crate::common::*;

pub async fn restart_keeps_data(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 100_000, 0.001, 3600))
        .await
        .unwrap();
    let items: Vec<String> = (0..5000).map(|i| format!("item-{i}")).collect();
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    add(&s, "c", "d", &refs, 0).await;
    s.stop().await;

    let s = TestServer::start(b).await;
    assert!(
        absent(&s, "c", "d", &refs).await.iter().all(|a| !a),
        "every added entity is present after restart"
    );
    assert_eq!(absent(&s, "c", "d", &["never-added"]).await, [true]);
    // Configs survive too, and the geometry is unchanged.
    let d = s
        .admin()
        .get_deduper(solus::api::pb::GetDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
        })
        .await;
    assert_eq!(d.unwrap().into_inner().hash_functions, 10);
    // Writes after a restart land as well, and survive the next one.
    add(&s, "c", "d", &["after-restart"], 0).await;
    s.stop().await;
    let s = TestServer::start(b).await;
    assert_eq!(absent(&s, "c", "d", &["after-restart", "item-0"]).await, [false, false]);
}
