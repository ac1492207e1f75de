//! The HTTP API (`/v1/…`, JSON), `/healthz`, `/metrics` and the dashboard at `/`.
//! Every route but `/healthz` needs the service's credential: its bearer token, or the
//! dashboard's session cookie that `POST /login` sets for it ([`crate::auth`]); a
//! job's reports may instead carry that job's own token. `/` without a credential is
//! a 401 with a login form.

use crate::core::Core;
use crate::error::ApiError;
use crate::executor::Executor;
use crate::job::JobState;
use crate::spec::{JobSpec, Report};
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
/// Largest log chunk one request returns, bytes.
pub const MAX_LOG_CHUNK: u64 = 1 << 20;

#[derive(Clone)]
pub struct AppState {
    pub core: Arc<Mutex<Core>>,
    pub exec: Arc<dyn Executor>,
    pub token: Arc<String>,
    /// The session cookie's value for `token` ([`crate::auth::session_value`]).
    pub session: Arc<String>,
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

/// Whether the request carries the service's credential: its bearer token or the
/// session cookie, each compared in constant time.
fn is_admin(s: &AppState, headers: &HeaderMap) -> bool {
    let bearer = crate::auth::bearer(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    if bearer.is_some_and(|t| crate::auth::same(t, &s.token)) {
        return true;
    }
    let cookies = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    crate::auth::cookie(cookies, crate::auth::SESSION_COOKIE)
        .is_some_and(|c| crate::auth::same(c, &s.session))
}

/// The service's credential on every route it guards; a job's report route lets the
/// handler check the job's own token instead.
async fn auth(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let is_report = req.method() == Method::POST
        && req.uri().path().starts_with("/v1/jobs/")
        && req.uri().path().ends_with("/reports");
    if !is_admin(&s, req.headers()) && !is_report {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
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
        Html(include_str!("dashboard.html")),
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

/// `POST /login` with a form `token=…`: the right token sets the session cookie
/// (HttpOnly, SameSite=Strict) and sends the browser to `/`; a wrong one is a 401
/// with the form again; a body over [`MAX_BODY`] a 413, a malformed one a 400.
async fn login(State(s): State<AppState>, body: Body) -> ApiResult {
    let bytes = body_bytes(body).await?;
    let form: Login = serde_urlencoded::from_bytes(&bytes).map_err(|e| {
        ApiError::bad(
            "token",
            format!("expected a form body `token=…` (application/x-www-form-urlencoded): {e}"),
        )
    })?;
    if !crate::auth::same(form.token.trim(), &s.token) {
        return Ok(login_form(Some("wrong token")));
    }
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
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::with_status(
            413,
            "body",
            format!("request body too large or unreadable (at most {MAX_BODY} bytes)"),
        )
    })
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
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let spec = if json_body {
        JobSpec::from_json(&bytes)?
    } else {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| ApiError::bad("body", "a TOML job spec must be UTF-8".into()))?;
        JobSpec::from_toml(text, "job spec")?
    };
    spec.check_cwd_exists_bounded().await?;
    let (job, durable) = s.core.lock().await.submit(spec)?;
    wait_durable(durable).await?;
    Ok((StatusCode::CREATED, Json(job.public_json())).into_response())
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
    let out: Vec<Value> = jobs
        .into_iter()
        .take(limit)
        .map(|j| j.public_json())
        .collect();
    Ok(Json(json!({ "jobs": out })).into_response())
}

async fn get_job(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let core = s.core.lock().await;
    let mut v = core.job(&id)?.public_json();
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
    let bytes = body_bytes(body).await?;
    let mut core = s.core.lock().await;
    let r = Report::from_json(&bytes)?;
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
            format!("{} is past the end of the log ({size} bytes)", q.offset),
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
    let text = core.metrics.render(core.jobs.values());
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
