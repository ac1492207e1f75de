//! Deadline jobs planned from a profile (`app`): the option admission takes, the job's
//! view, and the answers to bad specs.

use super::{reopen, round, Fake};
use crate::goal::{GoalModels, ProfileSource};
use crate::job::{deadline_sizes, job_view};
use crate::spec::JobSpec;
use pacer_control::job::goal::{Goal, GoalOption};
use pacer_policy::deadline::plan::PlanJob;

/// A deadline service on `cluster` that reads the simulator's profiles, as `pacer serve`
/// does.
fn core(name: &str, cluster: &str, policy: &str) -> (tempfile::TempDir, super::Core) {
    let (dir, mut c) = super::core(name, cluster, policy);
    c.goals = GoalModels::new(Some(std::sync::Arc::new(ProfileSource {
        embedded: pacer_sim::embedded_profiles(),
        folder: |d| pacer_sim::load_app_dir(d).map_err(|e| e.to_string()),
    })));
    (dir, c)
}

fn spec(extra: &str, deadline_s: f64) -> JobSpec {
    JobSpec::from_toml(
        &format!(
            "name = \"g\"\ncommand = [\"true\"]\nreplicas = 4\nadaptive = true\n\
             max_replicas = 16\napp = \"cifar10\"\ndeadline = \"{deadline_s:.0}\"\n{extra}"
        ),
        "test",
    )
    .unwrap()
}

/// The options the service should try for `spec` on a cluster of 4-device nodes.
fn options(c: &super::Core, spec: &JobSpec) -> Vec<GoalOption> {
    let m = c.goals.get("cifar10").unwrap();
    let goal = crate::goal::goal_of(spec, &m);
    m.options(goal, None, &deadline_sizes(spec), 4)
}

/// A deadline no option's fastest time lies within 3 % of, below `below` and above
/// the fastest option's.
fn clear_deadline(opts: &[GoalOption], below: f64) -> f64 {
    let fastest = opts
        .iter()
        .map(GoalOption::fastest_s)
        .fold(f64::INFINITY, f64::min);
    let mut d = below;
    while d > fastest * 1.05 {
        if opts.iter().all(|o| (o.fastest_s() / d - 1.0).abs() > 0.03) {
            return d;
        }
        d *= 0.97;
    }
    panic!("no clear deadline between {fastest} and {below}");
}

#[test]
fn admission_takes_the_goals_best_option_that_meets_the_deadline() {
    let (_state, mut c) = core("goal-best", "4x4:t4", "deadline");
    let probe = spec("", 1e6);
    let opts = options(&c, &probe);
    assert!(opts.len() >= 3, "{opts:?}");
    // Loose: the best option (Courier's best predicted metric), on the fewest devices
    // that meet the deadline.
    let loose = 3.0 * opts[0].fastest_s();
    let (a, _) = c.submit(spec("", loose)).unwrap();
    let d = a.deadline.clone().unwrap();
    let p = d.profile.clone().expect("planned from the profile");
    assert_eq!(p.option, opts[0]);
    assert_eq!(p.declined_better, 0);
    assert_eq!(
        a.spec.global_batch,
        Some(opts[0].global_batch.round() as u64)
    );
    assert!(d.share_now >= 1, "{d:?}");
    // Fewest devices: one level less would not finish by the deadline.
    let below = opts[0].levels.iter().rfind(|l| l.0 < d.share_now);
    if let Some(&(_, rate)) = below {
        assert!(opts[0].samples / rate > loose * 0.97, "{below:?} {d:?}");
    }
    // Tight, below the best option's fastest time: the first option in the goal's
    // order whose fastest time meets it, on a cluster of its own.
    let (_s2, mut c2) = core("goal-tight", "4x4:t4", "deadline");
    let tight = clear_deadline(&opts, 0.9 * opts[0].fastest_s());
    let want = opts.iter().position(|o| o.fastest_s() < tight).unwrap();
    assert!(want > 0);
    let (b, _) = c2.submit(spec("", tight)).unwrap();
    let p = b.deadline.unwrap().profile.unwrap();
    assert_eq!(p.declined_better as usize, want, "{p:?}");
    assert_eq!(p.option, opts[want]);
    assert!(!c2
        .goals
        .get("cifar10")
        .unwrap()
        .conv
        .better(p.option.metric, opts[0].metric));
    // Impossible: below every option's fastest time; declined with the earliest
    // deadline any option fits, and nothing kept.
    let fastest = opts
        .iter()
        .map(GoalOption::fastest_s)
        .fold(f64::INFINITY, f64::min);
    let t0 = super::super::now_ms();
    let e = c2.submit(spec("", 0.5 * fastest)).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "deadline"), "{e}");
    assert!(e.message.contains("profile `cifar10`"), "{}", e.message);
    let earliest = e.detail.as_ref().unwrap()["admission"]["earliest_deadline_ms"]
        .as_u64()
        .unwrap() as f64
        - t0 as f64;
    // The fastest option alone on the 12 devices b leaves, or after b: at least its
    // fastest time.
    assert!(earliest >= fastest * 1e3 * 0.99, "{earliest} vs {fastest}");
    assert_eq!(c2.jobs.len(), 1);
}

