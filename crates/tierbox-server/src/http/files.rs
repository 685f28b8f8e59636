//! The `/v1/files` routes: the file face ([`crate::files`]) over HTTP, behind the same
//! authentication, admission and body cap
//! ([`tierbox_policy::request::MAX_REQUEST_BYTES`]) as `/v1/process`. A write is the
//! caller's (its owner is named in the audit record).
//!
//! - `GET /v1/files?path=&offset=&max_bytes=&workspace=`: read a file;
//! - `PUT /v1/files` with a JSON [`crate::files::FileWriteBody`]: write one;
//! - `GET /v1/files/list?path=&workspace=`: list a directory;
//! - `GET /v1/files/stat?path=&workspace=`: an entry's metadata.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::HeaderMap;
use axum::routing::get;
use serde_json::Value;

use super::{ApiResult, AppState, Auth, caller, check_json, json_body, ok, query_error, read_body};
use crate::files::{FilePathArgs, FileReadArgs, FileWriteBody};
use crate::results::to_json;

/// Adds the file routes to `router`.
pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/v1/files", get(file_read).put(file_write))
        .route("/v1/files/list", get(file_list))
        .route("/v1/files/stat", get(file_stat))
}

/// `GET /v1/files`: a file's bytes from `offset` on.
async fn file_read(
    State(st): State<Arc<AppState>>,
    query: Result<Query<FileReadArgs>, QueryRejection>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| query_error(&e))?;
    ok(to_json(&st.service.file_read(q).await?))
}

/// `PUT /v1/files`: write a file for the caller.
async fn file_write(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let owner = caller(&auth, &headers)?.owner().to_owned();
    check_json(&headers)?;
    let body = read_body(body).await?;
    let parsed: FileWriteBody = json_body(&body)?;
    let request: Value = json_body(&body)?;
    ok(to_json(
        &st.service.file_write(&owner, parsed, request).await?,
    ))
}

/// `GET /v1/files/list`: a directory's entries.
async fn file_list(
    State(st): State<Arc<AppState>>,
    query: Result<Query<FilePathArgs>, QueryRejection>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| query_error(&e))?;
    ok(to_json(&st.service.file_list(q).await?))
}

/// `GET /v1/files/stat`: an entry's metadata.
async fn file_stat(
    State(st): State<Arc<AppState>>,
    query: Result<Query<FilePathArgs>, QueryRejection>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| query_error(&e))?;
    ok(to_json(&st.service.file_stat(q).await?))
}
