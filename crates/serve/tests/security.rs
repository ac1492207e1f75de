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

/// Cross-site request forgery: the browser attaches the session cookie to a request
/// that a page on another port of the same host sends (same "site"), so a request that
/// changes state with the cookie must also come from the dashboard's origin
/// (`Sec-Fetch-Site`, `Origin`, else `Referer`) and carry the dashboard page's CSRF
/// token; bodies must be JSON or TOML (415 otherwise), for bearer clients too. Nothing
/// refused changes the state; the dashboard's own requests and bearer clients work.
#[test]
fn csrf_origin_and_content_types() {
    let dir = test_dir("csrf");
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "1x1:cpu",
            "--policy",
            "fifo",
            "--round-s",
            "0.2",
        ],
    );
    let token = svc.token();
    let form = "content-type: application/x-www-form-urlencoded";
    let a = svc.raw(
        "POST",
        "/login",
        &[form],
        format!("token={token}").as_bytes(),
    );
    assert_eq!(a.status, 303, "{}", a.body);
    let pair = a
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let cookie = format!("cookie: {pair}");
    // The attack as reported: a page on another port posts a TOML job as text/plain;
    // the browser adds the cookie. (Before the fix: 201, and the command ran.)
    let a = svc.raw(
        "POST",
        "/v1/jobs",
        &[
            &cookie,
            &format!("origin: http://127.0.0.1:{}", svc.port + 1),
            "sec-fetch-site: same-site",
            "content-type: text/plain",
        ],
        b"name = \"csrf\"\ncommand = [\"sleep\", \"30\"]\n",
    );
    assert_eq!(a.status, 403, "{}", a.body);
    // The dashboard page carries the CSRF token for its script.
    let page = svc.raw("GET", "/", &[&cookie], b"");
    assert_eq!(page.status, 200);
    let csrf = page
        .body
        .split("name=\"pacer-csrf\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the dashboard's CSRF meta tag")
        .to_string();
    assert_eq!(csrf.len(), 64, "{csrf}");
    assert!(!page.body.contains("<!--CSRF-->"));
    // No credential: the login page does not carry it.
    assert!(!svc.raw("GET", "/", &[], b"").body.contains(&csrf));

    let port = svc.port;
    let ours = format!("origin: http://127.0.0.1:{port}");
    let evil = format!("origin: http://127.0.0.1:{}", port + 1);
    let token_h = format!("x-pacer-csrf: {csrf}");
    let session_as_csrf = format!("x-pacer-csrf: {}", pair.split('=').nth(1).unwrap());
    let bearer = format!("authorization: Bearer {token}");
    let toml_ct = "content-type: application/toml";
    let spec = b"name = \"csrf-probe\"\ncommand = [\"sleep\", \"30\"]\n".to_vec();
    let refused: Vec<(&str, &str, Vec<String>, u16, &str)> = vec![
        // The attack as reported: the cookie, text/plain, a TOML body, from another port.
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                evil.clone(),
                "content-type: text/plain".into(),
                "sec-fetch-site: same-site".into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                evil.clone(),
                token_h.clone(),
                toml_ct.into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                format!("origin: http://127.0.0.1:{port}.evil.example"),
                token_h.clone(),
                toml_ct.into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                "origin: null".into(),
                token_h.clone(),
                toml_ct.into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                ours.clone(),
                "sec-fetch-site: same-site".into(),
                token_h.clone(),
                toml_ct.into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                format!("referer: http://127.0.0.1:{}/attack.html", port + 1),
                token_h.clone(),
                toml_ct.into(),
            ],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![cookie.clone(), token_h.clone(), toml_ct.into()],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![cookie.clone(), ours.clone(), toml_ct.into()],
            403,
            "x-pacer-csrf",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                ours.clone(),
                session_as_csrf.clone(),
                toml_ct.into(),
            ],
            403,
            "x-pacer-csrf",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                cookie.clone(),
                ours.clone(),
                token_h.clone(),
                "content-type: text/plain".into(),
            ],
            415,
            "content-type",
        ),
        (
            "DELETE",
            "/v1/jobs/job-1",
            vec![cookie.clone(), evil.clone(), token_h.clone()],
            403,
            "origin",
        ),
        (
            "POST",
            "/v1/jobs/job-1/cancel",
            vec![cookie.clone(), ours.clone()],
            403,
            "x-pacer-csrf",
        ),
        // Bearer clients: no origin needed, but the body's type is.
        (
            "POST",
            "/v1/jobs",
            vec![bearer.clone(), "content-type: text/plain".into()],
            415,
            "content-type",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![bearer.clone(), form.into()],
            415,
            "content-type",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![
                bearer.clone(),
                "content-type: multipart/form-data; boundary=x".into(),
            ],
            415,
            "content-type",
        ),
        (
            "POST",
            "/v1/jobs",
            vec![bearer.clone()],
            415,
            "content-type",
        ),
    ];
    for (m, p, h, status, field) in &refused {
        let hs: Vec<&str> = h.iter().map(String::as_str).collect();
        let a = svc.raw(m, p, &hs, &spec);
        let v: serde_json::Value = serde_json::from_str(&a.body)
            .unwrap_or_else(|_| panic!("{m} {p} {h:?}: not JSON: {}", a.body));
        assert_eq!(
            (a.status, v["field"].as_str().unwrap()),
            (*status, *field),
            "{m} {p} {h:?}: {v}"
        );
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    // A login form posted from another origin sets no cookie.
    let a = svc.raw(
        "POST",
        "/login",
        &[form, &evil],
        format!("token={token}").as_bytes(),
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.header("set-cookie").is_none());
    let jobs = svc.get_json("/v1/jobs");
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        0,
        "a refused request created a job: {jobs}"
    );

    // The dashboard's own requests: the cookie, its origin (or a page of it as the
    // referer) and the token; reads need neither.
    let a = svc.raw(
        "POST",
        "/v1/jobs",
        &[
            &cookie,
            &ours,
            "sec-fetch-site: same-origin",
            &token_h,
            "content-type: application/toml; charset=utf-8",
        ],
        &spec,
    );
    assert_eq!(a.status, 201, "{}", a.body);
    let a = svc.raw(
        "POST",
        "/v1/jobs",
        &[
            &cookie,
            &format!("referer: http://127.0.0.1:{port}/"),
            &token_h,
            "content-type: application/json",
        ],
        br#"{"name":"csrf-json","command":["sleep","30"]}"#,
    );
    assert_eq!(a.status, 201, "{}", a.body);
    let a = svc.raw("GET", "/v1/jobs", &[&cookie], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    for id in ["job-1", "job-2"] {
        let a = svc.raw(
            "POST",
            &format!("/v1/jobs/{id}/cancel"),
            &[&cookie, &ours, &token_h],
            b"",
        );
        assert_eq!(a.status, 202, "{}", a.body);
    }
    // Bearer clients keep working without any origin.
    let a = svc.raw("POST", "/v1/jobs", &[&bearer, toml_ct], &spec);
    assert_eq!(a.status, 201, "{}", a.body);
    let a = svc.raw("POST", "/v1/jobs/job-3/cancel", &[&bearer], b"");
    assert_eq!(a.status, 202, "{}", a.body);
}

