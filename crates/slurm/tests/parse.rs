//! Parsing real output captured from the dev cluster (deploy/slurm/dev-cluster.sh, Slurm
//! 22.05.8) into tests/fixtures: 4 nodes n1..n4, 4 `gpu:t4` each, partition `gpu`.

use pacer_slurm::{
    parse_partitions, parse_sinfo, parse_squeue, parse_state_nodes, parse_steps, Cluster,
    JobRequest, JobState, SlurmError,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn cluster(sinfo: &str) -> Cluster {
    Cluster {
        nodes: parse_sinfo(sinfo).unwrap(),
        partitions: parse_partitions(&fixture("scontrol-show-partition.txt")),
        jobs: parse_squeue(&fixture("squeue-running-pending-other.json")).unwrap(),
    }
}

#[test]
fn idle_cluster_has_four_nodes_of_four_t4() {
    let nodes = parse_sinfo(&fixture("sinfo-idle.json")).unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    for n in &nodes {
        assert!(n.state.is_up(), "{}: {}", n.name, n.state);
        assert_eq!(n.state.base, "idle");
        assert_eq!((n.cpus, n.alloc_cpus), (8, 0));
        assert_eq!(
            (n.gpus(None), n.gpus(Some("t4")), n.gpus(Some("v100"))),
            (4, 4, 0)
        );
        assert_eq!(n.gpus_free(), 4);
        assert_eq!(n.device_type().as_deref(), Some("t4"));
        assert_eq!(n.partitions, ["gpu"]);
        assert_eq!(n.features, ["t4"]);
        assert_eq!(n.address, "127.0.0.1");
    }
}

#[test]
fn busy_cluster_counts_used_gpus_per_node() {
    let nodes = parse_sinfo(&fixture("sinfo-busy.json")).unwrap();
    let used: Vec<(String, u32, String)> = nodes
        .iter()
        .map(|n| (n.name.clone(), n.gpus_used(), n.state.base.clone()))
        .collect();
    assert_eq!(
        used,
        [
            ("n1".into(), 4, "mixed".into()),
            ("n2".into(), 4, "mixed".into()),
            ("n3".into(), 1, "mixed".into()),
            ("n4".into(), 0, "idle".into())
        ]
    );
}

#[test]
fn squeue_gives_placement_state_and_owner() {
    let jobs = parse_squeue(&fixture("squeue-running-pending-other.json")).unwrap();
    let by_id = |id| jobs.iter().find(|j| j.id == id).unwrap();
    // Job 3: submitted with --nodes=2 --nodelist=n1,n2 --gres=gpu:t4:4.
    let j = by_id(3);
    assert_eq!((j.name.as_str(), j.user.as_str()), ("pacer-x", "root"));
    assert_eq!(j.state, JobState::Running);
    assert_eq!(j.nodes, ["n1", "n2"]);
    assert_eq!(
        (j.gpus_on("n1"), j.gpus_on("n2"), j.gpus_on("n3")),
        (4, 4, 0)
    );
    assert_eq!(j.gres_requested_per_node[0].kind.as_deref(), Some("t4"));
    assert_eq!(j.gres_requested_per_node[0].count, 4);
    assert!(j.requeue && !j.was_requeued());
    assert_eq!(j.batch_host.as_deref(), Some("n1"));
    // Job 2: another user's, one GPU on n3.
    let j = by_id(2);
    assert_eq!(
        (j.user.as_str(), j.nodes.as_slice(), j.gpus_on("n3")),
        ("alice", &["n3".to_string()][..], 1)
    );
    // Job 4: pending for resources, no nodes yet.
    let j = by_id(4);
    assert_eq!(
        (j.state.clone(), j.reason.as_str(), j.nodes.len()),
        (JobState::Pending, "Resources", 0)
    );
    // Job 1: ended before the snapshot.
    assert_eq!(by_id(1).state, JobState::Completed);
    assert!(by_id(1).state.is_terminal());
}

#[test]
fn other_users_jobs_are_capacity_taken() {
    let c = cluster(&fixture("sinfo-busy.json"));
    let foreign = c.foreign_gpus("pacer-");
    assert_eq!(
        foreign.into_iter().collect::<Vec<_>>(),
        [("n3".to_string(), 1)]
    );
    let own: Vec<u64> = c.own_jobs("pacer-").map(|j| j.id).collect();
    assert_eq!(own, [3, 4]);
}

#[test]
fn what_an_uneven_pacer_job_holds_beyond_its_plan_is_taken() {
    let mut c = cluster(&fixture("sinfo-busy.json"));
    // Job 3 (pacer's, 4 GPUs on n1 and on n2) was planned as 4 on n1 and 1 on n2:
    // Slurm holds 3 on n2 that pacer must not plan with.
    let j = c.jobs.iter_mut().find(|j| j.id == 3).unwrap();
    j.comment = "pacer-gpus=n1:4,n2:1".into();
    let foreign = c.foreign_gpus("pacer-");
    assert_eq!(
        foreign.into_iter().collect::<Vec<_>>(),
        [("n2".to_string(), 3), ("n3".to_string(), 1)]
    );
    // An unreadable plan: what Slurm holds is the plan (nothing extra taken).
    let j = c.jobs.iter_mut().find(|j| j.id == 3).unwrap();
    j.comment = "pacer-gpus=garbage".into();
    assert_eq!(c.foreign_gpus("pacer-").len(), 1);
}

#[test]
fn cancelled_jobs_are_terminal() {
    let jobs = parse_squeue(&fixture("squeue-cancelled.json")).unwrap();
    assert_eq!(jobs.len(), 4);
    for j in jobs.iter().filter(|j| j.id != 1) {
        assert_eq!(j.state, JobState::Cancelled, "job {}", j.id);
        assert!(!j.state.holds_resources());
    }
}

#[test]
fn a_controller_that_does_not_answer_is_unreachable_not_empty() {
    // With --json, squeue and sinfo exit 0 and put the failure in `errors`.
    for (f, parse) in [
        (
            "squeue-controller-down.json",
            (|s: &str| parse_squeue(s).map(|_| ())) as fn(&str) -> _,
        ),
        ("sinfo-controller-down.json", |s: &str| {
            parse_sinfo(s).map(|_| ())
        }),
    ] {
        let err = parse(&fixture(f)).unwrap_err();
        assert!(matches!(err, SlurmError::Unreachable { .. }), "{f}: {err}");
        assert!(err.to_string().contains("unreachable"), "{err}");
    }
}

#[test]
fn requests_are_checked_against_the_cluster() {
    let c = cluster(&fixture("sinfo-idle.json"));
    let ok = JobRequest {
        gpu_type: Some("t4".into()),
        ..JobRequest::new("a", "gpu", &["n1", "n2"], 4, &["true"])
    };
    c.validate(&ok).unwrap();

    let err = c
        .validate(&JobRequest {
            partition: "nope".into(),
            ..ok.clone()
        })
        .unwrap_err();
    assert!(matches!(err, SlurmError::NoSuchPartition { .. }), "{err}");
    assert!(
        err.to_string().contains("`nope`") && err.to_string().contains("gpu"),
        "{err}"
    );

    let err = c
        .validate(&JobRequest {
            nodes: vec!["n9".into()],
            ..ok.clone()
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("`n9`") && err.to_string().contains("n1, n2, n3, n4"),
        "{err}"
    );

    let err = c
        .validate(&JobRequest {
            gpu_type: Some("v100".into()),
            ..ok.clone()
        })
        .unwrap_err();
    assert!(matches!(err, SlurmError::NotEnoughGpus { .. }), "{err}");
    assert!(
        err.to_string().contains("`n1`") && err.to_string().contains("v100"),
        "{err}"
    );

    let err = c
        .validate(&JobRequest {
            gpus_per_node: 5,
            ..ok.clone()
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("4 GPUs of type t4") && err.to_string().contains("needs 5"),
        "{err}"
    );
}

#[test]
fn a_node_without_gpus_is_named() {
    // The captured output with n2's GRES removed, as a node configured without GPUs shows.
    let text = fixture("sinfo-idle.json");
    let n2 = text.find("\"name\": \"n2\"").unwrap();
    let gres_at = text[..n2].rfind("\"gres\": \"gpu:t4:4\"").unwrap();
    let edited = format!(
        "{}\"gres\": \"(null)\"{}",
        &text[..gres_at],
        &text[gres_at + "\"gres\": \"gpu:t4:4\"".len()..]
    );
    let c = cluster(&edited);
    assert_eq!(c.node("n2").unwrap().gpus(None), 0);
    let err = c
        .validate(&JobRequest::new("a", "gpu", &["n1", "n2"], 1, &["true"]))
        .unwrap_err();
    assert!(err.to_string().contains("`n2` has no GPUs"), "{err}");
    assert!(c
        .validate(&JobRequest::new("a", "gpu", &["n2"], 0, &["true"]))
        .is_ok());
}

#[test]
fn malformed_output_is_a_parse_error_naming_the_command() {
    let err = parse_squeue("{\"jobs\": 3}").unwrap_err();
    assert!(err.to_string().contains("squeue --json"), "{err}");
    let err = parse_sinfo("").unwrap_err();
    assert!(err.to_string().contains("sinfo --json"), "{err}");
}

#[test]
fn steps_of_one_job_are_read_and_garbage_is_named() {
    // As `squeue --steps --jobs=1037 --noheader --format=%i` printed on the dev cluster.
    assert_eq!(
        parse_steps("1037.0\n1037.batch\n", 1037).unwrap(),
        ["0", "batch"]
    );
    // Before srun has started the ranks: only the batch step.
    assert_eq!(parse_steps("1037.batch\n", 1037).unwrap(), ["batch"]);
    // An ended or unknown job: nothing (squeue exits 0); other jobs' steps are skipped.
    assert!(parse_steps("", 1).unwrap().is_empty());
    assert_eq!(
        parse_steps("10370.0\n1037.extern\n", 1037).unwrap(),
        ["extern"]
    );
    let err = parse_steps("1037.0\nslurm_load_jobs error\n", 1037).unwrap_err();
    assert!(err.to_string().contains("squeue --steps"), "{err}");
    assert!(err.to_string().contains("slurm_load_jobs error"), "{err}");
    assert!(parse_steps("1037.\n", 1037).is_err());
}

#[test]
fn one_jobs_state_and_node_count_are_read() {
    // As `squeue --jobs=1205 --states=all --noheader --format="%T %D"` printed.
    assert_eq!(
        parse_state_nodes("COMPLETED 3\n").unwrap(),
        Some((JobState::Completed, 3))
    );
    assert_eq!(
        parse_state_nodes("RUNNING 1\n").unwrap(),
        Some((JobState::Running, 1))
    );
    assert_eq!(parse_state_nodes("").unwrap(), None);
    for bad in [
        "RUNNING",
        "RUNNING two",
        "running 2",
        "slurm_load_jobs error: x",
    ] {
        let err = parse_state_nodes(bad).unwrap_err().to_string();
        assert!(
            err.contains("squeue --format") && err.contains(bad),
            "{err}"
        );
    }
}
