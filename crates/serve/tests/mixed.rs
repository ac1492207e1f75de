//! A job across device types through the service (issue 26): `mixed_types = true` lets
//! the policy place one job on nodes of several types, the run says which types it
//! holds (per node, in node-rank order), and a job that did not ask stays on one type
//! — with a clear answer at submission when one type cannot hold it.

mod common;

use common::{test_dir, wait_for, Service};

#[test]
fn a_mixed_job_spans_types_and_the_others_stay_on_one() {
    let dir = test_dir("mixed-types");
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "1x2:t4,1x2:a100",
            "--policy",
            "fifo",
            "--round-s",
            "0.2",
        ],
    );
    let c = svc.client();
    let d = dir.display();
    let job = |name: &str, replicas: u32, extra: &str| {
        format!(
            "name = \"{name}\"\nreplicas = {replicas}\n{extra}command = [\"sh\", \"-c\", \"echo $PACER_DEVICE_TYPE $PACER_NODE_TYPES $PACER_REPLICAS > {d}/{name}.tmp; mv {d}/{name}.tmp {d}/{name}\"]\n"
        )
    };
    let post = |spec: &str| {
        svc.call(
            &c,
            "POST",
            "/v1/jobs",
            Some(spec.as_bytes()),
            "application/toml",
        )
    };
    // Four devices of one type do not exist: refused at once, saying what would work.
    let a = post(&job("four-one-type", 4, ""));
    let body = String::from_utf8_lossy(&a.body).to_string();
    assert_eq!(a.status, 400, "{body}");
    assert!(body.contains("min_replicas"), "{body}");
    assert!(body.contains("mixed_types = true"), "{body}");
    // Asked for: placed across both types.
    let a = post(&job("four-mixed", 4, "mixed_types = true\n"));
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    wait_for("the mixed job ran", 30, || dir.join("four-mixed").exists());
    let seen = std::fs::read_to_string(dir.join("four-mixed")).unwrap();
    assert_eq!(seen.trim(), "t4+a100 t4,a100 4");
    // Two devices: one type, whichever the policy picks.
    let a = post(&job("two", 2, ""));
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    wait_for("the two-device job ran", 30, || dir.join("two").exists());
    let seen = std::fs::read_to_string(dir.join("two")).unwrap();
    let fields: Vec<&str> = seen.split_whitespace().collect();
    assert!(
        fields == ["t4", "t4", "2"] || fields == ["a100", "a100", "2"],
        "{seen}"
    );
    drop(svc);
}

#[test]
fn mixed_types_on_a_one_type_cluster_is_answered() {
    let dir = test_dir("mixed-one-type");
    let svc = Service::start(&dir, &["--cluster", "2x2:t4", "--policy", "fifo"]);
    let c = svc.client();
    let spec = "name = \"m\"\nmixed_types = true\ncommand = [\"true\"]\n";
    let a = svc.call(
        &c,
        "POST",
        "/v1/jobs",
        Some(spec.as_bytes()),
        "application/toml",
    );
    let body = String::from_utf8_lossy(&a.body).to_string();
    assert_eq!(a.status, 400, "{body}");
    assert!(body.contains("mixed_types"), "{body}");
    assert!(
        body.contains("one device type of this cluster (t4)"),
        "{body}"
    );
    drop(svc);
}