/// Runs `pacer-serve run` on `state` (with extra `args`), expecting it to refuse to
/// start within 20 s; returns what it printed.
fn refused_start(state: &std::path::Path, args: &[&str]) -> String {
    let cluster: &[&str] = if args.contains(&"--cluster") {
        &[]
    } else {
        &["--cluster", "1x1:cpu"]
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pacer-serve"))
        .args(["run", "--listen", "127.0.0.1:0"])
        .args(cluster)
        .arg("--state")
        .arg(state)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("pacer-serve started on {}", state.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!text.contains("panicked"), "{text}");
    text
}

fn chmod(p: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &std::path::Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), None).unwrap();
}

/// The state directory and the token are trusted only when they are this user's and
/// closed to everyone else: a pre-created world-writable or group-readable directory,
/// one owned by another user, a token readable or owned by someone else, or a token that
/// is a symlink, each stops the service with the path, what was found and what is
/// expected; a missing directory is created 0700 with a 0600 token.
#[test]
fn untrusted_state_directories_are_refused() {
    use std::os::unix::fs::MetadataExt;
    let dir = test_dir("trust");
    let token = "0123456789abcdef0123456789abcdef\n";
    // (setup, expected fragments of the error)
    let dirs: Vec<(&str, u32, &[&str])> = vec![
        (
            "world-writable",
            0o777,
            &["mode 0777", "writable by group or others", "0700"],
        ),
        ("group-writable", 0o770, &["mode 0770", "writable", "0700"]),
        (
            "readable",
            0o755,
            &["mode 0755", "readable by group or others", "0700"],
        ),
    ];
    for (name, mode, want) in dirs {
        let d = dir.join(name);
        std::fs::create_dir(&d).unwrap();
        chmod(&d, mode);
        let err = refused_start(&d, &[]);
        for w in want.iter().chain([&d.to_str().unwrap()]) {
            assert!(err.contains(w), "{name}: `{w}` not in {err}");
        }
        assert!(!d.join("token").exists(), "{name}: a token was created");
        assert!(
            !d.join("state.redb").exists(),
            "{name}: a database was created"
        );
    }
    let f = dir.join("a-file");
    std::fs::write(&f, "x").unwrap();
    assert!(refused_start(&f, &[]).contains("not a directory"));

    // Tokens in a private directory: readable by others, a symlink, a FIFO.
    let tokens: Vec<(&str, &[&str])> = vec![
        (
            "token-0644",
            &["mode 0644", "readable by group or others", "0600"],
        ),
        (
            "token-0660",
            &["mode 0660", "writable by group or others", "0600"],
        ),
        ("token-symlink", &["symbolic link", "0600"]),
        ("token-fifo", &["not a regular file", "0600"]),
    ];
    for (name, want) in tokens {
        let d = dir.join(name);
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
        let t = d.join("token");
        match name {
            "token-symlink" => {
                let target = dir.join("elsewhere-token");
                std::fs::write(&target, token).unwrap();
                chmod(&target, 0o600);
                std::os::unix::fs::symlink(&target, &t).unwrap();
            }
            "token-fifo" => {
                let c = std::ffi::CString::new(t.to_str().unwrap()).unwrap();
                // SAFETY: mkfifo on a NUL-terminated path this test owns.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
            _ => {
                std::fs::write(&t, token).unwrap();
                chmod(&t, if name == "token-0644" { 0o644 } else { 0o660 });
            }
        }
        let err = refused_start(&d, &[]);
        for w in want.iter().chain([&t.to_str().unwrap()]) {
            assert!(err.contains(w), "{name}: `{w}` not in {err}");
        }
    }
    // --token-file elsewhere is checked the same way.
    let d = dir.join("token-file-flag");
    let tf = dir.join("shared-token");
    std::fs::write(&tf, token).unwrap();
    chmod(&tf, 0o640);
    let err = refused_start(&d, &["--token-file", tf.to_str().unwrap()]);
    assert!(
        err.contains("mode 0640") && err.contains(tf.to_str().unwrap()),
        "{err}"
    );

    // Owned by another user: only root can make that here.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // The issue's case: `mkdir -m 777 D` and a token of someone else's in it.
        let d = dir.join("planted");
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o777);
        std::fs::write(d.join("token"), token).unwrap();
        chmod(&d.join("token"), 0o600);
        chown(&d.join("token"), 65534);
        chown(&d, 65534);
        let err = refused_start(&d, &[]);
        assert!(
            err.contains("owned by uid 65534") && err.contains("uid 0"),
            "{err}"
        );
        // Owned by another user though closed to others.
        let d = dir.join("other-owner");
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
        chown(&d, 65534);
        let err = refused_start(&d, &[]);
        assert!(
            err.contains("owned by uid 65534") && err.contains(d.to_str().unwrap()),
            "{err}"
        );
        // Our directory, another user's token.
        let d = dir.join("other-token");
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
        std::fs::write(d.join("token"), token).unwrap();
        chmod(&d.join("token"), 0o600);
        chown(&d.join("token"), 65534);
        let err = refused_start(&d, &[]);
        assert!(
            err.contains("owned by uid 65534") && err.contains("token"),
            "{err}"
        );
    } else {
        eprintln!("untrusted_state_directories_are_refused: not root, so the cases of files owned by another user (chown 65534) are skipped");
    }

    // Missing: created 0700 (parents too), the token 0600; it starts.
    let nested = dir.join("new");
    std::fs::create_dir(&nested).unwrap();
    let svc = Service::start(&nested, &["--cluster", "1x1:cpu"]);
    let st = svc.state();
    assert_eq!(std::fs::metadata(&st).unwrap().mode() & 0o777, 0o700);
    assert_eq!(
        std::fs::metadata(st.join("token")).unwrap().mode() & 0o777,
        0o600
    );
    drop(svc);
}

