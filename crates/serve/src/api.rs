//! The HTTP API (`/v1/…`, JSON), `/healthz`, `/metrics` and the dashboard at `/`.
//! Every route but `/healthz` needs the service's credential: its bearer token, or the
//! dashboard's session cookie that `POST /login` sets for it ([`crate::auth`]); a
//! job's reports may instead carry that job's own token. `/` without a credential is
//! a 401 with a login form.

use crate::core::Core;
use crate::error::ApiError;
use crate::executor::Executor;
use crate::job::JobState;
use crate::spec::JobSpec;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Mutex;

/// Largest request body (a job spec or a report), bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// Longest a request body may take to arrive (408 after that).
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest log chunk one request returns, bytes.
pub const MAX_LOG_CHUNK: u64 = 1 << 20;

#[derive(Clone)]
pub struct AppState {
    pub core: Arc<Mutex<Core>>,
    pub exec: Arc<dyn Executor>,
    pub token: Arc<String>,
    /// The session cookie's value for `token` ([`crate::auth::session_value`]).
    pub session: Arc<String>,
    /// The dashboard's CSRF token for `token` ([`crate::auth::csrf_value`]).
    pub csrf: Arc<String>,
}

type ApiResult = Result<Response, ApiError>;

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/events", get(events))
        .route("/v1/jobs/{id}/logs", get(logs))
        .route("/v1/jobs/{id}/reports", post(report).get(reports))
        .route("/v1/cluster", get(cluster))
        .route("/v1/rounds", get(rounds))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::not_found("path", "no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
        .route("/", get(dashboard))
        .route("/login", post(login).get(login_page))
        .merge(v1)
        .with_state(state)
}

/// How a request proves it is the service's admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    /// `Authorization: Bearer <the service's token>` (the CLI, scripts).
    Bearer,
    /// The dashboard's session cookie (a browser; the browser attaches it by itself, so a
    /// request that changes anything must also prove it came from the dashboard).
    Cookie,
    None,
}

/// The service's credential the request carries, each compared in constant time.
fn credential(s: &AppState, headers: &HeaderMap) -> Credential {
    let bearer = crate::auth::bearer(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    if bearer.is_some_and(|t| crate::auth::same(t, &s.token)) {
        return Credential::Bearer;
    }
    let cookies = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    if crate::auth::cookie(cookies, crate::auth::SESSION_COOKIE)
        .is_some_and(|c| crate::auth::same(c, &s.session))
    {
        return Credential::Cookie;
    }
    Credential::None
}

/// Whether the request carries the service's credential (bearer token or session cookie).
fn is_admin(s: &AppState, headers: &HeaderMap) -> bool {
    credential(s, headers) != Credential::None
}

/// Methods that change nothing; every other one (POST, PUT, PATCH, DELETE, …) does.
fn is_safe(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a browser's request comes from this service's own pages: `Sec-Fetch-Site`,
/// when the browser sends it, is `same-origin`; and `Origin` (or, without one,
/// `Referer`) is this service's origin, `http://` or `https://` followed by the
/// request's `Host`. Another port of the same host is another origin (though the same
/// "site" for `SameSite` cookies: that is why the cookie alone proves nothing). A
/// request with neither `Origin` nor `Referer` is refused.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let refuse = |what: String| {
        ApiError::with_status(
            403,
            "origin",
            format!(
                "{what}: a request that changes state and is authenticated by the dashboard's session cookie must come from the dashboard's own origin (API clients send `Authorization: Bearer <token>` instead)"
            ),
        )
    };
    if let Some(site) = header_str(headers, "sec-fetch-site") {
        if site != "same-origin" {
            return Err(refuse(format!("Sec-Fetch-Site is `{site}`")));
        }
    }
    let host = header_str(headers, header::HOST)
        .ok_or_else(|| refuse("the request has no Host header".into()))?;
    // `http(s)://HOST` exactly (an Origin), or followed by a path (a Referer).
    let ours = |url: &str, path: bool| {
        ["http://", "https://"].iter().any(|scheme| {
            url.strip_prefix(scheme)
                .and_then(|rest| rest.strip_prefix(host))
                .is_some_and(|rest| rest.is_empty() || (path && rest.starts_with('/')))
        })
    };
    match (
        header_str(headers, header::ORIGIN),
        header_str(headers, header::REFERER),
    ) {
        (Some(o), _) if ours(o, false) => Ok(()),
        (Some(o), _) => Err(refuse(format!(
            "Origin `{o}` is not this service (http://{host})"
        ))),
        (None, Some(r)) if ours(r, true) => Ok(()),
        (None, Some(r)) => Err(refuse(format!(
            "Referer `{r}` is not a page of this service (http://{host}/…)"
        ))),
        (None, None) => Err(refuse("the request has neither Origin nor Referer".into())),
    }
}

