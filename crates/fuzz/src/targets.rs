//! Every parser of user input and the wire protocol, as a fuzz target. Seeds are
//! valid inputs: generated here or the first lines of the tables the repository
//! ships (`crates/sim/data`), never `../shared`.

use crate::harness::{no_extra, Outcome, Place, Target};
use pacer_model::ParseError;
use pacer_runtime::protocol::{self, JobSpec, Message, ProtocolError, Signals, StepTiming};
use std::sync::OnceLock;

use crate::serve_targets::{
    serve_job_json, serve_job_json_seeds, serve_job_toml, serve_job_toml_seeds, serve_login,
    serve_login_seeds, serve_report, serve_report_seeds, API_BODY, JOB_TOML,
};

/// Text targets read files with `read_to_string`, so they only ever see UTF-8;
/// bytes that are not are replaced (keeps mutations of a seed useful).
pub(crate) fn text(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

fn parse_error(e: ParseError) -> Outcome {
    Outcome::Rejected {
        message: e.to_string(),
        place: e.line.map_or(Place::Whole, Place::Line),
    }
}

fn outcome<T>(r: Result<T, ParseError>) -> Outcome {
    r.map_or_else(parse_error, |_| Outcome::Accepted)
}

/// The first `n` lines of `s`.
fn head(s: &str, n: usize) -> Vec<u8> {
    s.lines()
        .take(n)
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

// ------------------------------------------------------------------ model

const CLUSTER: &str = "--cluster";

fn cluster_spec(b: &[u8]) -> Outcome {
    match pacer_model::ClusterSpec::parse(&text(b), CLUSTER) {
        Ok(c) if c.nodes.len() > 1_000_000 => {
            Outcome::Broken(format!("{} nodes: more than the 10^6 limit", c.nodes.len()))
        }
        r => outcome(r),
    }
}

fn cluster_spec_seeds() -> Vec<Vec<u8>> {
    [
        "16x4:t4",
        "8x4:v100,8x4:k80",
        " 2x8:a100 , 1x1:t4,3x2:V100",
        "1000000x1:cpu",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

const CLUSTER_TOML: &str = "fuzz/cluster.toml";

fn cluster_toml(b: &[u8]) -> Outcome {
    match pacer_model::cluster_file::parse_cluster_toml(&text(b), CLUSTER_TOML) {
        Ok(c) if c.nodes.len() > 1_000_000 => {
            Outcome::Broken(format!("{} nodes: more than the 10^6 limit", c.nodes.len()))
        }
        r => outcome(r),
    }
}

fn cluster_toml_seeds() -> Vec<Vec<u8>> {
    [
        "[[nodes]]\ncount = 8\ngpus = 4\ntype = \"v100\"\n",
        "[[nodes]]\ncount = 1\ngpus = 4\ntype = \"V100\"\n\n[[nodes]]\ncount = 1\ngpus = 2\ntype = \"k80\"\n",
        "nodes = [ { count = 2, gpus = 8, type = \"a100\" }, { count = 16, gpus = 1, type = \"t4\" } ]\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

const PLACEMENTS: &str = "fuzz/placements.csv";
const SCALABILITY: &str = "fuzz/scalability.csv";
const VALIDATION: &str = "fuzz/validation-512.csv";

fn placements(b: &[u8]) -> Outcome {
    outcome(pacer_model::profile::parse_placements(&text(b), PLACEMENTS))
}

fn placements_seeds() -> Vec<Vec<u8>> {
    vec![
        b"placement,local_bsz,step_time,sync_time\n22,32,0.1,0.02\n1,64,0.2,0\n".to_vec(),
        b"step_time,sync_time,placement,local_bsz,extra\n0.5,0.01,1111,16,x\n\n0.25,0,4,8,y\n"
            .to_vec(),
        head(include_str!("../../sim/data/pollux/ncf/placements.csv"), 12),
        head(
            include_str!("../../sim/data/pollux/cifar10/placements.csv"),
            12,
        ),
    ]
}

fn scalability(b: &[u8]) -> Outcome {
    outcome(pacer_model::profile::parse_scalability(
        &text(b),
        SCALABILITY,
    ))
}

fn scalability_seeds() -> Vec<Vec<u8>> {
    vec![
        b"num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,1,32,0.1,0\n2,4,32,0.12,0.03\n"
            .to_vec(),
        head(
            include_str!("../../sim/data/pollux/ncf/scalability.csv"),
            12,
        ),
    ]
}

fn validation(b: &[u8]) -> Outcome {
    outcome(pacer_model::profile::parse_validation(
        &text(b),
        512,
        VALIDATION,
    ))
}

fn validation_seeds() -> Vec<Vec<u8>> {
    vec![
        b"progress,iteration,metric,grad_sqr,grad_var\n0,0,0.1,1.0,2.0\n100,10,0.5,0.9,1.8\n"
            .to_vec(),
        head(
            include_str!("../../sim/data/pollux/ncf/validation-512.csv"),
            10,
        ),
    ]
}

// ------------------------------------------------------------------ sim

fn apps() -> &'static [pacer_sim::AppModel] {
    static APPS: OnceLock<Vec<pacer_sim::AppModel>> = OnceLock::new();
    APPS.get_or_init(|| {
        pacer_sim::embedded_profiles()
            .into_iter()
            .map(pacer_sim::AppModel::new)
            .collect()
    })
}

/// Builds what targets share (application models, throughputs) outside any
/// measured call.
pub fn warm_up() {
    apps();
    tput();
}

const WORKLOAD: &str = "fuzz/workload.csv";

fn pollux_workload(b: &[u8]) -> Outcome {
    outcome(pacer_sim::trace::load_pollux_workload(
        &text(b),
        WORKLOAD,
        apps(),
        1.0,
    ))
}

fn pollux_workload_seeds() -> Vec<Vec<u8>> {
    let mut s = String::from("name,time,application,num_replicas,batch_size\n");
    for (i, a) in apps().iter().enumerate() {
        s.push_str(&format!(
            "{}-{i},{},{},{},{}\n",
            a.name(),
            i * 37,
            a.name(),
            1 + i % 4,
            64 << i
        ));
    }
    vec![
        s.into_bytes(),
        head(
            include_str!("../../sim/data/pollux/workloads/workload-1.csv"),
            15,
        ),
    ]
}

const PHILLY: &str = "fuzz/philly.csv";

fn philly(b: &[u8]) -> Outcome {
    outcome(pacer_sim::trace::load_philly(&text(b), PHILLY))
}

fn philly_seeds() -> Vec<Vec<u8>> {
    vec![b"timestamp,duration,num_gpus,gpu_time,cluster\n\
          2017-10-03 09:15:00,3600,1,3600,philly\n\
          2017-10-03 09:16:30,120.5,8,964,philly\n\
          2017-12-31 23:59:59,60,2,120,philly\n\
          2016-02-29 00:00:00,1,16,16,philly\n"
        .to_vec()]
}

const THROUGHPUTS: &str = "fuzz/simulation_throughputs.json";

const THROUGHPUTS_SEED: &str = r#"{
 "v100": {"('ResNet-18 (batch size 16)', 1)": {"null": 10.5, "('LM (batch size 20)', 1)": [3.0, 4.0]},
          "('ResNet-18 (batch size 16)', 2)": {"null": 19.0},
          "('LM (batch size 20)', 1)": {"null": 3.25}},
 "v100_unconsolidated": {"('ResNet-18 (batch size 16)', 2)": {"null": 17.5}},
 "p100": {"('ResNet-18 (batch size 16)', 1)": {"null": 6.0},
          "('LM (batch size 20)', 4)": {"null": 8.0}},
 "k80": {"('LM (batch size 20)', 1)": {"null": 0.75}}
}"#;

fn tput() -> &'static pacer_sim::trace::GavelThroughputs {
    static T: OnceLock<pacer_sim::trace::GavelThroughputs> = OnceLock::new();
    T.get_or_init(|| {
        pacer_sim::trace::load_gavel_throughputs(THROUGHPUTS_SEED, "seed").expect("seed parses")
    })
}

fn gavel_throughputs(b: &[u8]) -> Outcome {
    outcome(pacer_sim::trace::load_gavel_throughputs(
        &text(b),
        THROUGHPUTS,
    ))
}

fn gavel_throughputs_seeds() -> Vec<Vec<u8>> {
    vec![THROUGHPUTS_SEED.as_bytes().to_vec(), b"{}".to_vec()]
}

const GAVEL_TRACE: &str = "fuzz/gavel.trace";

fn gavel_trace(b: &[u8]) -> Outcome {
    outcome(pacer_sim::trace::load_gavel_trace(
        &text(b),
        GAVEL_TRACE,
        tput(),
        "v100",
    ))
}

fn gavel_trace_hetero(b: &[u8]) -> Outcome {
    outcome(pacer_sim::hetero::load_gavel_trace_hetero(
        &text(b),
        GAVEL_TRACE,
        tput(),
        None,
    ))
}

fn gavel_trace_seeds() -> Vec<Vec<u8>> {
    vec![b"ResNet-18 (batch size 16)\tcd resnet && python3 main.py\t--num_steps\t1\t4000\t0\t1\n\
           LM (batch size 20)\tcd lm && python3 main.py\t--steps\t0\t1200.5\t35.25\t1\n\
           ResNet-18 (batch size 16)\tcd resnet && python3 main.py\t--num_steps\t1\t80000\t3600\t2\n"
        .to_vec()]
}

const EF_TABLE: &str = "fuzz/throughputs_T4/toy.csv";
const EF_TABLE_SEED: &str = "global_batch_size,1,2,4,8\n64,1.0,2.0,4.0,3.0\n128,0.5,1.0,nan,\n";

fn elasticflow_table(b: &[u8]) -> Outcome {
    outcome(pacer_sim::trace::elasticflow::parse_throughput_table(
        &text(b),
        EF_TABLE,
    ))
}

fn elasticflow_table_seeds() -> Vec<Vec<u8>> {
    vec![EF_TABLE_SEED.as_bytes().to_vec()]
}

const EF_TRACE: &str = "fuzz/elasticflow.csv";

fn elasticflow_trace(b: &[u8]) -> Outcome {
    let table = pacer_sim::trace::elasticflow::parse_throughput_table(EF_TABLE_SEED, "seed")
        .expect("seed parses");
    let mut lookup =
        |ty: &str, model: &str| Ok((ty == "t4" && model == "toy").then(|| table.clone()));
    match pacer_sim::trace::elasticflow::load_elasticflow(
        &text(b),
        EF_TRACE,
        &["t4".to_string()],
        &mut lookup,
    ) {
        Ok(_) => Outcome::Accepted,
        Err(pacer_sim::trace::TraceError::Parse(e)) => parse_error(e),
        Err(e) => Outcome::Broken(format!("not a parse error: {e}")),
    }
}

fn elasticflow_trace_seeds() -> Vec<Vec<u8>> {
    vec![b"job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration,best_effort\n\
           0,100,400,toy,300,64,1,400,0\n1,160,100,toy,999,128,2,100,1\n2,170,90,toy,900,64,8,30,0\n"
        .to_vec()]
}

const QUALITY: &str = "fuzz/slaq/q.csv";

fn quality(b: &[u8]) -> Outcome {
    match pacer_sim::quality::QualityProfile::parse(&text(b), "q", QUALITY) {
        Ok(q) => {
            // What `loss_at` and `total_iterations` rely on.
            let bad = q.curve.iter().any(|p| !p.0.is_finite() || !p.1.is_finite())
                || q.curve.windows(2).any(|w| w[0].0 >= w[1].0);
            if bad {
                Outcome::Broken(format!(
                    "curve not finite and strictly increasing: {:?}",
                    &q.curve[..q.curve.len().min(4)]
                ))
            } else {
                Outcome::Accepted
            }
        }
        Err(e) => parse_error(e),
    }
}

fn quality_seeds() -> Vec<Vec<u8>> {
    vec![
        head(include_str!("../../sim/data/slaq/svm-a.csv"), 30),
        b"# workers,iter_time_s\n# 1,0.5\niteration,loss\n0,2.3\n1,1.9\n10,0.5\n".to_vec(),
    ]
}

// ------------------------------------------------------------------ workersim

const SCENARIO: &str = "fuzz/scenario.json";

fn scenario(b: &[u8]) -> Outcome {
    match pacer_workersim::Scenario::from_json(&text(b), SCENARIO) {
        Ok(_) => Outcome::Accepted,
        Err(e) => Outcome::Rejected {
            message: e.to_string(),
            place: if e.field.is_empty() || e.field == "." {
                Place::Whole
            } else {
                Place::Field(e.field.clone())
            },
        },
    }
}

fn scenario_seeds() -> Vec<Vec<u8>> {
    vec![
        br#"{"global_batch": 1024, "iterations": 2000, "seed": 7, "sync_s": 0.002,
     "workers": [
       {"samples_per_s": 800, "max_batch": 1024, "noise": 0.05,
        "curve": [[16, 0.03], [64, 0.08], [256, 0.30]],
        "interference": [{"start": 300, "end": 900, "slowdown": 2.5, "cpu_load": 0.5}]},
       {"samples_per_s": 400, "count": 3, "min_batch": 8, "mem_cap": 512,
        "drift": {"start": 10, "end": 500, "slowdown": 1.5}}]}"#
            .to_vec(),
        br#"{"comment": "two", "global_batch": 64, "iterations": 5, "seed": 0, "monitor_noise": 0.1,
     "workers": [{"samples_per_s": 1.5e3, "count": 2}]}"#
            .to_vec(),
    ]
}

// ------------------------------------------------------------------ serve

const PEER: &str = "fuzz-peer";

fn protocol_error(e: ProtocolError) -> Outcome {
    let message = e.to_string();
    let place = match &e {
        ProtocolError::Truncated { frame, field, .. }
        | ProtocolError::Invalid { frame, field, .. } => {
            if !message.contains(frame) {
                return Outcome::Broken(format!("error does not name the frame: {message}"));
            }
            Place::Field(field.to_string())
        }
        ProtocolError::BadMagic { .. } => Place::Field("magic".into()),
        ProtocolError::Version { .. } => Place::Field("version".into()),
        _ => Place::Whole,
    };
    Outcome::Rejected { message, place }
}

/// `Message::decode` of one frame body.
fn protocol_frame(b: &[u8]) -> Outcome {
    match Message::decode(b, PEER) {
        Ok(m) => {
            let mut again = Vec::new();
            m.encode(&mut again);
            if again[4..] == *b {
                Outcome::Accepted
            } else {
                Outcome::Broken(format!("{m:?} re-encodes to other bytes"))
            }
        }
        Err(e) => protocol_error(e),
    }
}

fn messages() -> Vec<Message> {
    let timing = StepTiming {
        cpu_s: 0.25,
        wall_s: 0.3,
        step_s: 0.5,
        recv_unix_s: 1.7e9,
        ..Default::default()
    };
    vec![
        Message::Hello {
            version: protocol::VERSION,
            name: "worker-0".into(),
        },
        Message::Welcome {
            worker_id: 3,
            job: JobSpec {
                dataset: "tiny".into(),
                fingerprint: 0xdead_beef,
                n_train: 2000,
                model: pacer_runtime::model::ModelSpec {
                    kind: pacer_runtime::model::ModelKind::Mlp,
                    dim: 64,
                    classes: 10,
                    width: 32,
                },
                stream_seed: 7,
                n_params: 1234,
            },
        },
        Message::Reject {
            reason: "wrong data".into(),
        },
        Message::Ready {
            fingerprint: 1,
            n_train: 2000,
        },
        Message::Step {
            task: 1,
            iteration: 2,
            version: 3,
            stream_start: 4,
            len: 5,
            params: Some(vec![1.0, -2.5, f32::MIN_POSITIVE]),
        },
        Message::Step {
            task: 1,
            iteration: 2,
            version: 3,
            stream_start: 4,
            len: 5,
            params: None,
        },
        Message::Gradient {
            task: 9,
            iteration: 2,
            len: 32,
            loss_sum: 4.5,
            correct: 30,
            timing,
            signals: Signals {
                slowdown: 2.0,
                cpu_load: 0.5,
                ..Default::default()
            },
            first: 4,
            grad: vec![0.25; 5],
        },
        Message::GradientPart {
            task: 9,
            iteration: 2,
            offset: 0,
            values: vec![0.5; 4],
        },
        Message::Shutdown {
            reason: "done".into(),
        },
        Message::Error {
            message: "out of memory".into(),
        },
    ]
}

fn protocol_frame_seeds() -> Vec<Vec<u8>> {
    messages()
        .iter()
        .map(|m| {
            let mut b = Vec::new();
            m.encode(&mut b);
            b[4..].to_vec()
        })
        .collect()
}

/// Polls a future that never waits: readers over a byte slice are always ready.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A connection's byte stream: frames read with `read_message` and
/// `read_message_streaming_step` (alternating), streamed values skipped with
/// `read_f32s`, until the stream ends.
fn protocol_stream(b: &[u8]) -> Outcome {
    let mut r = b;
    let mut buf = Vec::new();
    let mut scratch = vec![0f32; 1024];
    for k in 0.. {
        if r.is_empty() {
            return Outcome::Accepted;
        }
        let res = if k % 2 == 0 {
            block_on(protocol::read_message(&mut r, &mut buf, PEER, "fuzzing")).map(|_| ())
        } else {
            block_on(protocol::read_message_streaming_step(
                &mut r, &mut buf, PEER, "fuzzing",
            ))
            .and_then(|(_, n)| {
                let mut left = n.unwrap_or(0);
                while left > 0 {
                    let c = left.min(scratch.len());
                    block_on(protocol::read_f32s(
                        &mut r,
                        &mut scratch[..c],
                        PEER,
                        "fuzzing",
                    ))?;
                    left -= c;
                }
                Ok(())
            })
        };
        if let Err(e) = res {
            return protocol_error(e);
        }
    }
    unreachable!()
}

/// No allowance beyond the input's own size: the readers grow a frame's buffer as its
/// bytes arrive (64 KiB at a time), so a header announcing 256 MiB costs what was sent.
/// (Before issue #19's reading-side limits they allocated the declared length up front:
/// 4 bytes cost up to 256 MiB and ~0.5 s.)
fn protocol_stream_extra(_: &[u8]) -> usize {
    0
}

fn protocol_stream_seeds() -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let mut b = Vec::new();
    for m in messages() {
        m.encode(&mut b);
        all.extend_from_slice(&b);
    }
    // A streamed Gradient: head, then values.
    let mut head = Vec::new();
    protocol::encode_gradient_head(
        &Message::GradientPart {
            task: 1,
            iteration: 1,
            offset: 8,
            values: vec![],
        },
        3,
        &mut head,
    );
    head.extend_from_slice(&[0u8; 12]);
    vec![all, head]
}

