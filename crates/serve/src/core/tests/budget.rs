//! Cost budgets in the round: device-hours and dollars held, stops, declines on
//! submission, and what `/metrics` shows of them.

use super::*;

#[test]
fn a_job_is_stopped_once_it_has_held_its_budget() {
    let (_state, mut c) = core("budget", "1x4:t4", "fifo");
    let fake = Fake::default();
    // 0.0002 device-hours = 0.72 device-seconds: 0.36 s on its 2 devices.
    let a = submit(
        &mut c,
        "name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\nbudget_device_hours = 0.0002\n",
    );
    let b = submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\nreplicas = 2\n");
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a].state, JobState::Running);
    assert_eq!(c.jobs[&b].state, JobState::Running);
    std::thread::sleep(std::time::Duration::from_millis(600));
    round(&mut c, &fake);
    // a held ≥ 1.2 device-seconds: SIGTERM, stopping; b has no budget and runs on.
    assert_eq!(c.jobs[&a].state, JobState::Stopping);
    assert!(c.jobs[&a].reason.as_deref().unwrap().contains("budget"));
    assert_eq!(c.jobs[&b].state, JobState::Running);
    let run_a = fake.launches()[0].run_id.clone();
    assert_eq!(
        fake.signals.lock().unwrap().clone(),
        vec![(run_a.clone(), StopSignal::Term)]
    );
    assert_eq!(c.metrics.budget_stops("device-hours"), 1);
    assert_eq!(c.metrics.budget_stops("USD"), 0);
    fake.exit(&run_a, RunStatus::Exited(143));
    round(&mut c, &fake);
    let ja = &c.jobs[&a];
    assert_eq!(ja.state, JobState::Cancelled);
    let why = ja.reason.as_deref().unwrap();
    assert!(
        why.starts_with("budget spent: ") && why.contains("of 0.0002 device-hours held"),
        "{why}"
    );
    // Not requeued: nothing launched again, and a spent budget is not counted twice.
    round(&mut c, &fake);
    assert_eq!(fake.launches().len(), 2);
    assert_eq!(c.metrics.budget_stops("device-hours"), 1);
}

#[test]
fn a_queued_job_whose_budget_is_spent_ends_without_running() {
    let (_state, mut c) = core("budget-queued", "1x2:t4", "fifo");
    let fake = Fake::default();
    let a = submit(
        &mut c,
        "name = \"a\"\ncommand = [\"true\"]\nbudget_device_hours = 1\n",
    );
    // As if it had run for an hour on one device, then been preempted.
    c.jobs.get_mut(&a).unwrap().attained_device_s = 3600.0;
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a].state, JobState::Cancelled);
    assert!(c.jobs[&a]
        .reason
        .as_deref()
        .unwrap()
        .starts_with("budget spent: 1.000 of 1"));
    assert!(fake.launches().is_empty());
}

#[test]
fn a_job_expected_to_cost_more_than_its_budget_is_declined_and_not_stored() {
    let (_state, mut c) = core("budget-admit", "1x4:t4", "fifo");
    let spec = |budget: &str| {
        JobSpec::from_toml(
            &format!(
                "name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\nexpected_runtime = \"2h\"\n\
                 budget_device_hours = {budget}\n"
            ),
            "test",
        )
        .unwrap()
    };
    // 2 h on 2 devices: 4 device-hours expected.
    let e = c.submit(spec("3.5")).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "budget_device_hours"));
    assert!(
        e.message.contains("expected cost is 4.000 device-hours"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("raise the budget to at least 4.000"),
        "{}",
        e.message
    );
    assert!(c.jobs.is_empty(), "nothing stored");
    c.submit(spec("4")).unwrap();
    assert_eq!(c.jobs.len(), 1);
}

