//! One job of Sia's applications pinned on 8 devices of one type, on those plus 8 of
//! another (a mix, `--mixed-types`), and on 16 of the first type, on 2-device nodes
//! (docs/mixed-types.md, "Why the balanced estimate is small"), on the tables as
//! measured and under the `--shared-fabric dgx-ext` what-if; and, per application and
//! type, the fitted model's step (what a policy values) against the tables' (what one-type
//! jobs and mixes run on) at 8 and 16 devices on 2-device nodes. Needs Sia's tables:
//! `PACER_SIA_TRACES=../shared/data/sia/traces cargo test --release -p pacer-sim \
//! --test mixed_sia_pairs -- --ignored --nocapture`.

mod common;

use common::Pin;
use pacer_model::{Allocation, ClusterSpec, JobSpec, NodeId};
use pacer_sim::apps::load_sia_dir_with;
use pacer_sim::{SimConfig, SimJob, Simulation, Work};

#[test]
#[ignore = "needs Sia's tables (PACER_SIA_TRACES)"]
fn mixes_of_sia_types() {
    let dir = std::env::var("PACER_SIA_TRACES").expect("PACER_SIA_TRACES: Sia's traces folder");
    // Relative to the repository's root.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for fabric in [None, Some("dgx-ext")] {
        eprintln!(
            "tables: {}",
            fabric.map_or("as measured".into(), |f| format!("--shared-fabric {f}"))
        );
        pairs(&load_sia_dir_with(&root.join(&dir), false, fabric).unwrap());
    }
}

fn pairs(apps: &[pacer_sim::AppModel]) {
    for (app, batch) in [("bert", 384), ("deepspeech2", 320), ("yolov3", 64)] {
        let ai = apps.iter().position(|a| a.name() == app).unwrap();
        let m = &apps[ai];
        for t in m.typed() {
            let fit = t.perf.unwrap();
            let ratios: Vec<String> = [(4u32, 8u32), (8, 16)]
                .iter()
                .flat_map(|&(nodes, r)| [8.0, 16.0, 32.0].map(move |b| (nodes, r, b)))
                .map(|(nodes, r, b)| {
                    let table = m
                        .step_time_on(&t.device_type, &vec![2; nodes as usize], b)
                        .0;
                    format!("{r}x{b}: {:.2}", fit.step_time(nodes, r, b, 0) / table)
                })
                .collect();
            eprintln!(
                "{app} on {}: fitted / table step {}",
                t.device_type,
                ratios.join(", ")
            );
        }
        let jobs = vec![SimJob {
            spec: JobSpec {
                name: "j".into(),
                arrival_s: 0.0,
                application: app.into(),
                requested_replicas: 8,
                requested_batch: batch,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Profiled { app: ai },
        }];
        let run = |cl: &str, slots: Vec<(u32, u32)>| {
            let cluster = ClusterSpec::parse(cl, "t").unwrap();
            let sim = Simulation {
                cluster: &cluster,
                apps,
                jobs: &jobs,
                config: SimConfig {
                    mixed_types: true,
                    ..SimConfig::default()
                },
            };
            let mut p = Pin {
                alloc: Allocation::from_pairs(slots.into_iter().map(|(n, c)| (NodeId(n), c))),
                adaptive: true,
            };
            sim.run(&mut p, |_| {}).unwrap().summary.avg_jct_s
        };
        for (a, b) in [
            ("dgx-ext", "rtx"),
            ("rtx", "dgx-ext"),
            ("dgx-ext", "aws"),
            ("rtx", "aws"),
        ] {
            let cl = format!("6x2:{a},6x2:{b}");
            let one: Vec<(u32, u32)> = (0..4).map(|n| (n, 2)).collect();
            let mix: Vec<(u32, u32)> = (0..4).chain(6..10).map(|n| (n, 2)).collect();
            let one_big: Vec<(u32, u32)> = (0..8).map(|n| (n, 2)).collect();
            let t1 = run(&cl, one.clone());
            let tm = run(&cl, mix);
            let ts = run(&format!("12x2:{a}"), one_big);
            let tb = run(&format!("6x2:{b},6x2:{a}"), one);
            eprintln!("{app} 8 {a}: {:.0} s; +8 {b} (mix): {:.0} s ({:+.1} %); 16 {a}: {:.0} s ({:+.1} %); 8 {b} alone {:.0} s", t1, tm, 100.0 * (tm / t1 - 1.0), ts, 100.0 * (ts / t1 - 1.0), tb);
        }
    }
}