const IDX: &str = "fuzz/train-images-idx3-ubyte";

/// `parse_idx_u8` with the dimension count the magic announces (1–3).
fn idx(b: &[u8]) -> Outcome {
    let dims = b.get(3).map_or(3, |&d| (d as usize).clamp(1, 3));
    match pacer_runtime::data::parse_idx_u8(b, dims, std::path::Path::new(IDX)) {
        Ok(_) => Outcome::Accepted,
        Err(e) => Outcome::Rejected {
            message: e.to_string(),
            place: Place::Whole,
        },
    }
}

fn idx_seeds() -> Vec<Vec<u8>> {
    let (px, labels) = pacer_runtime::data::synthetic_digits(3, 1);
    vec![
        pacer_runtime::data::idx_bytes(&[3, 8, 8], &px),
        pacer_runtime::data::idx_bytes(&[3], &labels),
        pacer_runtime::data::idx_bytes(&[2, 3], &[1, 2, 3, 4, 5, 6]),
        pacer_runtime::data::idx_bytes(&[0, 28, 28], &[]),
    ]
}

/// LIBSVM goes through `data::load("libsvm:FILE")` (its parser is private), so
/// each input is written to a per-thread file under the system temp folder.
fn libsvm(b: &[u8]) -> Outcome {
    // Dense storage: rows × largest index floats, by design (capped at
    // MAX_DENSE_VALUES = 2^30, 4 GiB). Inputs that declare more than 2^20 values
    // (4 MiB) are skipped to keep the fuzzer fast and small; `extra_mem` allows
    // the declared size.
    if libsvm_dense_values(b) > 1 << 20 {
        return Outcome::Skipped;
    }
    thread_local! {
        static FILE: TempFile = TempFile::new();
    }
    FILE.with(|f| {
        let p = &f.0;
        if let Err(e) = std::fs::write(p, b) {
            return Outcome::Broken(format!("cannot write {}: {e}", p.display()));
        }
        let spec = format!("libsvm:{}", p.display());
        let r = pacer_runtime::data::load(&spec);
        match r {
            Ok(_) => Outcome::Accepted,
            Err(e) => {
                let message = e.to_string();
                // The fuzz harness checks the path is named: it is this file's.
                let message = message.replace(&p.display().to_string(), LIBSVM);
                let place = message
                    .split_once(": line ")
                    .and_then(|(_, r)| r.split(':').next()?.parse().ok())
                    .map_or(Place::Whole, Place::Line);
                Outcome::Rejected { message, place }
            }
        }
    })
}