#[test]
fn a_dollar_budget_is_spent_at_the_type_s_price_and_checked_on_submission() {
    let (_state, mut c) = core("budget-usd", "1x2:t4,1x2:a100", "fifo");
    let spec = |extra: &str| {
        JobSpec::from_toml(
            &format!("name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\n{extra}"),
            "test",
        )
        .unwrap()
    };
    // No prices: a dollar budget cannot be counted, and nothing is stored.
    let e = c.submit(spec("budget_usd = 5\n")).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (400, "budget_usd"), "{e}");
    assert!(e.message.contains("--price"), "{}", e.message);
    assert!(c.jobs.is_empty());
    let cluster = c.settings.cluster.clone();
    let prices = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        crate::budget::parse_prices(&args, &cluster)
    };
    c.settings.prices = prices(&["a100=3", "t4=1"]).unwrap();
    // Bad budgets: one 400 naming the field; not a number: the parser names the key.
    for bad in ["0", "-1", "nan", "inf", "1e13"] {
        let e = c
            .submit(spec(&format!("budget_usd = {bad}\n")))
            .unwrap_err();
        assert_eq!(
            (e.status, e.field.as_str()),
            (400, "budget_usd"),
            "{bad}: {e}"
        );
        assert!(e.message.contains("US dollars"), "{bad}: {}", e.message);
    }
    let e = JobSpec::from_toml(
        "name = \"a\"\ncommand = [\"true\"]\nbudget_usd = \"ten\"\n",
        "t",
    )
    .unwrap_err();
    assert_eq!(e.field, "budget_usd", "{e}");
    assert!(c.jobs.is_empty());
    // 2 h on 2 devices is 4 device-hours: 4 USD on t4, the cheapest.
    let e = c
        .submit(spec("expected_runtime = \"2h\"\nbudget_usd = 3.5\n"))
        .unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "budget_usd"), "{e}");
    assert!(
        e.message.contains("raise the budget to at least 4.00"),
        "{}",
        e.message
    );
    assert!(c.jobs.is_empty());
    c.submit(spec("expected_runtime = \"2h\"\nbudget_usd = 4\n"))
        .unwrap();
    c.jobs.clear();
    // Spent while it runs, at the price of the type it holds.
    let fake = Fake::default();
    let (a, _) = c.submit(spec("budget_usd = 0.0001\n")).unwrap();
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a.id].state, JobState::Running);
    std::thread::sleep(std::time::Duration::from_millis(400));
    round(&mut c, &fake);
    let j = &c.jobs[&a.id];
    let price = match j.run.as_ref().unwrap().device_type.as_str() {
        "t4" => 1.0,
        "a100" => 3.0,
        t => panic!("{t}"),
    };
    assert!(j.attained_device_s >= 0.7, "{}", j.attained_device_s);
    let want = j.attained_device_s / 3600.0 * price;
    assert!((j.spent_usd - want).abs() < 1e-12, "{} {want}", j.spent_usd);
    assert_eq!(j.state, JobState::Stopping);
    assert!(
        j.reason
            .as_deref()
            .unwrap()
            .contains("budget of 0.0001 USD"),
        "{:?}",
        j.reason
    );
    // In /metrics: the stop under its unit, and what the job (not ended yet) spent.
    let text = c.metrics.render(c.jobs.values(), &[]);
    assert!(
        text.contains("pacer_serve_budget_stops_total{budget=\"usd\"} 1\n")
            && text.contains("pacer_serve_budget_stops_total{budget=\"device_hours\"} 0\n"),
        "{text}"
    );
    let line = format!("pacer_serve_job_spent_usd{{job=\"{}\"}} ", a.id);
    let shown: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {line} in {text}"))
        .parse()
        .unwrap();
    assert!(
        (shown - j.spent_usd).abs() < 1e-12,
        "{shown} {}",
        j.spent_usd
    );
    let run = fake.launches()[0].run_id.clone();
    fake.exit(&run, RunStatus::Exited(143));
    round(&mut c, &fake);
    let why = c.jobs[&a.id].reason.clone().unwrap();
    assert!(
        why.starts_with("budget spent: ") && why.contains("of 0.0001 USD spent"),
        "{why}"
    );
    assert_eq!(c.metrics.budget_stops("USD"), 1);
    assert_eq!(c.metrics.budget_stops("device-hours"), 0);
    // Bad prices: one error each, naming the flag and what was expected.
    for (args, says) in [
        (&["t4=1"][..], "no price for device type(s) a100"),
        (&["t4=1", "a100=2", "v100=3"][..], "no device type `v100`"),
        (&["t4=1", "t4=2", "a100=1"][..], "priced twice"),
        (&["t4", "a100=1"][..], "expected TYPE=USD_PER_DEVICE_H"),
        (&["t4=cheap", "a100=1"][..], "is not a number"),
        (&["t4=-1", "a100=1"][..], "from 0 to"),
        (&["t4=inf", "a100=1"][..], "from 0 to"),
    ] {
        let e = prices(args).unwrap_err().to_string();
        assert!(
            e.starts_with("--price") && e.contains(says),
            "{args:?}: {e}"
        );
    }
    assert_eq!(prices(&[]).unwrap(), None);
}

