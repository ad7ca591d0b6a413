//! The control socket's client ([`Client`]): the CLI's `metronome class` and the tests speak
//! the protocol through it.

use super::protocol::{ClassObject, Reply, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the path: no daemon runs with this control socket.
    #[error(
        "no daemon listens on {path} ({source}); is `metronome run` running, with this \
         [daemon] control?"
    )]
    NotRunning {
        /// The socket's path.
        path: PathBuf,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// The connection failed once open.
    #[error("control socket {path}: {source}")]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The daemon's answer is not a reply.
    #[error("control socket {path}: not a reply: {line:?}")]
    BadReply {
        /// The socket's path.
        path: PathBuf,
        /// What came back.
        line: String,
    },
}

/// A connection to a daemon's control socket; requests are answered in turn.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connects to the control socket at `path`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::NotRunning {
            path: path.to_path_buf(),
            source,
        })?;
        // Longer than the daemon's own wait for its loops (`super::APPLY_TIMEOUT`).
        let timeout = super::APPLY_TIMEOUT + std::time::Duration::from_secs(5);
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|source| ClientError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let writer = stream.try_clone().map_err(|source| ClientError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Sends `request` and returns the daemon's reply (a refusal is a reply with `ok: false`).
    /// When the daemon had closed the connection while it was idle (its read deadline, or its
    /// place given to a new connection: a reply whose error's field is
    /// [`super::protocol::CONNECTION_FIELD`], or a write that finds it closed), the request was
    /// not read: it is sent once more on a new connection.
    pub fn request(&mut self, request: &Request) -> Result<Reply, ClientError> {
        let line = serde_json::to_string(request).map_err(|e| ClientError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        match self.exchange(&line) {
            Ok(reply) if !closed_while_idle(&reply) => Ok(reply),
            Ok(_) | Err(Exchange::Unsent(_)) => {
                *self = Client::connect(&self.path)?;
                self.exchange(&line).map_err(|e| self.error(e))
            }
            Err(e) => Err(self.error(e)),
        }
    }

    /// One request line and its reply.
    fn exchange(&mut self, line: &str) -> Result<Reply, Exchange> {
        writeln!(self.writer, "{line}").map_err(Exchange::Unsent)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(Exchange::Io)?;
        if n == 0 {
            return Err(Exchange::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        serde_json::from_str(answer.trim()).map_err(|_| Exchange::BadReply(answer.trim().into()))
    }

    fn error(&self, e: Exchange) -> ClientError {
        let path = self.path.clone();
        match e {
            Exchange::Unsent(source) | Exchange::Io(source) => ClientError::Io { path, source },
            Exchange::BadReply(line) => ClientError::BadReply { path, line },
        }
    }

    /// `add`.
    pub fn add(&mut self, class: ClassObject) -> Result<Reply, ClientError> {
        self.request(&Request::Add { class })
    }

    /// `change`: `class` holds the name and the keys that change.
    pub fn change(&mut self, class: ClassObject) -> Result<Reply, ClientError> {
        self.request(&Request::Change { class })
    }

    /// `del`.
    pub fn delete(&mut self, name: &str) -> Result<Reply, ClientError> {
        self.request(&Request::Del {
            name: name.to_owned(),
        })
    }

    /// `list`.
    pub fn list(&mut self) -> Result<Reply, ClientError> {
        self.request(&Request::List)
    }

    /// `show`.
    pub fn show(&mut self, name: &str) -> Result<Reply, ClientError> {
        self.request(&Request::Show {
            name: name.to_owned(),
        })
    }
}

/// How one [`Client::exchange`] failed.
enum Exchange {
    /// The request could not be written (the daemon had closed the connection).
    Unsent(std::io::Error),
    /// The reply could not be read.
    Io(std::io::Error),
    /// What came back is not a reply.
    BadReply(String),
}

/// Whether `reply` is the daemon's notice that it closed the connection while it was idle.
fn closed_while_idle(reply: &Reply) -> bool {
    !reply.ok
        && reply
            .error
            .as_ref()
            .is_some_and(|e| e.field == super::protocol::CONNECTION_FIELD)
}