const LIBSVM: &str = "fuzz/train.svm";

/// A per-thread input file, in memory where the system has `/dev/shm` (a disk
/// write per input would make this target 50× slower), removed when the thread ends.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new() -> TempFile {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let id = format!("{:?}", std::thread::current().id())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        TempFile(dir.join(format!("pacer-fuzz-{}-{id}.svm", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Samples × largest feature index, as the loader will store them (an upper bound
/// computed without the loader: every non-comment line, every `N:`).
fn libsvm_dense_values(b: &[u8]) -> usize {
    let t = text(b);
    let (mut rows, mut most) = (0usize, 0usize);
    for line in t.lines() {
        let line = line.split('#').next().unwrap_or("");
        if line.trim().is_empty() {
            continue;
        }
        rows += 1;
        for tok in line.split_whitespace().skip(1) {
            if let Some(i) = tok
                .split_once(':')
                .and_then(|(i, _)| i.parse::<usize>().ok())
            {
                most = most.max(i);
            }
        }
    }
    rows.saturating_mul(most)
}

fn libsvm_extra(b: &[u8]) -> usize {
    // Dense train + test matrices (f32), and the label strings per row.
    libsvm_dense_values(b).saturating_mul(4)
}

fn libsvm_seeds() -> Vec<Vec<u8>> {
    vec![
        b"1 1:0.5 3:1.25\n-1 2:1 # a comment\n1.0 1:-3e-2 2:4 3:0\n0 4:1\n1 1:1\n-1 2:2\n1 3:3\n0 1:0.1\n1 2:0.2\n-1 3:0.3\n0 4:0.4\n"
            .to_vec(),
    ]
}

