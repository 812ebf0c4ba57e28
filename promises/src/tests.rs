use super::*;

const S: Settings = Settings {
    clock_bound_ms: 0,
    answer_slack_ms: 10,
    stamp_rounding_ms: 0,
    record_window_ms: 1000,
    request_window_ms: 500,
};

fn op(id: u64, kind: Kind, entities: &[&str], at: (i64, i64), outcome: Outcome) -> Op {
    Op {
        id,
        process: 0,
        kind,
        deduper: "c/d".into(),
        entities: entities.iter().map(|e| e.as_bytes().to_vec()).collect(),
        record_ids: Vec::new(),
        request_id: None,
        ttl_ms: if kind.writes() { 100 } else { 0 },
        invoke_ms: at.0,
        complete_ms: at.1,
        outcome,
    }
}

fn ok(absent: &[bool]) -> Outcome {
    Outcome::Ok {
        absent: absent.to_vec(),
    }
}

fn with_records(mut o: Op, ids: &[&str]) -> Op {
    o.record_ids = ids.iter().map(|r| r.as_bytes().to_vec()).collect();
    o
}

fn with_request(mut o: Op, id: &str) -> Op {
    o.request_id = Some(id.as_bytes().to_vec());
    o
}

fn names(r: &Report) -> Vec<&'static str> {
    r.violations.iter().map(Violation::name).collect()
}

#[test]
fn a_read_inside_a_writes_live_window_must_answer_present() {
    let add = op(1, Kind::Add, &["e"], (0, 5), ok(&[]));
    // Live until 5 + 100 - 10 = 95.
    let late_absent = op(2, Kind::CheckAbsence, &["e"], (10, 94), ok(&[true]));
    let r = check(&[add.clone(), late_absent], &S);
    assert_eq!(names(&r), ["false negative"], "{r}");
    assert_eq!(
        r.violations[0],
        Violation::FalseNegative {
            write: At { op: 1, entity: 0 },
            read: At { op: 2, entity: 0 },
            entity: "e".into()
        }
    );
    // Completed past the window, or invoked before the ack: no promise.
    for read in [
        op(2, Kind::CheckAbsence, &["e"], (10, 95), ok(&[true])),
        op(2, Kind::AddIfAbsent, &["e"], (4, 20), ok(&[true])),
    ] {
        let r = check(&[add.clone(), read], &S);
        assert!(r.violations.is_empty(), "{r}");
    }
    // A failed write demands nothing.
    let failed = op(1, Kind::Add, &["e"], (0, 5), Outcome::Unknown);
    let read = op(2, Kind::CheckAbsence, &["e"], (10, 20), ok(&[true]));
    assert!(check(&[failed, read], &S).violations.is_empty());
}

#[test]
fn two_absents_of_one_entity_in_each_others_window_are_a_duplicate() {
    let a = op(1, Kind::AddIfAbsent, &["e"], (0, 5), ok(&[true]));
    let b = op(2, Kind::AddIfAbsent, &["e"], (3, 8), ok(&[true]));
    assert_eq!(names(&check(&[a.clone(), b.clone()], &S)), ["new twice"]);
    // In one request, with or without a request id or distinct record ids.
    let one = op(3, Kind::AddIfAbsent, &["e", "e"], (0, 5), ok(&[true, true]));
    assert_eq!(names(&check(std::slice::from_ref(&one), &S)), ["new twice"]);
    let one_req = with_request(one.clone(), "q");
    assert_eq!(names(&check(&[one_req], &S)), ["new twice"]);
    let two_records = with_records(one.clone(), &["r1", "r2"]);
    assert_eq!(names(&check(&[two_records], &S)), ["new twice"]);
    // One record twice is one new.
    let one_record = with_records(one, &["r", "r"]);
    assert!(check(&[one_record], &S).violations.is_empty());
    // The second after the first's window: new again.
    let later = op(2, Kind::AddIfAbsent, &["e"], (96, 100), ok(&[true]));
    assert!(check(&[a, later], &S).violations.is_empty());
}