/// The dashboard's CSRF token in [`crate::auth::CSRF_HEADER`], compared in constant time.
fn csrf_token(s: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match header_str(headers, crate::auth::CSRF_HEADER) {
        Some(t) if crate::auth::same(t.trim(), &s.csrf) => Ok(()),
        got => Err(ApiError::with_status(
            403,
            crate::auth::CSRF_HEADER,
            format!(
                "{} the dashboard's CSRF token: a request that changes state and is authenticated by the session cookie must carry the token of the dashboard page in `X-Pacer-CSRF`",
                if got.is_some() { "wrong" } else { "missing" }
            ),
        )),
    }
}

/// The body types the API reads.
const JSON: &str = "application/json";
const TOML: &str = "application/toml";

/// The media type of `Content-Type` (lower case, without parameters such as `charset`).
fn media_type(headers: &HeaderMap) -> Option<String> {
    header_str(headers, header::CONTENT_TYPE).map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

/// A request that may carry a body (a non-zero `Content-Length`, or chunked) must
/// declare one of `allowed` as its type: 415 otherwise. The types a browser may send
/// across origins without asking first (`text/plain`, forms) are never among them.
fn body_type(headers: &HeaderMap, allowed: &[&str]) -> Result<(), ApiError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || header_str(headers, header::CONTENT_LENGTH)
            .is_some_and(|n| n.trim().parse::<u64>() != Ok(0));
    if !has_body {
        return Ok(());
    }
    match media_type(headers) {
        Some(t) if allowed.contains(&t.as_str()) => Ok(()),
        got => Err(ApiError::with_status(
            415,
            "content-type",
            format!(
                "expected a body of type {}; got {}",
                allowed
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                got.map_or_else(|| "no Content-Type".to_string(), |t| format!("`{t}`"))
            ),
        )),
    }
}

/// The service's credential on every route it guards; a job's report route lets the
/// handler check the job's own token instead. A cookie-authenticated request that
/// changes state must also come from the dashboard's origin and carry its CSRF token;
/// bodies must be JSON or TOML.
async fn auth(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let is_report = req.method() == Method::POST
        && req.uri().path().starts_with("/v1/jobs/")
        && req.uri().path().ends_with("/reports");
    let cred = credential(&s, req.headers());
    if cred == Credential::None && !is_report {
        return ApiError::unauthorized().into_response();
    }
    if cred == Credential::Cookie && !is_safe(req.method()) {
        if let Err(e) = same_origin(req.headers()).and_then(|()| csrf_token(&s, req.headers())) {
            return e.into_response();
        }
    }
    let conn = req.extensions().get::<Arc<crate::listen::Conn>>().cloned();
    if cred != Credential::None {
        if let Err(e) = body_type(req.headers(), &[JSON, TOML]) {
            return e.into_response();
        }
        if let Some(c) = &conn {
            c.authenticated();
        }
    }
    let res = next.run(req).await;
    // A job's report was accepted: its token was right.
    if is_report && res.status() == StatusCode::ACCEPTED {
        if let Some(c) = &conn {
            c.authenticated();
        }
    }
    res
}

/// The login page (401): a form that posts the token to `/login`. With
/// `#token=…` in the URL, its script submits the form itself (the fragment never
/// reaches the server).
fn login_form(error: Option<&str>) -> Response {
    let note = error.map_or(String::new(), |e| format!("<p class=\"err\">{e}</p>"));
    let page = include_str!("login.html").replace("<!--NOTE-->", &note);
    (
        StatusCode::UNAUTHORIZED,
        [(header::CACHE_CONTROL, "no-store")],
        Html(page),
    )
        .into_response()
}