/// Every target, in the order the fuzz binary runs them.
pub fn all() -> Vec<Target> {
    let t = |name, origin, run, seeds| Target {
        name,
        origin,
        run,
        seeds,
        extra_mem: no_extra,
    };
    vec![
        t("cluster_spec", CLUSTER, cluster_spec, cluster_spec_seeds),
        t(
            "cluster_toml",
            CLUSTER_TOML,
            cluster_toml,
            cluster_toml_seeds,
        ),
        t("placements", PLACEMENTS, placements, placements_seeds),
        t("scalability", SCALABILITY, scalability, scalability_seeds),
        t("validation", VALIDATION, validation, validation_seeds),
        t(
            "pollux_workload",
            WORKLOAD,
            pollux_workload,
            pollux_workload_seeds,
        ),
        t("philly", PHILLY, philly, philly_seeds),
        t(
            "gavel_throughputs",
            THROUGHPUTS,
            gavel_throughputs,
            gavel_throughputs_seeds,
        ),
        t("gavel_trace", GAVEL_TRACE, gavel_trace, gavel_trace_seeds),
        t(
            "gavel_trace_hetero",
            GAVEL_TRACE,
            gavel_trace_hetero,
            gavel_trace_seeds,
        ),
        t(
            "elasticflow_table",
            EF_TABLE,
            elasticflow_table,
            elasticflow_table_seeds,
        ),
        t(
            "elasticflow_trace",
            EF_TRACE,
            elasticflow_trace,
            elasticflow_trace_seeds,
        ),
        t("quality", QUALITY, quality, quality_seeds),
        t("scenario", SCENARIO, scenario, scenario_seeds),
        t("protocol_frame", PEER, protocol_frame, protocol_frame_seeds),
        Target {
            extra_mem: protocol_stream_extra,
            ..t(
                "protocol_stream",
                PEER,
                protocol_stream,
                protocol_stream_seeds,
            )
        },
        t(
            "serve_job_toml",
            JOB_TOML,
            serve_job_toml,
            serve_job_toml_seeds,
        ),
        t(
            "serve_job_json",
            API_BODY,
            serve_job_json,
            serve_job_json_seeds,
        ),
        t("serve_report", API_BODY, serve_report, serve_report_seeds),
        t("serve_login", API_BODY, serve_login, serve_login_seeds),
        t("idx", IDX, idx, idx_seeds),
        Target {
            extra_mem: libsvm_extra,
            ..t("libsvm", LIBSVM, libsvm, libsvm_seeds)
        },
    ]
}

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Target> {
    all().into_iter().find(|t| t.name == name)
}
