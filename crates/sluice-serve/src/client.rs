//! A small HTTP/1.1 client over hyper for the load generator and tests: whole responses
//! and server-sent-event streams, each event stamped with its arrival time.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::{Result, ServeError};

/// A base URL `http://HOST:PORT` split into its address.
#[derive(Clone, Debug)]
pub struct Target {
    /// `HOST:PORT`.
    pub authority: String,
}

impl Target {
    /// Parses `http://HOST:PORT[/]` (or `HOST:PORT`). Only plain HTTP.
    pub fn parse(url: &str) -> Result<Target> {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        if url.starts_with("https://") {
            return Err(ServeError::Http(
                "https is not supported; use http://".into(),
            ));
        }
        let authority = rest.trim_end_matches('/').split('/').next().unwrap_or("");
        if authority.is_empty() || !authority.contains(':') {
            return Err(ServeError::Http(format!(
                "url {url:?}: expected http://HOST:PORT"
            )));
        }
        Ok(Target {
            authority: authority.to_string(),
        })
    }
}

/// A whole response.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: String,
    /// Body.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).map_err(|e| {
            ServeError::Http(format!(
                "response is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            ))
        })
    }
}

async fn send(
    target: &Target,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<hyper::Response<Incoming>> {
    let stream = TcpStream::connect(&target.authority)
        .await
        .map_err(|e| ServeError::io(format!("connect to {}", target.authority), e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ServeError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", &target.authority);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| ServeError::Http(e.to_string()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| ServeError::Http(e.to_string()))
}

/// Sends a request and reads the whole response.
pub async fn request(
    target: &Target,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<Reply> {
    let resp = send(target, method, path, headers, body).await?;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ServeError::Http(e.to_string()))?
        .to_bytes();
    Ok(Reply {
        status,
        content_type,
        body,
    })
}

/// An open server-sent-event stream.
pub struct Events {
    /// Status code (a non-200 stream carries a JSON error body as its only "event").
    pub status: u16,
    body: Incoming,
    buf: Vec<u8>,
}

impl Events {
    /// The next event's `data` and when its last byte arrived; `None` at the end.
    pub async fn next(&mut self) -> Result<Option<(String, Instant)>> {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..p + 2).collect();
                let text = String::from_utf8_lossy(&raw);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Ok(Some((data.join("\n"), Instant::now())));
            }
            match self.body.frame().await {
                None => {
                    if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                        return Ok(None);
                    }
                    // A non-SSE body (an error): hand it over whole.
                    let rest = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
                    return Ok(Some((rest, Instant::now())));
                }
                Some(Err(e)) => return Err(ServeError::Http(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Sends a POST and returns its event stream.
pub async fn stream(
    target: &Target,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Events> {
    let resp = send(target, "POST", path, headers, Some(body)).await?;
    Ok(Events {
        status: resp.status().as_u16(),
        body: resp.into_body(),
        buf: Vec::new(),
    })
}
