//! The file face ([`tierbox_runner::files`]: read, write, list and stat the workspace's
//! files, under the rules a run answers to) over the HTTP API (`/v1/files`,
//! `http/files.rs`) and MCP (the `file_*` tools): the request shapes, their checks, the
//! operations over a [`Service`], and every [`FileError`] as a stable code.
//!
//! Invariants:
//!
//! - every request names its workspace as a run does: the server's, or a subdirectory of
//!   it (`workspace`, plain names), checked by the same scope rules before anything is
//!   touched; the face is held for the one request;
//! - bytes are the truth: a write's data is `data` (UTF-8 text) or `data_base64` (any
//!   bytes), exactly one; a read answers `text` plus `bytes_base64` exactly when the
//!   text is lossy, as every output of the API does;
//! - every write is the caller's and is audited ([`tierbox_runner::Runner::write_file`]);
//!   reads, lists and stats are not;
//! - the file system work runs off the async threads (it `fsync`s).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tierbox_policy::Rejection;
use tierbox_policy::policy::WorkspaceMode;
use tierbox_policy::request::{MAX_CWD_BYTES, MAX_REQUEST_BYTES};
use tierbox_runner::files::{
    DEFAULT_FILE_READ_BYTES, FileError, FileFace, FileKind, FileList, FileStat, FileWritten,
    MAX_FILE_PATH_BYTES, MAX_FILE_READ_BYTES, MAX_FILE_WRITE_BYTES, WriteOptions,
};

use crate::service::{Service, ServiceError};

/// Read a file of the workspace.
pub const FILE_READ_TOOL: &str = "file_read";
/// Write (create, replace or append to) a file of the workspace.
pub const FILE_WRITE_TOOL: &str = "file_write";
/// List a directory of the workspace.
pub const FILE_LIST_TOOL: &str = "file_list";
/// The metadata of an entry of the workspace.
pub const FILE_STAT_TOOL: &str = "file_stat";

/// The file tools, in the order they are listed.
pub const FILE_TOOL_NAMES: [&str; 4] = [
    FILE_READ_TOOL,
    FILE_WRITE_TOOL,
    FILE_LIST_TOOL,
    FILE_STAT_TOOL,
];

impl From<FileError> for ServiceError {
    fn from(e: FileError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

fn default_read_bytes() -> usize {
    DEFAULT_FILE_READ_BYTES
}

fn default_true() -> bool {
    true
}

/// `GET /v1/files` (its query) and `file_read`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "file_read",
    description = "Read a regular file of the workspace: up to max_bytes from offset on, as \
                   text (and bytes_base64, exactly, when the file is not UTF-8). truncated \
                   says the file goes on: read on from next_offset. A symlink anywhere on the \
                   path, a FIFO, a device, or a path the policy hides is refused."
)]
pub struct FileReadArgs {
    /// A subdirectory of the server's workspace to act in (plain names, as a run's
    /// `workspace`); absent: the server's workspace.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_CWD_BYTES))]
    pub workspace: Option<String>,
    /// The file, relative to the workspace (no leading '/', no '..').
    #[schemars(length(min = 1, max = MAX_FILE_PATH_BYTES))]
    pub path: String,
    /// Byte offset to read from.
    #[serde(default)]
    pub offset: u64,
    /// Most bytes to return.
    #[serde(default = "default_read_bytes")]
    #[schemars(range(min = 1, max = MAX_FILE_READ_BYTES))]
    pub max_bytes: usize,
}

/// `GET /v1/files/list` and `GET /v1/files/stat` (their query), and `file_list`'s and
/// `file_stat`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "FilePathArgs")]
pub struct FilePathArgs {
    /// A subdirectory of the server's workspace to act in (plain names, as a run's
    /// `workspace`); absent: the server's workspace.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_CWD_BYTES))]
    pub workspace: Option<String>,
    /// The entry, relative to the workspace; empty or absent: the workspace itself.
    #[serde(default)]
    #[schemars(length(max = MAX_FILE_PATH_BYTES))]
    pub path: String,
}