async fn dashboard(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if !is_admin(&s, &headers) {
        return login_form(None);
    }
    (
        [(header::CACHE_CONTROL, "no-store")],
        Html(include_str!("dashboard.html").replace("<!--CSRF-->", &s.csrf)),
    )
        .into_response()
}

async fn login_page() -> Response {
    login_form(None)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    token: String,
}

/// The token of a login form body (`token=…`, application/x-www-form-urlencoded); a
/// 400 naming `token` for anything else.
pub fn parse_login(body: &[u8]) -> Result<String, ApiError> {
    let form: Login = serde_urlencoded::from_bytes(body).map_err(|e| {
        ApiError::bad(
            "token",
            format!("expected a form body `token=…` (application/x-www-form-urlencoded): {e}"),
        )
    })?;
    Ok(form.token)
}

/// `POST /login` with a form `token=…`: the right token sets the session cookie
/// (HttpOnly, SameSite=Strict) and sends the browser to `/`; a wrong one is a 401
/// with the form again; a body over [`MAX_BODY`] a 413, a malformed one a 400.
async fn login(State(s): State<AppState>, headers: HeaderMap, body: Body) -> ApiResult {
    // A browser always says where a form post comes from: only the login page's own.
    if headers.contains_key(header::ORIGIN) || headers.contains_key("sec-fetch-site") {
        same_origin(&headers)?;
    }
    let bytes = body_bytes(body).await?;
    let token = parse_login(&bytes)?;
    if !crate::auth::same(token.trim(), &s.token) {
        eprintln!("pacer serve: dashboard login refused: wrong token");
        return Ok(login_form(Some("wrong token")));
    }
    eprintln!("pacer serve: dashboard login: session cookie set");
    let cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict",
        crate::auth::SESSION_COOKIE,
        s.session
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/".to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
    )
        .into_response())
}

/// Waits for the group commit of a staged change.
async fn wait_durable(d: crate::core::Durable) -> Result<(), ApiError> {
    match d.await {
        Ok(true) => Ok(()),
        _ => Err(ApiError::internal("the change could not be committed")),
    }
}

async fn body_bytes(body: Body) -> Result<axum::body::Bytes, ApiError> {
    match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) => Err(ApiError::with_status(
            413,
            "body",
            format!("request body too large or unreadable (at most {MAX_BODY} bytes)"),
        )),
        Err(_) => Err(ApiError::with_status(
            408,
            "body",
            format!(
                "the request body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| {
        let text = e.body_text();
        let field = text
            .split("unknown field `")
            .nth(1)
            .and_then(|r| r.split('`').next())
            .map_or_else(|| "query".to_string(), str::to_string);
        ApiError::bad(&field, text)
    })
}

async fn submit(State(s): State<AppState>, headers: HeaderMap, body: Body) -> ApiResult {
    let bytes = body_bytes(body).await?;
    let spec = if media_type(&headers).as_deref() == Some(JSON) {
        JobSpec::from_json(&bytes)?
    } else {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| ApiError::bad("body", "a TOML job spec must be UTF-8".into()))?;
        JobSpec::from_toml(text, "job spec")?
    };
    spec.check_cwd_exists_bounded().await?;
    if let Some(app) = spec.app.clone().filter(|_| spec.deadline.is_some()) {
        // A profile is fitted (0.1–0.5 s) outside the service's lock; the submission
        // then finds it fitted.
        let goals = s.core.lock().await.goals.clone();
        tokio::task::spawn_blocking(move || goals.get(&app))
            .await
            .map_err(|e| ApiError::internal(format!("fitting the profile failed: {e}")))??;
    }
    let (job, durable) = s.core.lock().await.submit(spec)?;
    wait_durable(durable).await?;
    let mut v = job.public_json();
    if let Some(d) = &job.deadline {
        // The admission answer (a declined job is a 409 carrying its own).
        use crate::deadline::rfc3339;
        v["admission"] = json!({
            "decision": "accepted",
            "deadline": rfc3339(d.deadline_ms),
            "deadline_ms": d.deadline_ms,
            "share_now": d.share_now,
            "planned_finish": rfc3339(d.planned_finish_ms),
            "planned_finish_ms": d.planned_finish_ms,
            "model": match &d.profile {
                Some(p) => p.describe(),
                None => "expected_runtime at replicas devices, linear speed-up (nothing reported yet)".into(),
            },
        });
        if let Some(p) = &d.profile {
            v["admission"]["profile"] = json!({
                "app": p.app,
                "goal": p.goal,
                "global_batch": p.option.global_batch,
                "samples": p.option.samples,
                "predicted_metric": p.option.metric,
                "levels": p.option.levels,
                "declined_better": p.declined_better,
            });
        }
    }
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<JobState>,
    #[serde(default)]
    from: u64,
    limit: Option<usize>,
}

