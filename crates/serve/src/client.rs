//! A small HTTP/1 client for the API (what `pacer submit`, `pacer jobs`, … use):
//! plain `http://HOST:PORT`, one connection per request, every request under a
//! timeout, answers bounded in size.

use anyhow::{anyhow, bail, Context};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use std::time::Duration;

/// Largest answer the client reads, bytes.
pub const MAX_ANSWER: usize = 64 << 20;

/// A service at `base` (`http://127.0.0.1:8470`) with a bearer token.
#[derive(Debug, Clone)]
pub struct Client {
    authority: String,
    token: String,
    pub timeout: Duration,
}

/// An answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("the service's answer is not JSON")
    }

    /// The JSON body of a 2xx answer, or an error with the service's message and field.
    pub fn ok_json(&self) -> anyhow::Result<serde_json::Value> {
        if (200..300).contains(&self.status) {
            return self.json();
        }
        match self.json() {
            Ok(v) => bail!(
                "the service answered {}: {} (field `{}`)",
                self.status,
                v["error"].as_str().unwrap_or("?"),
                v["field"].as_str().unwrap_or("?")
            ),
            Err(_) => bail!(
                "the service answered {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            ),
        }
    }
}

impl Client {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Client> {
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("--server {base}: expected http://HOST:PORT"))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
            bail!("--server {base}: expected http://HOST:PORT");
        }
        Ok(Client {
            authority: authority.to_string(),
            token: token.to_string(),
            timeout: Duration::from_secs(30),
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.request("GET", path, None, "").await
    }

    pub async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> anyhow::Result<Answer> {
        self.request("POST", path, Some(body), content_type).await
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> anyhow::Result<Answer> {
        tokio::time::timeout(
            self.timeout,
            self.request_inner(method, path, body, content_type),
        )
        .await
        .map_err(|_| {
            anyhow!(
                "{method} http://{}{path}: no answer within {:?}",
                self.authority,
                self.timeout
            )
        })?
    }

    async fn request_inner(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> anyhow::Result<Answer> {
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to http://{}", self.authority))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        let conn = tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority);
        if !self.token.is_empty() {
            req = req.header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            );
        }
        if !content_type.is_empty() {
            req = req.header(hyper::header::CONTENT_TYPE, content_type);
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let res = sender
            .send_request(req)
            .await
            .with_context(|| format!("{method} http://{}{path}", self.authority))?;
        let status = res.status().as_u16();
        let body = Limited::new(res.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the answer to {method} {path}: {e}"))?
            .to_bytes();
        conn.abort();
        Ok(Answer { status, body })
    }
}