#[test]
fn a_replay_answers_absent_again_and_is_not_a_duplicate() {
    let first = with_records(op(1, Kind::AddIfAbsent, &["e"], (0, 5), ok(&[true])), &["r"]);
    let replay = with_records(op(2, Kind::AddIfAbsent, &["e"], (10, 15), ok(&[true])), &["r"]);
    let r = check(&[first.clone(), replay.clone()], &S);
    assert!(r.violations.is_empty(), "{r}");
    // The replay answered present: dropped because of its own attempt.
    let dropped = with_records(op(2, Kind::AddIfAbsent, &["e"], (10, 15), ok(&[false])), &["r"]);
    let r = check(&[first.clone(), dropped.clone()], &S);
    assert_eq!(names(&r), ["replay dropped"], "{r}");
    // Unless another record of the entity explains the present answer.
    let other = with_records(op(3, Kind::AddIfAbsent, &["e"], (6, 8), ok(&[false])), &["s"]);
    let plain = op(4, Kind::Add, &["e"], (6, 8), ok(&[]));
    assert!(
        check(&[first.clone(), other, dropped.clone()], &S)
            .violations
            .is_empty()
    );
    assert!(check(&[first, plain, dropped], &S).violations.is_empty());
    // An attempt of the same record that answered present explains it:
    // its bits stay set, and present is the answer a replay repeats.
    let mut short = op(4, Kind::Add, &["e"], (0, 5), ok(&[]));
    short.ttl_ms = 10;
    let present_first = with_records(op(5, Kind::AddIfAbsent, &["e"], (6, 8), ok(&[false])), &["r"]);
    let replay = with_records(op(6, Kind::AddIfAbsent, &["e"], (50, 55), ok(&[false])), &["r"]);
    let r = check(&[short, present_first, replay], &S);
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.false_positives, 0);
    // A record's attempt that failed unanswered while another write of the
    // entity was live may have read it present, written, and remembered
    // nothing: a later present answer of that record is no violation.
    let mut early = op(7, Kind::Add, &["e"], (-20, -10), ok(&[]));
    early.ttl_ms = 15;
    let unknown = with_records(op(8, Kind::AddIfAbsent, &["e"], (0, 30), Outcome::Unknown), &["r"]);
    let later = with_records(op(9, Kind::CheckAbsence, &["e"], (40, 45), ok(&[false])), &["r"]);
    let r = check(&[early, unknown.clone(), later.clone()], &S);
    assert!(r.violations.is_empty(), "{r}");
    // Without that other write, it must have been absent and remembered.
    assert_eq!(names(&check(&[unknown, later], &S)), ["replay dropped"]);
    // A first attempt that failed without an answer: the retry must be absent.
    let failed = with_request(op(1, Kind::AddIfAbsent, &["e"], (0, 5), Outcome::Unknown), "q");
    let retry = with_request(op(2, Kind::AddIfAbsent, &["e"], (10, 15), ok(&[false])), "q");
    assert_eq!(names(&check(&[failed, retry], &S)), ["replay dropped"]);
}

#[test]
fn a_retried_request_answers_as_its_first_attempt() {
    let first = with_request(op(1, Kind::AddIfAbsent, &["e", "f"], (0, 5), ok(&[true, true])), "q");
    let same = with_request(op(2, Kind::AddIfAbsent, &["e", "f"], (10, 15), ok(&[true, true])), "q");
    let r = check(&[first.clone(), same], &S);
    assert!(r.violations.is_empty(), "{r}");
    // The first attempt read "f" present (an Add live then), failed without
    // an answer, and the retry, after that Add expired, repeats present.
    let mut add_f = op(3, Kind::Add, &["f"], (-20, -10), ok(&[]));
    add_f.ttl_ms = 15;
    let failed = with_request(op(4, Kind::AddIfAbsent, &["e", "f"], (0, 100), Outcome::Unknown), "p");
    let retry = with_request(
        op(5, Kind::AddIfAbsent, &["e", "f"], (110, 120), ok(&[true, false])),
        "p",
    );
    let r = check(&[add_f, failed, retry], &S);
    assert!(r.violations.is_empty(), "{r}");
    let changed = with_request(op(2, Kind::AddIfAbsent, &["e", "f"], (10, 15), ok(&[true, false])), "q");
    let r = check(&[first, changed], &S);
    assert!(names(&r).contains(&"retry answer changed"), "{r}");
}

#[test]
fn unexplained_presents_are_counted_as_false_positives() {
    let cold = op(
        1,
        Kind::CheckAbsence,
        &["a", "b", "c", "d"],
        (0, 5),
        ok(&[true, false, true, true]),
    );
    let r = check(&[cold], &S);
    assert!(r.violations.is_empty());
    assert_eq!((r.false_positives, r.cold_reads), (1, 4));
    assert_eq!(r.false_positive_rate(), 0.25);
}

#[test]
fn the_shrunk_history_still_violates() {
    let noise: Vec<Op> = (10..40)
        .map(|i| {
            op(
                i,
                Kind::AddIfAbsent,
                &["x", "y"],
                (i as i64, i as i64 + 1),
                ok(&[false, false]),
            )
        })
        .collect();
    let mut h = vec![op(1, Kind::Add, &["e"], (0, 5), ok(&[]))];
    h.extend(noise);
    h.push(op(2, Kind::CheckAbsence, &["e"], (50, 60), ok(&[true])));
    let r = check(&h, &S);
    assert_eq!(names(&r), ["false negative"], "{r}");
    let small = shrink(&h, &r.violations[0]);
    assert_eq!(small.iter().map(|o| o.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(check(&small, &S).violations, r.violations);
}