/// `PUT /v1/files`'s body and `file_write`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "FileWriteBody",
    description = "Write a regular file of the workspace, replacing it whole and atomically \
                   (readers see the old file or the new one): data is text, data_base64 is \
                   bytes, exactly one. append adds to what the file holds. The file gets the \
                   workspace's owner and permission bits only. Refused where a run may not \
                   write (.git, protected paths, read-only grants), through a symlink, and \
                   past 64 KiB per write. In review mode nothing is written: the write is \
                   kept as a change set of the caller's (kept_as), applied or discarded as \
                   an overlay run's."
)]
pub struct FileWriteBody {
    /// A subdirectory of the server's workspace to act in (plain names, as a run's
    /// `workspace`); absent: the server's workspace.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_CWD_BYTES))]
    pub workspace: Option<String>,
    /// The file, relative to the workspace (no leading '/', no '..').
    #[schemars(length(min = 1, max = MAX_FILE_PATH_BYTES))]
    pub path: String,
    /// The content as text (its UTF-8 bytes). Exactly one of `data` and `data_base64`.
    #[serde(default)]
    #[schemars(length(max = MAX_FILE_WRITE_BYTES))]
    pub data: Option<String>,
    /// The content as bytes of any kind, standard base64 (padding optional, no
    /// whitespace); at most 64 KiB decoded.
    #[serde(default)]
    pub data_base64: Option<String>,
    /// Add the bytes to what the file holds (the file is still replaced whole, by a copy).
    #[serde(default)]
    pub append: bool,
    /// Create the file when it does not exist; false: only replace an existing one.
    #[serde(default = "default_true")]
    pub create: bool,
    /// Make the missing directories on the way (the workspace owner's, 0755).
    #[serde(default)]
    pub mkdir_parents: bool,
    /// Permission bits (an integer: 0o755 is 493), at most 0o777; setuid, setgid and
    /// sticky are refused. Absent: the existing file's (without those), else 0o644.
    #[serde(default)]
    #[schemars(range(max = 0o777))]
    pub mode: Option<u32>,
    /// The workspace mode, as a run's `workspace_mode`: `overlay` (review mode) keeps the
    /// write as a change set instead of making it (`kept_as`), as a policy in review mode
    /// does; `direct` is refused under such a policy (`workspace.mode_widened`).
    #[serde(default)]
    pub workspace_mode: Option<WorkspaceMode>,
}

impl FileWriteBody {
    /// The bytes to write: `data`'s UTF-8 or `data_base64` decoded, exactly one, at most
    /// [`MAX_FILE_WRITE_BYTES`] (`file.too_large` past it).
    ///
    /// ```
    /// use tierbox_server::files::FileWriteBody;
    ///
    /// let body: FileWriteBody = serde_json::from_str(r#"{"path":"a","data_base64":"AAE="}"#).unwrap();
    /// assert_eq!(body.bytes().unwrap(), [0, 1]);
    /// let both: FileWriteBody = serde_json::from_str(r#"{"path":"a","data":"x","data_base64":"eA=="}"#).unwrap();
    /// assert_eq!(both.bytes().unwrap_err().code, "input.data_conflict");
    /// ```
    pub fn bytes(&self) -> Result<Vec<u8>, ServiceError> {
        let bytes = match (&self.data, &self.data_base64) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::new(
                    "input.data_conflict",
                    "give one of data and data_base64, not both",
                ));
            }
            (None, None) => {
                return Err(ServiceError::new(
                    "input.no_data",
                    "give data (text) or data_base64 (bytes); data: \"\" writes an empty file",
                ));
            }
            (Some(text), None) => text.as_bytes().to_vec(),
            (None, Some(b64)) => {
                tierbox_policy::plan::decode_stdin_base64(b64).ok_or_else(|| {
                    ServiceError::new(
                        "input.data_encoding_invalid",
                        format!(
                            "data_base64 is not standard base64 (A-Z a-z 0-9 + /, = padding \
                             optional, no whitespace): {}",
                            crate::terms::base64_fault(b64)
                        ),
                    )
                })?
            }
        };
        if bytes.len() > MAX_FILE_WRITE_BYTES {
            return Err(FileError::TooLarge {
                path: self.path.clone(),
                what: "the data",
                bytes: bytes.len() as u64,
                max: MAX_FILE_WRITE_BYTES as u64,
                key: "MAX_FILE_WRITE_BYTES",
            }
            .into());
        }
        Ok(bytes)
    }

    fn options(&self) -> WriteOptions {
        WriteOptions {
            create: self.create,
            append: self.append,
            mkdir_parents: self.mkdir_parents,
            mode: self.mode,
        }
    }
}