async fn list(State(s): State<AppState>, q: Result<Query<ListQuery>, QueryRejection>) -> ApiResult {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(1000).min(20_000);
    let core = s.core.lock().await;
    let mut jobs: Vec<&crate::job::JobRecord> = core
        .jobs
        .values()
        .filter(|j| j.seq >= q.from && q.state.is_none_or(|st| j.state == st))
        .collect();
    jobs.sort_by_key(|j| j.seq);
    let now = crate::core::now_ms();
    let out: Vec<Value> = jobs
        .into_iter()
        .take(limit)
        .map(|j| with_deadline(&core, j, now))
        .collect();
    Ok(Json(json!({ "jobs": out })).into_response())
}

/// A job's public JSON with its deadline status (`deadline_status`, deadline jobs only).
fn with_deadline(core: &Core, j: &crate::job::JobRecord, now_ms: u64) -> Value {
    let mut v = j.public_json();
    if let Some(d) = core.deadline_json(j, now_ms) {
        v["deadline_status"] = d;
    }
    v
}

async fn get_job(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let core = s.core.lock().await;
    let mut v = with_deadline(&core, core.job(&id)?, crate::core::now_ms());
    // Where its stdout and stderr go (`pacer job` shows it).
    v["log_path"] = core.log_path(&id).display().to_string().into();
    Ok(Json(v).into_response())
}

