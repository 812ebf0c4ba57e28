//! Concurrent `AddIfAbsent`s of one replica (found measuring issue 20 on
//! real HBase): four clients each sending 1,000-entity batches of new
//! entities into a fresh 10-shard deduper got 75% of them answered
//! "present". Every batch touches every shard row, so all but one of the
//! concurrent requests lost the guard's `checkAndPut` on some row and took
//! that row's bits as set: new events dropped as duplicates. Guarded
//! requests of one process now hold their rows through the round, and the
//! same race across replicas (two replicas, same workload: 8,000 of 16,000
//! answered "present") is closed by claiming rows before writing
//! (`src/storage/hbase/guard.rs`).

use crate::common::*;

/// 4 concurrent clients x 6 batches of 1,000 new entities, n = 10^6,
/// p = 0.01: the expected false positives among 24,000 new entities at
/// this fill are well under 1, so more than 10 "present" answers is a
/// defect, not chance.
pub async fn concurrent_add_if_absent_of_new_entities_answers_absent(b: &TestBackend) {
    let s = std::sync::Arc::new(TestServer::start_with(b.settings.clone()).await);
    let present = new_entities_answered_present(&[s], "conc", 6).await;
    assert!(present <= 10, "{present} of 24,000 new entities answered present");
}

/// "Present" answers when 4 clients, client w through `servers[w % len]`,
/// each AddIfAbsent `rounds` batches of 1,000 distinct new entities into a
/// fresh deduper `deduper` (n = 10^6, p = 0.01, 10 shards) at once.
async fn new_entities_answered_present(servers: &[std::sync::Arc<TestServer>], deduper: &str, rounds: usize) -> usize {
    servers[0]
        .admin()
        .create_deduper(create_np("c", deduper, 1_000_000, 0.01, 3600))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|w| {
            let s = servers[w % servers.len()].clone();
            let deduper = deduper.to_string();
            tokio::spawn(async move {
                let mut present = 0;
                for r in 0..rounds {
                    let items: Vec<String> = (0..1_000).map(|i| format!("{deduper}-{w}-{r}-{i}")).collect();
                    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
                    present += add_if_absent(&s, "c", &deduper, &refs, 0)
                        .await
                        .iter()
                        .filter(|a| !**a)
                        .count();
                }
                present
            })
        })
        .collect();
    let mut present = 0;
    for t in tasks {
        present += t.await.unwrap();
    }
    present
}

/// Concurrent guarded `AddIfAbsent`s of one process are served in rounds
/// (`src/storage/hbase/combine.rs`): one read of the union of the waiting
/// requests' bits, then their writes. Six clients send the same 4 batches of
/// 500 entities at once, each in its own order, so one round holds the same
/// entity in several requests; each entity must be answered "absent" exactly
/// once across all clients, as if the requests had run one after another.
/// Entities of two requests in one round both answered "absent" would be a
/// duplicate let through; none answered "absent" a new event dropped.
pub async fn requests_served_together_answer_each_entity_absent_once(b: &TestBackend) {
    let s = TestServer::start_with(b.settings.clone()).await;
    s.admin()
        .create_deduper(create_np("c", "rounds", 1_000_000, 0.01, 3600))
        .await
        .unwrap();
    let s = std::sync::Arc::new(s);
    let batches: Vec<Vec<String>> = (0..4)
        .map(|r| (0..500).map(|i| format!("round-{r}-{i}")).collect())
        .collect();
    let tasks: Vec<_> = (0..6usize)
        .map(|w| {
            let (s, batches) = (s.clone(), batches.clone());
            tokio::spawn(async move {
                let mut absent = Vec::new();
                // Client w starts at batch w % 4, so the clients overlap in every order.
                for r in 0..4 {
                    let items = &batches[(w + r) % 4];
                    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
                    let answer = add_if_absent(&s, "c", "rounds", &refs, 0).await;
                    absent.extend(items.iter().zip(answer).filter(|(_, a)| *a).map(|(e, _)| e.clone()));
                }
                absent
            })
        })
        .collect();
    let mut times: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for t in tasks {
        for e in t.await.unwrap() {
            *times.entry(e).or_default() += 1;
        }
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "answered absent more than once: {twice:?}");
    // At this fill the expected false positives among 2,000 new entities are far below 1.
    assert!(
        times.len() >= 1_995,
        "only {} of 2,000 new entities answered absent once",
        times.len()
    );
}

/// Two replicas on one HBase, each with two clients sending 1,000-entity
/// batches of new entities (disjoint: no entity is sent twice) into one
/// fresh 10-shard deduper at once. Every batch touches every shard row, so
/// the replicas' guarded `AddIfAbsent`s race on every row; a request that
/// loses a row must still answer its new entities "absent" (found reviewing
/// the guard: the loser used to take the whole row as set, dropping new
/// events in bulk). n = 10^6, p = 0.01: the expected false positives among
/// 16,000 new entities at this fill are well under 1.
pub async fn replicas_racing_on_rows_answer_new_entities_absent(b: &TestBackend) {
    let replicas = [
        std::sync::Arc::new(TestServer::start_with(b.settings.clone()).await),
        std::sync::Arc::new(TestServer::start_with(b.settings.clone()).await),
    ];
    let present = new_entities_answered_present(&replicas, "xrace", 4).await;
    assert!(present <= 10, "{present} of 16,000 new entities answered present");
}

