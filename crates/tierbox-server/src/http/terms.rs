//! The `/v1/terms` routes: terms ([`crate::terms`]) over HTTP, scoped to the caller's
//! owner as `/v1/process/...` is (another owner's id is 404 `term.not_found`), behind the
//! same authentication, admission and body cap
//! ([`tierbox_policy::request::MAX_REQUEST_BYTES`]).
//!
//! A read with `wait_ms` holds its request's admission slot while it waits (at most
//! [`tierbox_runner::term::MAX_TERM_WAIT_MS`]), as a run does.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use serde::Deserialize;

use super::{
    ApiResult, AppState, Auth, caller, check_json, json_body, ok, path_id, query_error, read_body,
};
use crate::results::to_json;
use crate::terms::{
    DEFAULT_TERM_READ_BYTES, TermInputBody, TermRead, TermSignalBody, TermSizeBody, TermStart, Wait,
};

/// Adds the term routes to `router`.
pub(super) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route("/v1/terms", get(term_list).post(term_start))
        .route("/v1/terms/{id}", get(term_state::<false>))
        .route("/v1/terms/{id}/input", post(term_input))
        .route("/v1/terms/{id}/resize", post(term_resize))
        .route("/v1/terms/{id}/signal", post(term_signal))
        .route("/v1/terms/{id}/output", get(term_output))
        .route("/v1/terms/{id}/kill", post(term_state::<true>))
}

/// The caller's owner and a JSON body read whole (at most the request cap).
async fn owner_and_body(
    auth: &Auth,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, axum::body::Bytes), super::ApiError> {
    let owner = caller(auth, headers)?.owner().to_owned();
    check_json(headers)?;
    Ok((owner, read_body(body).await?))
}

/// The term's id, the caller's owner and the JSON body of a closed shape `T`.
async fn id_owner_body<T: serde::de::DeserializeOwned>(
    id: Result<Path<String>, PathRejection>,
    auth: &Auth,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, String, T), super::ApiError> {
    let id = path_id(id)?;
    let (owner, body) = owner_and_body(auth, headers, body).await?;
    Ok((id, owner, json_body(&body)?))
}

/// The term's id (a handle's shape) and the caller's owner.
pub(super) fn id_and_owner(
    id: Result<Path<String>, PathRejection>,
    auth: &Auth,
    headers: &HeaderMap,
) -> Result<(String, String), super::ApiError> {
    let id = path_id(id)?;
    Ok((id, caller(auth, headers)?.owner().to_owned()))
}

/// `POST /v1/terms`: a `process_run` request plus `pty`, `wait_ms`, `max_bytes`.
async fn term_start(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let (owner, body) = owner_and_body(&auth, &headers, body).await?;
    let start = TermStart::from_http(&body).map_err(crate::service::ServiceError::from)?;
    ok(to_json(&st.service.term_start(&owner, &start).await?))
}

async fn term_list(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
) -> ApiResult {
    let owner = caller(&auth, &headers)?.owner().to_owned();
    ok(to_json(&st.service.term_list(&owner).await))
}

/// `GET /v1/terms/{id}` (`KILL` false) and `POST /v1/terms/{id}/kill` (true): the term's
/// status, after killing it for the second.
async fn term_state<const KILL: bool>(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let (id, owner) = id_and_owner(id, &auth, &headers)?;
    let status = match KILL {
        true => st.service.term_kill(&owner, &id).await?,
        false => st.service.term_status(&owner, &id).await?,
    };
    ok(to_json(&status))
}

/// `POST /v1/terms/{id}/input`: `{"data"}` or `{"data_base64"}`, and `"eof"`.
async fn term_input(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let (id, owner, b): (_, _, TermInputBody) = id_owner_body(id, &auth, &headers, body).await?;
    let data = b.bytes().map_err(crate::service::ServiceError::from)?;
    ok(to_json(
        &st.service.term_write(&owner, &id, &data, b.eof).await?,
    ))
}

/// `POST /v1/terms/{id}/resize`: `{"rows", "cols"}`.
async fn term_resize(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let (id, owner, b): (_, _, TermSizeBody) = id_owner_body(id, &auth, &headers, body).await?;
    let size = b.size().map_err(crate::service::ServiceError::from)?;
    ok(to_json(&st.service.term_resize(&owner, &id, size)?))
}

/// `POST /v1/terms/{id}/signal`: `{"signal": "INT"}`.
async fn term_signal(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let (id, owner, b): (_, _, TermSignalBody) = id_owner_body(id, &auth, &headers, body).await?;
    ok(to_json(&st.service.term_signal(&owner, &id, &b.signal)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TermOutputQuery {
    #[serde(default)]
    offset: u64,
    max_bytes: Option<usize>,
    #[serde(default)]
    wait_ms: u64,
}

/// `GET /v1/terms/{id}/output?offset=&max_bytes=&wait_ms=`: a long poll — at once when
/// there is output past `offset`, else when some arrives, the term ends, or `wait_ms`
/// passed.
async fn term_output(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<TermOutputQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let (id, owner) = id_and_owner(id, &auth, &headers)?;
    let Query(q) = query.map_err(|e| query_error(&e))?;
    let read = TermRead {
        offset: q.offset,
        max_bytes: q.max_bytes.unwrap_or(DEFAULT_TERM_READ_BYTES),
        wait_ms: q.wait_ms,
        wait: Wait::FirstOutput,
    };
    ok(to_json(&st.service.term_read(&owner, &id, &read).await?))
}
