//! The HTTP endpoint: hyper's HTTP/1.1 server, one request per connection: `GET` and `HEAD` on
//! `/metrics`, 405 with `Allow` for other methods there, 404 elsewhere.
use std::{convert::Infallible, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{self, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use super::{Metrics, render::render, scrape::read_state};
use crate::datapath::Capacity;

/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last in all: a scrape takes milliseconds.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; one more is closed as soon as it is accepted. Far below the
/// unit's file limit, so a flood of idle connections can neither exhaust the watch's
/// descriptors nor hold the listener: a scraper (one connection per scrape) gets in again as
/// soon as the flood's connections time out.
const MAX_CONNECTIONS: usize = 64;
/// After an accept that failed (EMFILE, ENFILE, ENOBUFS…), the listener waits this long before
/// the next, instead of dying or spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `GET /metrics` (and `HEAD`) until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    pin_dir: PathBuf,
    capacity: Capacity,
) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --metrics"))?;
    info!(%addr, "serving Prometheus metrics on /metrics");
    if !addr.ip().is_loopback() {
        warn!(
            %addr,
            "--metrics listens beyond loopback without authentication: its answer names \
             containers, networks and veths; bind 127.0.0.1 (or firewall the port) unless the \
             scraper is elsewhere"
        );
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut accept_failures: u64 = 0;
    let mut http = http1::Builder::new();
    // One request per connection, as scrapers use it; Title-Case header names, as before hyper.
    http.keep_alive(false)
        .title_case_headers(true)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT);
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (or kernel memory): keep the listener, say so once per
                // burst, and try again shortly; closing connections frees descriptors.
                if accept_failures == 0 {
                    warn!(%addr, "metrics: cannot accept a connection: {e}; retrying");
                }
                accept_failures += 1;
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if accept_failures > 0 {
            info!(%addr, failed = accept_failures, "metrics: accepting connections again");
            accept_failures = 0;
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(%peer, "metrics: {MAX_CONNECTIONS} connections open; closing this one");
            continue;
        };
        let metrics = Arc::clone(&metrics);
        let pin_dir = pin_dir.clone();
        let service = service_fn(move |request| {
            respond(request, Arc::clone(&metrics), pin_dir.clone(), capacity)
        });
        let connection = http.serve_connection(TokioIo::new(conn), service);
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, "metrics connection: {e}"),
                Err(_) => debug!(%peer, "metrics connection: timed out"),
            }
            drop(slot);
        });
    }
}

async fn respond(
    request: Request<Incoming>,
    metrics: Arc<Metrics>,
    pin_dir: PathBuf,
    capacity: Capacity,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (method, path) = (request.method(), request.uri().path());
    debug!(%method, path, "metrics request");
    if path != "/metrics" {
        return Ok(text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics\n".into(),
        ));
    }
    // HEAD gets GET's headers, Content-Length included; hyper leaves the body out.
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "/metrics answers GET and HEAD\n".into(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    let watch = metrics.snapshot();
    let state = tokio::task::spawn_blocking(move || read_state(&pin_dir, capacity)).await;
    Ok(match state {
        Ok(Ok(state)) => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            render(&state, watch),
        ),
        Ok(Err(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{e:#}\n"),
        ),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{e}\n"),
        ),
    })
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The endpoint over a real socket, without privileges: a missing pin directory is an
    /// empty state.
    #[test]
    fn answers_get_and_head_refuses_other_methods_and_paths() {
        use std::io::{Read, Write};
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        runtime.spawn(serve(
            addr,
            Arc::default(),
            PathBuf::from("/nonexistent/dxdp-metrics-test"),
            Capacity::default(),
        ));
        let ask = |request: &str| -> String {
            for _ in 0..250 {
                let Ok(mut conn) = std::net::TcpStream::connect(addr) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                conn.set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("a timeout");
                conn.write_all(request.as_bytes()).expect("request sent");
                // The server closes the connection after its answer.
                let mut response = String::new();
                conn.read_to_string(&mut response)
                    .expect("a whole response");
                return response;
            }
            panic!("nothing listens on {addr}");
        };

        let get = ask("GET /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
        let (head_of_get, body) = get.split_once("\r\n\r\n").expect("a header block");
        assert!(head_of_get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
        assert!(
            head_of_get.contains("\r\nContent-Type: text/plain; version=0.0.4"),
            "{get}"
        );
        assert!(head_of_get.contains("\r\nConnection: close"), "{get}");
        let length = format!("\r\nContent-Length: {}", body.len());
        assert!(head_of_get.contains(&length), "{get}");
        assert!(body.contains("dxdp_links{datapath=\"tc\"} 0\n"), "{body}");

        let head = ask("HEAD /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.ends_with("\r\n\r\n"),
            "HEAD answered with a body: {head}"
        );
        assert!(head.contains(&length), "{head}");

        for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
            let refused = ask(&format!(
                "{method} /metrics HTTP/1.1\r\nHost: dxdp\r\nContent-Length: 0\r\n\r\n"
            ));
            assert!(
                refused.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")
                    && refused.contains("\r\nAllow: GET, HEAD\r\n"),
                "{method}: {refused}"
            );
        }
        for path in ["/", "/metricsx", "/metrics/"] {
            let missing = ask(&format!("GET {path} HTTP/1.1\r\nHost: dxdp\r\n\r\n"));
            assert!(
                missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
                "{path}: {missing}"
            );
        }
        // HTTP/1.0 clients too.
        let old = ask("GET /metrics HTTP/1.0\r\n\r\n");
        assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old}");
    }
}