/// A cluster that describes ~1e9 devices (a few lines of TOML, or a short flag) is
/// refused at start with the limit, before any per-device state is built (it used to
/// grow the service to 1.5 GB in 10 s); so is a cluster file over 1 MiB.
#[test]
fn huge_clusters_are_refused_before_allocating() {
    let dir = test_dir("huge-cluster");
    let file = dir.join("huge.toml");
    std::fs::write(
        &file,
        "[[nodes]]\ncount = 1000000\ngpus = 1000\ntype = \"a100\"\n",
    )
    .unwrap();
    let big = dir.join("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    // The cluster parser (pacer-model) bounds every cluster at 2^20 devices and 10^6
    // nodes; the service's own, lower bound on nodes (10^5) catches the rest. Either
    // way the error names the sizes asked for and the limit.
    for (cluster, want) in [
        (
            file.to_str().unwrap(),
            [
                "1000000 nodes",
                "1000000000 devices",
                "at most 1048576 devices",
            ],
        ),
        (
            "2000x1000:t4",
            ["2000 nodes", "2000000 devices", "at most 1048576 devices"],
        ),
        (
            "200000x1:t4",
            [
                "200000 nodes",
                "200000 devices",
                "at most 100000 nodes and 1048576 devices",
            ],
        ),
        (big.to_str().unwrap(), ["larger than 1048576 bytes", "", ""]),
    ] {
        let t0 = Instant::now();
        let err = refused_start(&dir.join("state"), &["--cluster", cluster]);
        for w in want {
            assert!(err.contains(w), "{cluster}: `{w}` not in {err}");
        }
        eprintln!("{cluster}: refused in {:.2} s", t0.elapsed().as_secs_f64());
    }
}
