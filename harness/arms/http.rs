//! Just enough HTTP/1.1 to drive `llama-server` on loopback: one request per connection
//! (`Connection: close`), bodies plain or chunked, and a streaming read that timestamps each
//! server-sent-event line the moment it is complete.

use super::process::{Interrupted, interrupted, now_ns};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "HTTP {}: the body is not JSON: {:.300}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// A port on 127.0.0.1 that nothing listens on now (the OS picks it).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

fn connect(port: u16, timeout: Duration) -> Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn send(stream: &mut TcpStream, method: &str, path: &str, body: Option<&[u8]>) -> Result<()> {
    let port = stream.peer_addr()?.port();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if let Some(body) = body {
        stream.write_all(body)?;
    }
    stream.flush()?;
    Ok(())
}

/// Reads the status line and headers; returns the status and a reader of the decoded body.
fn response_body(stream: TcpStream) -> Result<(u16, Box<dyn BufRead + Send>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .context("reading the status line")?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("malformed status line {line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    loop {
        line.clear();
        reader.read_line(&mut line).context("reading the headers")?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if name == "content-length" {
                length = value.parse::<u64>().ok();
            }
        }
    }
    let body: Box<dyn BufRead + Send> = match (chunked, length) {
        (true, _) => Box::new(BufReader::new(Chunked {
            inner: reader,
            left: 0,
            done: false,
        })),
        (false, Some(n)) => Box::new(reader.take(n)),
        (false, None) => Box::new(reader),
    };
    Ok((status, body))
}

/// One whole request and response.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<Response> {
    let mut stream = connect(port, timeout)?;
    let body = body.map(|b| b.to_string().into_bytes());
    send(&mut stream, method, path, body.as_deref())?;
    let (status, mut reader) = response_body(stream)?;
    let mut out = Vec::new();
    reader
        .read_to_end(&mut out)
        .with_context(|| format!("reading the answer to {method} {path}"))?;
    Ok(Response { status, body: out })
}

/// What a streaming read delivers.
pub enum Event {
    /// The HTTP status, once the headers are in.
    Status(u16),
    /// A body line and the CLOCK_MONOTONIC time it was complete.
    Line(String, u64),
    /// The body ended (Ok) or the read failed.
    End(Result<()>),
}

/// POSTs `body` and reads the answer on a thread, line by line, as it arrives. The caller waits
/// on the channel (and can give up on Ctrl-C or a dead server without blocking on the socket).
pub fn post_streaming(
    port: u16,
    path: &str,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<(u64, Receiver<Event>)> {
    let mut stream = connect(port, timeout)?;
    let bytes = body.to_string().into_bytes();
    let sent_ns = now_ns();
    send(&mut stream, "POST", path, Some(&bytes))?;
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let result = (|| -> Result<()> {
            let (status, mut reader) = response_body(stream)?;
            let _ = tx.send(Event::Status(status));
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                let at = now_ns();
                let text = line.trim_end_matches(['\r', '\n']);
                if !text.is_empty() && tx.send(Event::Line(text.to_string(), at)).is_err() {
                    return Ok(());
                }
            }
        })();
        let _ = tx.send(Event::End(result));
    });
    Ok((sent_ns, rx))
}

/// A request's id and how reading its answer ended.
pub type Answer<T> = (u64, Result<T>);

/// Answers of concurrent requests, each read on a thread of its own and collected as it ends:
/// the server arms' `submit` and `next_done`.
pub struct Answers<T> {
    send: Sender<Answer<T>>,
    recv: Receiver<Answer<T>>,
}

impl<T: Send + 'static> Answers<T> {
    pub fn new() -> Self {
        let (send, recv) = channel();
        Answers { send, recv }
    }

    /// Reads request `id`'s answer with `read` on a new thread.
    pub fn spawn(&self, id: u64, read: impl FnOnce() -> Result<T> + Send + 'static) {
        let send = self.send.clone();
        std::thread::spawn(move || {
            let _ = send.send((id, read()));
        });
    }

    /// The next answer to end within `timeout` (None when none did), asking `alive` every
    /// 100 ms meanwhile (a server that died is its error); Ctrl-C is [`Interrupted`].
    pub fn next(
        &self,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<Answer<T>>> {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted() {
                return Err(Interrupted.into());
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match self.recv.recv_timeout(wait) {
                Ok(answer) => return Ok(Some(answer)),
                Err(RecvTimeoutError::Timeout) => {
                    alive()?;
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => bail!("no stream threads"),
            }
        }
    }
}

/// A `Transfer-Encoding: chunked` body, decoded.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            self.inner.read_line(&mut size)?;
            let hex = size.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(hex, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad chunk size {size:?}"),
                )
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let read = self.inner.read(&mut buf[..n])?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= read;
        if self.left == 0 {
            let mut crlf = String::new();
            self.inner.read_line(&mut crlf)?;
        }
        Ok(read)
    }
}

/// Fails unless the status is 2xx, quoting the body.
pub fn check_status(what: &str, response: &Response) -> Result<()> {
    if !(200..300).contains(&response.status) {
        bail!(
            "{what}: HTTP {}: {:.500}",
            response.status,
            String::from_utf8_lossy(&response.body)
        );
    }
    Ok(())
}