/// What a read returned: the bytes as `text` (and `bytes_base64` when the text is
/// lossy), where they are in the file, and whether it goes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileContent {
    /// The file, relative to the workspace.
    pub path: String,
    /// The file's size when it was read, in bytes.
    pub size: u64,
    /// Where the bytes start.
    pub offset: u64,
    /// Where the next read starts (`offset` plus the bytes returned).
    pub next_offset: u64,
    /// Whether the file goes on past `next_offset`.
    pub truncated: bool,
    /// The bytes as UTF-8, each invalid sequence replaced by U+FFFD.
    pub text: String,
    /// The bytes, standard base64, exactly when `text` is lossy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_base64: Option<String>,
    /// Its mode bits.
    pub mode: u32,
    /// When it was last modified, milliseconds since the Unix epoch.
    pub mtime_unix_ms: i64,
}

/// Parses a tool's arguments: the size cap and the closed shape (no duplicate keys).
fn args_of<T: serde::de::DeserializeOwned>(args: &[u8]) -> Result<T, ServiceError> {
    if args.len() > MAX_REQUEST_BYTES {
        return Err(Rejection::RequestTooLarge {
            bytes: args.len(),
            max: MAX_REQUEST_BYTES,
        }
        .into());
    }
    tierbox_policy::json::from_slice(args).map_err(|e| {
        Rejection::Malformed {
            detail: e.to_string(),
        }
        .into()
    })
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, ServiceError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Into::into),
        Err(e) => Err(ServiceError::new("file.io", format!("file face: {e}"))),
    }
}

impl Service {
    /// Reads a file of the workspace ([`FileReadArgs`]).
    pub async fn file_read(&self, args: FileReadArgs) -> Result<FileContent, ServiceError> {
        let runner = self.runner().clone();
        blocking(move || {
            let face = runner.file_face(args.workspace.as_deref(), None)?;
            let read = face.read(&args.path, args.offset, args.max_bytes)?;
            let next_offset = read.offset + read.bytes.len() as u64;
            let wire = tierbox_runner::wire::encode_owned(read.bytes);
            Ok(FileContent {
                path: args.path,
                size: read.size,
                offset: read.offset,
                next_offset,
                truncated: read.truncated,
                text: wire.text,
                bytes_base64: wire.bytes_base64,
                mode: read.mode,
                mtime_unix_ms: read.mtime_unix_ms,
            })
        })
        .await
    }

    /// Writes a file of the workspace for `owner` ([`FileWriteBody`]), audited with
    /// `request` (the body as sent).
    pub async fn file_write(
        &self,
        owner: &str,
        body: FileWriteBody,
        request: Value,
    ) -> Result<FileWritten, ServiceError> {
        let data = body.bytes()?;
        let runner = self.runner().clone();
        let owner = owner.to_owned();
        blocking(move || {
            let face = runner.file_face(body.workspace.as_deref(), body.workspace_mode)?;
            runner.write_file(&owner, &face, &body.path, &data, body.options(), &request)
        })
        .await
    }

    /// Lists a directory of the workspace ([`FilePathArgs`]).
    pub async fn file_list(&self, args: FilePathArgs) -> Result<FileList, ServiceError> {
        self.on_face(args, FileFace::list).await
    }