/// A fresh core on `cluster` with `prices` (`TYPE=USD` each), under `fifo`.
fn priced(name: &str, cluster: &str, prices: &[&str]) -> (tempfile::TempDir, Core) {
    let (state, mut c) = core(name, cluster, "fifo");
    let args: Vec<String> = prices.iter().map(|s| s.to_string()).collect();
    c.settings.prices = crate::budget::parse_prices(&args, &c.settings.cluster).unwrap();
    (state, c)
}

fn run_type(c: &Core, id: &str) -> String {
    c.jobs[id]
        .run
        .as_ref()
        .expect("running")
        .device_type
        .clone()
}

#[test]
fn a_job_on_a_dollar_budget_runs_where_its_work_costs_least() {
    let cluster = "1x2:a100,1x2:t4";
    let job = |extra: &str| {
        format!(
            "name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\ntotal_samples = 1000000\n{extra}"
        )
    };
    // Where the policy puts a job of its own accord: that type is made the dear one.
    let (_s0, mut c) = priced("cost-none", cluster, &["a100=1", "t4=1"]);
    let fake = Fake::default();
    let a = submit(&mut c, &job(""));
    round(&mut c, &fake);
    let dear = run_type(&c, &a);
    let cheap = if dear == "a100" { "t4" } else { "a100" };
    let prices = [format!("{dear}=3"), format!("{cheap}=1")];
    let prices: Vec<&str> = prices.iter().map(String::as_str).collect();
    // Nothing measured: every type is as fast, so the lower price decides.
    let (_s1, mut c) = priced("cost-budget", cluster, &prices);
    let a = submit(&mut c, &job("budget_usd = 100\n"));
    round(&mut c, &fake);
    assert_eq!(run_type(&c, &a), cheap);
    // Without a budget, or with `placement = "any"`, the policy's own choice.
    for extra in ["", "budget_usd = 100\nplacement = \"any\"\n"] {
        let (_s, mut c) = priced("cost-any", cluster, &prices);
        let a = submit(&mut c, &job(extra));
        round(&mut c, &fake);
        assert_eq!(run_type(&c, &a), dear, "{extra}");
    }
    // `placement = "cheapest"` without a budget, too.
    let (_s2, mut c) = priced("cost-cheapest", cluster, &prices);
    let a = submit(&mut c, &job("placement = \"cheapest\"\n"));
    round(&mut c, &fake);
    assert_eq!(run_type(&c, &a), cheap);
    // Measured ten times faster on the dear type: 3 / 10 per unit of work against 1.
    let (_s3, mut c) = priced("cost-measured", cluster, &prices);
    let a = submit(&mut c, &job("budget_usd = 100\n"));
    let measured = |ty: &str, x: f64| crate::job::Measured {
        device_type: ty.into(),
        replicas: 2,
        throughput: x,
    };
    c.jobs.get_mut(&a).unwrap().measured = vec![measured(cheap, 100.0), measured(&dear, 1000.0)];
    round(&mut c, &fake);
    assert_eq!(run_type(&c, &a), dear);
}