async fn cancel(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let mut core = s.core.lock().await;
    let j = core.cancel(s.exec.as_ref(), &id).await?;
    Ok((StatusCode::ACCEPTED, Json(j.public_json())).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeQuery {
    #[serde(default)]
    from: u64,
    limit: Option<usize>,
}

/// Rows of a stored series as one JSON array under `key` (rows that do not parse are
/// left out; the service writes only JSON).
fn rows_json(key: &str, rows: &[(u64, String)]) -> Response {
    let out: Vec<Value> = rows
        .iter()
        .filter_map(|(_, v)| serde_json::from_str(v).ok())
        .collect();
    Json(json!({ key: out })).into_response()
}

/// Reads a job's stored series (`Store::events`, `Store::reports`) from an index.
type RowReader = fn(
    &crate::store::Store,
    &str,
    u64,
    usize,
) -> Result<Vec<(u64, String)>, crate::error::ServeError>;

/// A job's events or reports from `from` (at most `limit`, default 1,000, ≤ 10,000).
async fn job_rows(
    s: &AppState,
    id: &str,
    q: Result<Query<RangeQuery>, QueryRejection>,
    key: &str,
    read: RowReader,
) -> ApiResult {
    let q = query(q)?;
    let core = s.core.lock().await;
    core.job(id)?;
    let rows = read(&core.store, id, q.from, q.limit.unwrap_or(1000).min(10_000))?;
    Ok(rows_json(key, &rows))
}

async fn events(
    State(s): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> ApiResult {
    job_rows(&s, &id, q, "events", crate::store::Store::events).await
}

async fn reports(
    State(s): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> ApiResult {
    job_rows(&s, &id, q, "reports", crate::store::Store::reports).await
}

async fn report(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let token = crate::auth::bearer(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    // Authentication first: without the job's (or the service's) token the answer is
    // 401 whatever the body or the id, so nobody learns which jobs exist.
    let admin = is_admin(&s, &headers);
    {
        let core = s.core.lock().await;
        let ok = match core.job(&id) {
            Ok(job) => admin || token.is_some_and(|t| crate::auth::same(t, &job.report_token)),
            Err(e) if admin => return Err(e),
            Err(_) => false,
        };
        if !ok {
            return Err(ApiError::unauthorized());
        }
    }
    body_type(&headers, &[JSON])?;
    let bytes = body_bytes(body).await?;
    let mut core = s.core.lock().await;
    let r = crate::spec::report_from_json(&bytes)?;
    let (n, durable) = core.report(&id, r)?;
    drop(core);
    wait_durable(durable).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"accepted": true, "index": n})),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    #[serde(default)]
    offset: u64,
    max: Option<u64>,
}

async fn logs(
    State(s): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    use std::io::{Read, Seek, SeekFrom};
    let q = query(q)?;
    let (path, terminal) = {
        let core = s.core.lock().await;
        let j = core.job(&id)?;
        (core.log_path(&id), j.state.is_terminal())
    };
    let max = q.max.unwrap_or(MAX_LOG_CHUNK).min(MAX_LOG_CHUNK);
    let mut data = Vec::new();
    let size = match std::fs::File::open(&path) {
        Ok(mut f) => {
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            if q.offset < size {
                f.seek(SeekFrom::Start(q.offset))
                    .map_err(|e| ApiError::internal(format!("log: {e}")))?;
                f.take(max)
                    .read_to_end(&mut data)
                    .map_err(|e| ApiError::internal(format!("log: {e}")))?;
            }
            size
        }
        Err(_) => 0,
    };
    if q.offset > size {
        return Err(ApiError::bad(
            "offset",
            format!(
                "{} is past the end of the log ({size} bytes; a log is rotated when it passes its cap, its previous part kept in {id}.log.1 in the state directory)",
                q.offset
            ),
        ));
    }
    let next = q.offset + data.len() as u64;
    Ok(Json(json!({
        "offset": q.offset,
        "next_offset": next,
        "size": size,
        "data": String::from_utf8_lossy(&data),
        "eof": next >= size,
        "finished": terminal,
    }))
    .into_response())
}

async fn cluster(State(s): State<AppState>) -> ApiResult {
    let core = s.core.lock().await;
    let c = &core.settings.cluster;
    let nodes: Vec<Value> = c
        .nodes
        .iter()
        .map(|n| json!({"device_type": c.device_types[n.device_type.0 as usize], "slots": n.gpus}))
        .collect();
    let alloc: serde_json::Map<String, Value> = core
        .jobs
        .values()
        .filter_map(|j| {
            j.run.as_ref().map(|r| {
                (j.id.clone(), json!({"alloc": r.alloc, "slots": r.slots, "device_type": r.device_type, "state": j.state}))
            })
        })
        .collect();
    Ok(Json(json!({
        "policy": core.settings.policy,
        "round_s": core.settings.round_s,
        "device_types": c.device_types,
        "nodes": nodes,
        "allocation": alloc,
        "last_round": core.last_round,
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoundsQuery {
    from: Option<u64>,
    limit: Option<usize>,
}

/// Rounds from `from`, or the latest `limit` (default 200) when `from` is not given.
async fn rounds(
    State(s): State<AppState>,
    q: Result<Query<RoundsQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(200).clamp(1, 5000);
    let core = s.core.lock().await;
    let from = q
        .from
        .unwrap_or_else(|| core.last_round.round.saturating_sub(limit as u64 - 1));
    let rows = core.store.rounds(from, limit)?;
    Ok(rows_json("rounds", &rows))
}

async fn metrics(State(s): State<AppState>) -> ApiResult {
    let core = s.core.lock().await;
    let now = crate::core::now_ms();
    let deadlines: Vec<crate::deadline::Status> = core
        .jobs
        .values()
        .filter_map(|j| core.deadline_status(j, now))
        .collect();
    let text = core.metrics.render(core.jobs.values(), &deadlines);
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