    /// The metadata of an entry of the workspace ([`FilePathArgs`]).
    pub async fn file_stat(&self, args: FilePathArgs) -> Result<FileStat, ServiceError> {
        self.on_face(args, FileFace::stat).await
    }

    /// `op` on the path of `args`, in the face of its workspace.
    async fn on_face<T: Send + 'static>(
        &self,
        args: FilePathArgs,
        op: fn(&FileFace, &str) -> Result<T, FileError>,
    ) -> Result<T, ServiceError> {
        let runner = self.runner().clone();
        blocking(move || {
            op(
                &runner.file_face(args.workspace.as_deref(), None)?,
                &args.path,
            )
        })
        .await
    }

    /// Runs one of the [`FILE_TOOL_NAMES`] for `owner`: its structured result and its text
    /// summary.
    pub(crate) async fn call_file_tool(
        &self,
        owner: &str,
        tool: &str,
        args: &[u8],
    ) -> Result<(Value, String), ServiceError> {
        use crate::results::to_json;
        match tool {
            FILE_READ_TOOL => {
                let c = self.file_read(args_of(args)?).await?;
                let summary = format!(
                    "{}: bytes {} to {} of {}{}:\n{}",
                    c.path,
                    c.offset,
                    c.next_offset,
                    c.size,
                    match c.truncated {
                        true => " (truncated: read on from next_offset)",
                        false => "",
                    },
                    c.text
                );
                Ok((to_json(&c), summary))
            }
            FILE_WRITE_TOOL => {
                let request: Value = args_of(args)?;
                let body: FileWriteBody = args_of(args)?;
                let w = self.file_write(owner, body, request).await?;
                let summary = format!(
                    "wrote {} bytes to {} ({}; {} bytes now, mode {:o}, sha256 {})",
                    w.bytes_written,
                    w.path,
                    match (w.created, w.appended) {
                        (true, _) => "created",
                        (false, true) => "appended",
                        (false, false) => "replaced",
                    },
                    w.size,
                    w.mode,
                    w.sha256
                );
                Ok((to_json(&w), summary))
            }
            FILE_LIST_TOOL => {
                let l = self.file_list(args_of(args)?).await?;
                let mut summary = format!(
                    "{} entries in {}{}:",
                    l.entries.len(),
                    if l.path.is_empty() { "." } else { &l.path },
                    if l.truncated { " (truncated)" } else { "" }
                );
                for e in &l.entries {
                    let mark = if e.kind == FileKind::Directory {
                        "/"
                    } else {
                        ""
                    };
                    summary.push_str(&format!(
                        "\n{}{mark} ({}, {} bytes)",
                        e.name,
                        kind_name(e.kind),
                        e.size
                    ));
                }
                Ok((to_json(&l), summary))
            }
            FILE_STAT_TOOL => {
                let s = self.file_stat(args_of(args)?).await?;
                let summary = format!(
                    "{}: {}, {} bytes, mode {:o}, uid {}",
                    if s.path.is_empty() { "." } else { &s.path },
                    kind_name(s.kind),
                    s.size,
                    s.mode,
                    s.uid
                );
                Ok((to_json(&s), summary))
            }
            other => Err(ServiceError::new(
                "input.malformed",
                format!("{other} is not a file tool"),
            )),
        }
    }
}

/// A kind as the wire names it (`file`, `directory`, …).
fn kind_name(kind: FileKind) -> String {
    crate::results::to_json(&kind)
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The JSON Schema of one file tool's input, by name.
pub fn tool_schema(name: &str) -> Option<Value> {
    fn of<T: JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
    }
    let (mut schema, description) = match name {
        FILE_READ_TOOL => return Some(of::<FileReadArgs>()),
        FILE_WRITE_TOOL => (of::<FileWriteBody>(), None),
        FILE_LIST_TOOL => (
            of::<FilePathArgs>(),
            Some(
                "List a directory of the workspace (path empty: its top): each entry's name, \
                 kind, size, mode and mtime, sorted by name, at most 1000 (truncated says \
                 there are more). Symlinks are listed, never followed; paths the policy \
                 hides are left out.",
            ),
        ),
        FILE_STAT_TOOL => (
            of::<FilePathArgs>(),
            Some(
                "The metadata of an entry of the workspace (path empty: the workspace): its \
                 kind, size, mode, mtime and owner, without following a symlink.",
            ),
        ),
        _ => return None,
    };
    schema["title"] = Value::from(name);
    if let Some(d) = description {
        schema["description"] = Value::from(d);
    }
    Some(schema)
}