#[test]
fn the_job_is_planned_and_launched_with_its_options_speed_and_batch() {
    let (_state, mut c) = core("goal-view", "4x4:t4", "deadline");
    let s = spec("goal = \"time\"", 1e6);
    let opts = options(&c, &s);
    let (a, _) = c.submit(s).unwrap();
    let p = a.deadline.clone().unwrap().profile.unwrap();
    // Time: the fastest option first, to the common target.
    assert_eq!(p.option, opts[0]);
    assert!(matches!(p.goal, Goal::Time { .. }));
    // What the policy sees: the option's samples, at its levels.
    let v = job_view(&c.jobs[&a.id], &c.settings.cluster, c.epoch_ms);
    assert_eq!(v.work_left, p.option.samples);
    let pj = PlanJob::from_view(&v, &c.settings.cluster, true);
    let levels: Vec<(u32, f64)> = pj.levels.iter().copied().collect();
    assert_eq!(levels, p.option.levels);
    // Launched with the batch admission chose.
    let fake = Fake::default();
    round(&mut c, &fake);
    let l = fake.launches();
    assert_eq!(l.len(), 1);
    let b = p.option.global_batch.round() as u64;
    assert!(
        l[0].env
            .contains(&("PACER_GLOBAL_BATCH".into(), b.to_string())),
        "{:?}",
        l[0].env
    );
}

#[test]
fn a_given_batch_or_folder_is_used_and_bad_goals_are_refused() {
    let (_state, mut c) = core("goal-bad", "4x4:t4", "deadline");
    // The spec's batch: the only option.
    let (a, _) = c.submit(spec("global_batch = 512", 1e6)).unwrap();
    assert_eq!(
        a.deadline.unwrap().profile.unwrap().option.global_batch,
        512.0
    );
    // A folder in the Pollux layout, by absolute path.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/data/pollux/ncf");
    let ncf = spec("", 1e6);
    let ncf = JobSpec {
        app: Some(dir.into()),
        ..ncf
    };
    let (b, _) = c.submit(ncf).unwrap();
    assert_eq!(b.deadline.unwrap().profile.unwrap().app, dir);
    for (extra, app, field) in [
        ("", "nonesuch", "app"),
        ("", "relative/dir", "app"),
        ("", "/nonexistent/dir", "app"),
        ("goal = \"fast\"", "cifar10", "goal"),
        ("goal = \"time\"\nepochs = 3", "cifar10", "epochs"),
        ("target_metric = 0.9", "cifar10", "target_metric"),
        ("epochs = -1", "cifar10", "epochs"),
        ("expected_runtime = \"1h\"", "cifar10", "expected_runtime"),
        // A local batch of 1/16 on every size: no measured placement covers it.
        ("global_batch = 1", "cifar10", "app"),
    ] {
        let s = JobSpec {
            app: Some(app.into()),
            ..spec(extra, 1e6)
        };
        let e = c.submit(s).unwrap_err();
        assert_eq!(
            (e.status, e.field.as_str()),
            (400, field),
            "{extra} {app}: {e}"
        );
    }
    // A profile without a deadline, or a goal without a profile.
    for (toml, field) in [
        (
            "name = \"x\"\ncommand = [\"true\"]\napp = \"cifar10\"\n",
            "app",
        ),
        ("name = \"x\"\ncommand = [\"true\"]\nepochs = 3\n", "epochs"),
    ] {
        let e = c
            .submit(JobSpec::from_toml(toml, "t").unwrap())
            .unwrap_err();
        assert_eq!((e.status, e.field.as_str()), (400, field), "{toml}: {e}");
    }
    assert_eq!(c.jobs.len(), 2);
    // A service started without profiles (`pacer-serve run`) refuses `app`.
    let (_s2, mut bare) = super::core("goal-none", "4x4:t4", "deadline");
    let e = bare.submit(spec("", 1e6)).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (400, "app"), "{e}");
    assert!(e.message.contains("reads no profiles"), "{e}");
}

#[test]
fn the_chosen_option_comes_back_after_a_restart() {
    let (state, mut c) = core("goal-restart", "4x4:t4", "deadline");
    let (a, d) = c.submit(spec("", 1e6)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(c.take_flush()).unwrap().run();
    drop(d);
    let view = |c: &super::Core| job_view(&c.jobs[&a.id], &c.settings.cluster, c.epoch_ms);
    let (work, speed) = (view(&c).work_left, view(&c).speed.clone());
    drop(c);
    // A restarted service (without profiles, even) plans the job as admitted.
    let c = reopen(state.path(), "4x4:t4", "deadline");
    let j = &c.jobs[&a.id];
    assert_eq!(j.deadline, a.deadline);
    assert_eq!(j.spec.global_batch, a.spec.global_batch);
    assert_eq!(view(&c).work_left, work);
    assert_eq!(view(&c).speed, speed);
}

#[test]
fn the_cost_goal_takes_the_batch_of_fewest_device_seconds_that_fits() {
    let (_state, mut c) = core("goal-cost", "4x4:t4", "deadline");
    let s = spec("goal = \"cost\"\ntarget_metric = 0.9", 1e6);
    let opts = options(&c, &s);
    assert!(opts.len() >= 2);
    let (a, _) = c.submit(s).unwrap();
    let p = a.deadline.unwrap().profile.unwrap();
    assert_eq!(p.goal, Goal::Cost { target: 0.9 });
    assert_eq!(p.option, opts[0]);
    let least = opts
        .iter()
        .map(GoalOption::cheapest_device_s)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(p.option.cheapest_device_s(), least);
    // The time goal's first option is the fastest, not necessarily the cheapest.
    let t = options(&c, &spec("goal = \"time\"\ntarget_metric = 0.9", 1e6));
    assert!(t[0].fastest_s() <= p.option.fastest_s());
}
