//! Security: every endpoint but `/healthz` answers 401 without the right token
//! (bearer, or the dashboard's session cookie from `POST /login`); oversized bodies, malformed JSON/TOML, unknown
//! fields, negative or absurd numbers and `../` in a log request answer a 4xx that
//! names the problem, and the state is unchanged by any of them.

mod common;

use common::{test_dir, Service};
use std::time::{Duration, Instant};

/// A bad request: method, path, body, content type, expected status and field.
type Case = (
    &'static str,
    String,
    Vec<u8>,
    &'static str,
    u16,
    &'static str,
);

const REPORT: &str =
    r#"{"step":5,"samples":160,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":100.0}"#;

fn snapshot(svc: &Service) -> serde_json::Value {
    let mut v = svc.get_json("/v1/jobs");
    for j in v["jobs"].as_array_mut().unwrap() {
        // Attained device time grows while the job runs; everything else must not move.
        j.as_object_mut().unwrap().remove("attained_device_s");
    }
    let ev = svc.get_json("/v1/jobs/job-1/events");
    serde_json::json!({"jobs": v, "events": ev, "reports": svc.get_json("/v1/jobs/job-1/reports")})
}

#[test]
fn tokens_limits_and_malformed_input() {
    let dir = test_dir("security");
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "2x2:cpu",
            "--policy",
            "fifo",
            "--round-s",
            "0.2",
        ],
    );
    let admin = svc.client();
    let tok_file = dir.join("job-token");
    let spec = format!(
        "name = \"sleeper\"\ncommand = [\"sh\", \"-c\", \"echo $PACER_TOKEN > {}; exec sleep 60\"]\n",
        tok_file.display()
    );
    let a = svc.call(
        &admin,
        "POST",
        "/v1/jobs",
        Some(spec.as_bytes()),
        "application/toml",
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    let t0 = Instant::now();
    while !std::fs::read_to_string(&tok_file).is_ok_and(|t| t.trim().len() == 64) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the job did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let job_token = std::fs::read_to_string(&tok_file)
        .unwrap()
        .trim()
        .to_string();
    let a = svc.call(
        &svc.client_with(&job_token),
        "POST",
        "/v1/jobs/job-1/reports",
        Some(REPORT.as_bytes()),
        "application/json",
    );
    assert_eq!(a.status, 202, "{}", String::from_utf8_lossy(&a.body));
    let before = snapshot(&svc);

    // 401 everywhere but /healthz (and the static page), with no token, a wrong one,
    // and a job's report token outside its own report route.
    let none = svc.client_with("");
    let wrong = svc.client_with("0123456789abcdef0123456789abcdef");
    let job = svc.client_with(&job_token);
    let endpoints: &[(&str, &str)] = &[
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/jobs/job-1"),
        ("DELETE", "/v1/jobs/job-1"),
        ("POST", "/v1/jobs/job-1/cancel"),
        ("GET", "/v1/jobs/job-1/events"),
        ("GET", "/v1/jobs/job-1/logs"),
        ("GET", "/v1/jobs/job-1/reports"),
        ("POST", "/v1/jobs/job-1/reports"),
        ("GET", "/v1/cluster"),
        ("GET", "/v1/rounds"),
        ("GET", "/metrics"),
        ("GET", "/v1/no-such-thing"),
        ("POST", "/v1/jobs/job-999/reports"),
        ("POST", "/v1/jobs/..%2Fx/reports"),
    ];
    for (m, p) in endpoints {
        for (who, c) in [
            ("no token", &none),
            ("wrong token", &wrong),
            ("job token", &job),
        ] {
            if *p == "/v1/jobs/job-1/reports" && *m == "POST" && who == "job token" {
                continue;
            }
            let a = svc.call(c, m, p, Some(REPORT.as_bytes()), "application/json");
            assert_eq!(
                a.status,
                401,
                "{m} {p} with {who}: {}",
                String::from_utf8_lossy(&a.body)
            );
            assert_eq!(a.json().unwrap()["field"], "authorization");
        }
    }
    assert_eq!(svc.call(&none, "GET", "/healthz", None, "").status, 200);
    dashboard_login(&svc, &job_token);

    // Bad input: (method, path, body, content type, status, field).
    let big = vec![b'#'; 100 * 1024];
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/v1/jobs".into(),
            big.clone(),
            "application/toml",
            413,
            "body",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            big,
            "application/json",
            413,
            "body",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [".to_vec(),
            "application/toml",
            400,
            "command",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"{\"name\": ".to_vec(),
            "application/json",
            400,
            "name",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [\"true\"]\nreplicaz = 2\n".to_vec(),
            "application/toml",
            400,
            "replicaz",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            br#"{"name":"x","command":["true"],"gpus":2}"#.to_vec(),
            "application/json",
            400,
            "gpus",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [\"true\"]\nreplicas = -1\n".to_vec(),
            "application/toml",
            400,
            "replicas",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [\"true\"]\nreplicas = 1000000\n".to_vec(),
            "application/toml",
            400,
            "replicas",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [\"true\"]\nglobal_batch = 99999999999999\n".to_vec(),
            "application/toml",
            400,
            "global_batch",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = []\n".to_vec(),
            "application/toml",
            400,
            "command",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            b"name = \"x\"\ncommand = [\"true\"]\ndevice_types = [\"h100\"]\n".to_vec(),
            "application/toml",
            400,
            "device_types",
        ),
        (
            "POST",
            "/v1/jobs".into(),
            vec![0xff, 0xfe, 0x00],
            "application/toml",
            400,
            "body",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            REPORT.replace("\"step\":5", "\"step\":-5").into_bytes(),
            "application/json",
            400,
            "step",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            REPORT.replace("100.0}", "1e300}").into_bytes(),
            "application/json",
            400,
            "throughput",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            REPORT.replace("}", ",\"extra\":1}").into_bytes(),
            "application/json",
            400,
            "extra",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            REPORT
                .replace("\"time_s\":1.0", "\"time_s\":-1.0")
                .into_bytes(),
            "application/json",
            400,
            "time_s",
        ),
        (
            "POST",
            "/v1/jobs/job-1/reports".into(),
            b"{not json".to_vec(),
            "application/json",
            400,
            "body",
        ),
        ("GET", "/v1/jobs/../logs".into(), vec![], "", 400, "id"),
        (
            "GET",
            "/v1/jobs/..%2F..%2Fetc%2Fpasswd/logs".into(),
            vec![],
            "",
            400,
            "id",
        ),
        (
            "GET",
            "/v1/jobs/job-1/logs?file=../../etc/passwd".into(),
            vec![],
            "",
            400,
            "file",
        ),
        (
            "GET",
            "/v1/jobs/job-1/logs?offset=-1".into(),
            vec![],
            "",
            400,
            "query",
        ),
        (
            "GET",
            "/v1/jobs/job-1/logs?offset=99999999".into(),
            vec![],
            "",
            400,
            "offset",
        ),
        ("GET", "/v1/jobs/JOB-1".into(), vec![], "", 400, "id"),
        ("GET", "/v1/jobs/job-999".into(), vec![], "", 404, "id"),
        (
            "GET",
            "/v1/jobs?state=bogus".into(),
            vec![],
            "",
            400,
            "query",
        ),
    ];
    for (m, p, body, ct, status, field) in &cases {
        let a = svc.call(&admin, m, p, Some(body), ct);
        let v = a
            .json()
            .unwrap_or_else(|_| panic!("{m} {p}: not JSON: {}", String::from_utf8_lossy(&a.body)));
        assert_eq!(
            (a.status, v["field"].as_str().unwrap()),
            (*status, *field),
            "{m} {p}: {v}"
        );
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        snapshot(&svc),
        before,
        "a rejected request changed the state"
    );

    // Cancel cleans up the sleeper (SIGTERM ends it).
    let a = svc.call(&admin, "POST", "/v1/jobs/job-1/cancel", None, "");
    assert_eq!(a.status, 202);
    let t0 = Instant::now();
    while svc.get_json("/v1/jobs/job-1")["state"] != "cancelled" {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "cancel did not finish"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `/` and `/login`: no credential or a wrong one is a 401 with the login form; the
/// right token posted to `/login` sets an HttpOnly, SameSite=Strict cookie (not the
/// token itself) that opens `/` and the API; bodies over the limit are a 413.
fn dashboard_login(svc: &Service, job_token: &str) {
    let token = svc.token();
    let form = "content-type: application/x-www-form-urlencoded";
    for (who, extra) in [
        ("no credential", vec![]),
        (
            "wrong bearer",
            vec!["authorization: Bearer 0123456789abcdef0123456789abcdef".to_string()],
        ),
        (
            "job token",
            vec![format!("authorization: Bearer {job_token}")],
        ),
        (
            "wrong cookie",
            vec![format!("cookie: pacer_session={}", "0".repeat(64))],
        ),
        (
            "token as cookie",
            vec![format!("cookie: pacer_session={token}")],
        ),
    ] {
        let h: Vec<&str> = extra.iter().map(String::as_str).collect();
        for (m, p) in [("GET", "/"), ("GET", "/login")] {
            let a = svc.raw(m, p, &h, b"");
            assert_eq!(a.status, 401, "{m} {p} with {who}");
            assert!(
                a.body.contains("<form") && a.body.contains("action=\"/login\""),
                "{who}: {}",
                a.body
            );
            assert!(!a.body.contains("<table>"), "{who}: the dashboard leaked");
        }
    }
    // Wrong, empty or malformed logins: 401 with the form, or 400 naming the field;
    // no cookie set.
    for (body, status) in [
        ("token=wrong-token-0123456789".to_string(), 401),
        ("token=".to_string(), 401),
        (format!("token={token}x"), 401),
        ("tokn=abc".to_string(), 400),
        ("token=a&token=b&x=1".to_string(), 400),
    ] {
        let a = svc.raw("POST", "/login", &[form], body.as_bytes());
        assert_eq!(a.status, status, "POST /login {body}: {}", a.body);
        assert!(a.header("set-cookie").is_none(), "{body}");
        if status == 400 {
            let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(v["field"], "token", "{v}");
        }
    }
    let big = format!("token={}", "a".repeat(100 * 1024));
    let a = svc.raw("POST", "/login", &[form], big.as_bytes());
    assert_eq!(a.status, 413, "{}", a.body);
    assert!(a.header("set-cookie").is_none());

    // The right token: a 303 to `/` with the cookie.
    let a = svc.raw(
        "POST",
        "/login",
        &[form],
        format!("token={token}").as_bytes(),
    );
    assert_eq!(
        (a.status, a.header("location")),
        (303, Some("/")),
        "{}",
        a.body
    );
    let set = a.header("set-cookie").expect("a session cookie");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(
            set.split(';').any(|x| x.trim() == attr),
            "{attr} missing in {set}"
        );
    }
    let pair = set.split(';').next().unwrap().trim().to_string();
    let value = pair.strip_prefix("pacer_session=").expect("cookie name");
    assert_eq!(value.len(), 64);
    assert!(!value.contains(&token), "the cookie is the token");
    let cookie = format!("cookie: theme=x; {pair}");
    let a = svc.raw("GET", "/", &[&cookie], b"");
    assert_eq!(a.status, 200);
    assert!(a.body.contains("<table>") && a.body.contains("pacer serve"));
    let a = svc.raw("GET", "/v1/jobs", &[&cookie], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("\"sleeper\""));
    // A bearer token opens `/` too.
    let a = svc.raw(
        "GET",
        "/",
        &[&format!("authorization: Bearer {token}")],
        b"",
    );
    assert_eq!(a.status, 200);
}