#[test]
fn a_running_job_moves_to_a_cheaper_type_only_when_the_saving_pays_its_restart() {
    let (_s, mut c) = priced("cost-move", "1x2:a100,1x2:t4", &["a100=3", "t4=1"]);
    let fake = Fake::default();
    let a = submit(
        &mut c,
        "name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\nbudget_usd = 100\ntotal_samples = 1000\n",
    );
    round(&mut c, &fake);
    assert_eq!(run_type(&c, &a), "t4");
    let measured = |ty: &str, x: f64| crate::job::Measured {
        device_type: ty.into(),
        replicas: 2,
        throughput: x,
    };
    // Cost per sample (USD per device-hour × devices ÷ samples/s, ÷ 3600 for dollars):
    // t4 at 10 samples/s 1·2/10 = 0.2, a100 at 1,000 samples/s 3·2/1000 = 0.006.
    // 10 samples left (1,000 − 990): the move saves (0.2 − 0.006)·10/3600 = 0.00054
    // USD, less than a 30 s restart on 2 a100s (0.05 USD): it stays.
    let cluster = c.settings.cluster.clone();
    let prices = c.settings.prices.clone().unwrap();
    {
        let j = c.jobs.get_mut(&a).unwrap();
        j.measured = vec![measured("t4", 10.0), measured("a100", 1000.0)];
        j.progress.samples = 990;
    }
    let view = crate::job::job_view(&c.jobs[&a], &cluster, c.epoch_ms);
    let keep = crate::budget::cost_types(&c.jobs[&a], &view, &cluster, &prices).unwrap();
    assert_eq!(keep, vec![false, true]);
    // 100,000 samples left: saves 5.4 USD, more than the restart: it moves.
    c.jobs.get_mut(&a).unwrap().spec.total_samples = Some(100_990);
    let view = crate::job::job_view(&c.jobs[&a], &cluster, c.epoch_ms);
    let keep = crate::budget::cost_types(&c.jobs[&a], &view, &cluster, &prices).unwrap();
    assert_eq!(keep, vec![true, false]);
    // And the round does move it: stopped now, relaunched on a100 once it has exited.
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a].state, JobState::Stopping);
    let first = fake.launches()[0].run_id.clone();
    fake.exit(&first, RunStatus::Exited(143));
    round(&mut c, &fake);
    round(&mut c, &fake);
    assert_eq!(run_type(&c, &a), "a100");
}

#[test]
fn placement_by_cost_needs_prices_and_the_cheapest_type_is_one_the_job_accepts() {
    let (_s, mut c) = core("cost-bad", "1x2:a100,1x2:t4", "fifo");
    let spec = |extra: &str| {
        JobSpec::from_toml(
            &format!("name = \"a\"\ncommand = [\"true\"]\nreplicas = 2\n{extra}"),
            "test",
        )
    };
    let e = c
        .submit(spec("placement = \"cheapest\"\n").unwrap())
        .unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (400, "placement"), "{e}");
    assert!(e.message.contains("--price"), "{}", e.message);
    // `any` asks nothing of the service.
    c.submit(spec("placement = \"any\"\n").unwrap()).unwrap();
    let e = spec("placement = \"fastest\"\n").unwrap_err();
    assert_eq!(e.field, "placement", "{e}");
    // A deadline job keeps its guarantee on any type it accepts.
    let args = vec!["a100=3".to_string(), "t4=1".to_string()];
    c.settings.prices = crate::budget::parse_prices(&args, &c.settings.cluster).unwrap();
    let e = c
        .submit(
            spec("placement = \"cheapest\"\ndeadline = \"1h\"\nexpected_runtime = \"1m\"\n")
                .unwrap(),
        )
        .unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (400, "placement"), "{e}");
    let with_deadline = spec("budget_usd = 5\ndeadline = \"1h\"\n").unwrap();
    assert!(!with_deadline.placed_by_cost());
    assert!(spec("budget_usd = 5\n").unwrap().placed_by_cost());
    // 1 h on 2 devices: 2 USD on t4, but the job takes a100 only: 6 USD, above 5.
    let e = c
        .submit(
            spec("device_types = [\"a100\"]\nexpected_runtime = \"1h\"\nbudget_usd = 5\n").unwrap(),
        )
        .unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "budget_usd"), "{e}");
    assert!(e.message.contains("at least 6.00"), "{}", e.message);
}