/// The schema of a file tool's structured content.
pub fn output_schema(name: &str) -> Option<Value> {
    use crate::results::output_schema;
    Some(match name {
        FILE_READ_TOOL => output_schema::<FileContent>(),
        FILE_WRITE_TOOL => output_schema::<FileWritten>(),
        FILE_LIST_TOOL => output_schema::<FileList>(),
        FILE_STAT_TOOL => output_schema::<FileStat>(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tool_schemas_are_closed_objects_bounded_by_the_constants() {
        for name in FILE_TOOL_NAMES {
            let s = tool_schema(name).unwrap();
            assert_eq!(s["type"], "object", "{name}");
            assert_eq!(s["additionalProperties"], false, "{name}");
            assert_eq!(s["title"], name, "{name}");
            assert!(
                s["description"].as_str().is_some_and(|d| d.len() > 40),
                "{name}"
            );
            assert_eq!(
                s["properties"]["path"]["maxLength"], MAX_FILE_PATH_BYTES,
                "{name}"
            );
            assert_eq!(output_schema(name).unwrap()["type"], "object", "{name}");
        }
        let read = tool_schema(FILE_READ_TOOL).unwrap();
        assert_eq!(
            read["properties"]["max_bytes"]["maximum"],
            MAX_FILE_READ_BYTES
        );
        assert_eq!(read["required"], serde_json::json!(["path"]));
        let write = tool_schema(FILE_WRITE_TOOL).unwrap();
        assert_eq!(
            write["properties"]["data"]["maxLength"],
            MAX_FILE_WRITE_BYTES
        );
        assert_eq!(write["properties"]["mode"]["maximum"], 0o777);
        assert!(tool_schema("file_delete").is_none());
    }

    #[test]
    fn write_bodies_are_closed_and_their_data_bounded() {
        let body = |s: &str| tierbox_policy::json::from_slice::<FileWriteBody>(s.as_bytes());
        let b = body(r#"{"path":"a.txt","data":"hi"}"#).unwrap();
        assert_eq!(b.bytes().unwrap(), b"hi");
        assert!(b.create && !b.append && !b.mkdir_parents);
        assert!(body(r#"{"path":"a","data":"x","owner":0}"#).is_err());
        assert!(body(r#"{"path":"a","data":"x","data":"y"}"#).is_err());
        let e = body(r#"{"path":"a"}"#).unwrap().bytes().unwrap_err();
        assert_eq!(e.code, "input.no_data");
        let e = body(r#"{"path":"a","data_base64":"a b"}"#)
            .unwrap()
            .bytes()
            .unwrap_err();
        assert_eq!(e.code, "input.data_encoding_invalid");
        let big = format!(
            r#"{{"path":"a","data":"{}"}}"#,
            "x".repeat(MAX_FILE_WRITE_BYTES + 1)
        );
        let e = body(&big).unwrap().bytes().unwrap_err();
        assert_eq!((e.code.as_str(), e.http_status()), ("file.too_large", 413));
    }

    #[test]
    fn file_codes_have_the_api_s_statuses() {
        for (code, status) in [
            ("file.not_found", 404),
            ("file.too_large", 413),
            ("file.changed", 409),
            ("file.io", 500),
            ("file.refused", 422),
            ("file.protected", 422),
            ("file.not_regular", 422),
            ("file.review_mode", 422),
            ("changes.over_cap", 507),
        ] {
            assert_eq!(ServiceError::new(code, "").http_status(), status, "{code}");
        }
    }
}