/// A replica that dies between claiming a shard row and releasing it leaves
/// the row's slot held in the deduper's guard cell (written here straight
/// through Thrift: format byte 0x02, then the slot: shard as big-endian
/// u32, 1 for held, a 12-byte token). The other replicas wait for it, take
/// it over once the same held token has been seen for the lease (10 s),
/// and answer from what the row holds; the row is free again afterwards.
pub async fn a_claim_left_by_a_dead_replica_is_taken_over_after_the_lease(b: &TestBackend) {
    use hbase_thrift::hbase::{BatchMutation, Mutation, THbaseSyncClient};
    let s = TestServer::start_with(b.settings.clone()).await;
    let shards = s
        .admin()
        .create_deduper(create_np("c", "dead", 100_000, 0.01, 3600))
        .await
        .unwrap()
        .into_inner()
        .shards;
    assert_eq!(add(&s, "c", "dead", &["old"], 0).await, 1);
    let shard = solus::contract::hashing::shard_of(b"new", shards);
    let key = solus::contract::layout::guard_row_key("c", "dead");
    let column = b"S:solus#guard".to_vec();
    let mut claim = vec![0x02u8];
    claim.extend_from_slice(&shard.to_be_bytes());
    claim.push(1);
    claim.extend_from_slice(&[7; 12]);
    let mut raw = b.raw_thrift();
    raw.mutate_rows(
        "solus_deduper".into(),
        vec![BatchMutation::new(
            key.clone(),
            vec![Mutation::new(false, column.clone(), claim.clone(), true)],
        )],
        Default::default(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(add_if_absent(&s, "c", "dead", &["new", "old"], 0).await, [true, false]);
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(10),
        "taken over after {took:?}, before the 10 s lease"
    );
    assert!(took < std::time::Duration::from_secs(25), "took {took:?}");
    let guard = super::row(&mut raw, "solus_deduper", &key)[&column]
        .value
        .clone()
        .unwrap();
    // The slot of `new`'s shard: released (0) under the taker's token.
    let slot = (1..guard.len())
        .step_by(17)
        .map(|at| &guard[at..at + 17])
        .find(|slot| slot[..4] == shard.to_be_bytes())
        .expect("the taken-over slot");
    assert_eq!(slot[4], 0, "released");
    assert_ne!(&slot[5..], &[7; 12], "under the taker's token");
    // The row answers at once again.
    let started = std::time::Instant::now();
    assert_eq!(
        add_if_absent(&s, "c", "dead", &["new", "newer"], 0).await,
        [false, true]
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Concurrent `CheckAbsence`s of one deduper each get exactly their own
/// answers (a guard for any sharing of reads between requests). Four clients check 1,000-entity batches, each half
/// added before (a different half per client), at once, 5 times over:
/// every added entity "present" (no false negative), and at this fill
/// (12,000 added, n = 10^6, p = 0.01) at most a handful of false positives
/// among the 10,000 answers for entities never added.
pub async fn concurrent_checks_each_get_their_own_answers(b: &TestBackend) {
    let s = std::sync::Arc::new(TestServer::start_with(b.settings.clone()).await);
    s.admin()
        .create_deduper(create_np("c", "reads", 1_000_000, 0.01, 3600))
        .await
        .unwrap();
    let batch = |w: usize, r: usize| -> Vec<String> { (0..1_000).map(|i| format!("reads-{w}-{r}-{i}")).collect() };
    for w in 0..4 {
        for r in 0..5 {
            let items = batch(w, r);
            // Client w's added half: even entities for even w, odd for odd w.
            let added: Vec<&str> = items.iter().skip(w % 2).step_by(2).map(String::as_str).collect();
            assert_eq!(add(&s, "c", "reads", &added, 0).await, 500);
        }
    }
    let tasks: Vec<_> = (0..4)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let (mut false_negatives, mut false_positives) = (0, 0);
                for r in 0..5 {
                    let items = batch(w, r);
                    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
                    for (i, is_absent) in absent(&s, "c", "reads", &refs).await.into_iter().enumerate() {
                        let was_added = i % 2 == w % 2;
                        false_negatives += usize::from(was_added && is_absent);
                        false_positives += usize::from(!was_added && !is_absent);
                    }
                }
                (false_negatives, false_positives)
            })
        })
        .collect();
    let (mut fneg, mut fpos) = (0, 0);
    for t in tasks {
        let (n, p) = t.await.unwrap();
        fneg += n;
        fpos += p;
    }
    assert_eq!(fneg, 0, "false negatives");
    assert!(fpos <= 10, "{fpos} of 10,000 never-added entities answered present");
}
