//! The `/metrics` HTTP listener: HTTP/1.1, any path, one exposition per
//! connection (`Connection: close`), on a thread and runtime of its own so
//! that a scrape never queues behind storage calls on the server's pools.

use std::io;
use std::net::TcpListener;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The exposition's media type (prometheus-client writes OpenMetrics text).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Largest request head read before answering, in bytes.
const MAX_HEAD_BYTES: usize = 8 << 10;

/// Serves [`super::render`] on `listener` from a new thread, until the
/// process exits. Errors: the thread or its runtime could not be started.
pub fn serve(listener: TcpListener) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new()
        .name("solus-metrics".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return tracing::error!(error = %e, "metrics listener failed"),
                };
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(answer(stream));
                }
            })
        })?;
    Ok(())
}

/// Reads the request head (up to a blank line) and answers with the page.
async fn answer(mut stream: tokio::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD_BYTES {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = super::render();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
