//! Inputs the fuzzer found (shrunk), kept as regression cases: each passes every
//! check of the harness, and is rejected (or accepted) as the fixed parser should.

use pacer_fuzz::harness::{check, Limits, Outcome, Place};
use pacer_fuzz::targets;
use std::time::Duration;

/// Runs target `name` on `input` under the default limits (1 s; 64 × len + 32 MiB)
/// and returns what it made of it.
fn run(name: &str, input: &[u8]) -> Outcome {
    targets::warm_up();
    let t = targets::by_name(name).expect("target");
    if let Err(f) = check(&t, input, &Limits::default()) {
        panic!("{name}: {f}");
    }
    (t.run)(input)
}

fn rejected(o: Outcome) -> (String, Place) {
    match o {
        Outcome::Rejected { message, place } => (message, place),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn cluster_spec_node_limit_is_on_the_whole_cluster() {
    // Each group within 10^6 nodes, the cluster not: 22 bytes built 10^6 + 8
    // nodes, and 100 such groups (1.2 KB) 800 MB of them.
    let (m, _) = rejected(run("cluster_spec", b"1000000x1:v100,8x4:cpu"));
    assert!(m.starts_with("--cluster: cluster too large"), "{m}");
    let (m, _) = rejected(run(
        "cluster_toml",
        b"nodes = [ { count = 1000000, gpus = 1, type = \"a\" }, { count = 1, gpus = 1, type = \"a\" } ]",
    ));
    assert!(m.contains("cluster too large"), "{m}");
    assert_eq!(run("cluster_spec", b"999999x1:a,1x4:b"), Outcome::Accepted);
}

#[test]
fn philly_timestamp_year_far_out_of_range() {
    // `days_from_civil` multiplied the year's era by 146097: i64 overflow (a panic
    // with overflow checks, a wrapped arrival time without).
    let (m, place) = rejected(run(
        "philly",
        b"timestamp,duration,num_gpus\n9223372036854775807-10-03 09:15:00,3600,1\n",
    ));
    assert_eq!(place, Place::Line(2));
    assert!(m.contains("is not YYYY-MM-DD HH:MM:SS"), "{m}");
    let (_, place) = rejected(run(
        "philly",
        b"timestamp,duration,num_gpus\n-9223372036854775808-01-03 09:15:00,3600,1\n",
    ));
    assert_eq!(place, Place::Line(2));
    assert_eq!(
        run(
            "philly",
            b"timestamp,duration,num_gpus\n9999-12-31 23:59:59,1,1\n"
        ),
        Outcome::Accepted
    );
}

#[test]
fn quality_curve_rejects_nan_and_infinite_iterations() {
    // NaN passed `last >= it` (false), so the curve was no longer increasing.
    let (m, place) = rejected(run(
        "quality",
        b"# 1,0.5\niteration,loss\n0,1\nNaN,0.5\n1,0.4\n",
    ));
    assert_eq!(place, Place::Line(4));
    assert!(m.contains("finite"), "{m}");
    let (_, place) = rejected(run("quality", b"# 1,0.5\niteration,loss\n-inf,1\n0,0.5\n"));
    assert_eq!(place, Place::Line(3));
}

#[test]
fn idx_shape_whose_product_overflows() {
    // Three dimensions of 2^32 - 1: the byte count overflowed usize (a panic with
    // overflow checks, a wrapped size without).
    let mut b = vec![0, 0, 8, 3];
    b.extend_from_slice(&[0xff; 12]);
    let (m, _) = rejected(run("idx", &b));
    assert!(m.contains("more than 2^64"), "{m}");
    // The shape the fuzzer found first: 0x32313437 × 0 × ... from an edge number.
    let (m, _) = rejected(run(
        "idx",
        b"\x00\x00\x08\x032147483647\x00\x00\x00\x00\x00\x00\x00\x1c\x00\x00\x00\x1c",
    ));
    assert!(m.contains("IDX header says"), "{m}");
}

/// A header, one row of `wide` fields, then `rows` short rows.
fn wide_then_many(header: &str, row: &str, wide: usize, rows: usize) -> Vec<u8> {
    let mut s = format!("{header}\n{row}");
    s.push_str(&",".repeat(wide));
    s.push('\n');
    for _ in 0..rows {
        s.push_str(row);
        s.push('\n');
    }
    s.into_bytes()
}

#[test]
fn csv_wide_row_then_many_rows_is_linear() {
    // `csv::Reader::records()` clones the reader's record with the field-end table
    // of the widest row so far: the workload loaders kept every clone (50 KB of
    // input held 36 MB), the profile tables copied it per row (192 KB took 1 s).
    let w = wide_then_many(
        "name,time,application,num_replicas,batch_size",
        "bert-0,0,bert,1,64",
        8 << 10,
        2 << 10,
    );
    assert_eq!(run("pollux_workload", &w), Outcome::Accepted);
    let p = wide_then_many(
        "timestamp,duration,num_gpus",
        "2017-10-03 09:15:00,3600,1",
        8 << 10,
        2 << 10,
    );
    assert_eq!(run("philly", &p), Outcome::Accepted);
    let t = targets::by_name("placements").unwrap();
    let p = wide_then_many(
        "placement,local_bsz,step_time,sync_time",
        "1,32,0.1,0.02",
        64 << 10,
        16 << 10,
    );
    let limits = Limits {
        time: Duration::from_secs(1),
        ..Limits::default()
    };
    check(&t, &p, &limits).unwrap_or_else(|f| panic!("placements: {f}"));
}

#[test]
fn libsvm_many_distinct_labels_is_not_quadratic() {
    // Every row its own class (a regression file): the class of each row was a
    // linear search over the labels, 20,000 rows (190 KB) took 0.8 s in release,
    // 80,000 rows 20 s. Labels are now found by hash and at most 1,000 distinct
    // classes are accepted: the most a file may have loads, one more is refused
    // at the line that brings it.
    let rows = |n: usize| {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&format!("{i} 1:1\n"));
        }
        s
    };
    assert_eq!(run("libsvm", rows(1_000).as_bytes()), Outcome::Accepted);
    match run("libsvm", rows(20_000).as_bytes()) {
        Outcome::Rejected { message, .. } => {
            assert!(message.contains("line 1001"), "{message}")
        }
        other => panic!("20,000 classes: {other:?}"),
    }
}
