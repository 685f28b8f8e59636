//! The MCP server: the tools over one MCP session (stdio in `tierbox serve --mcp`).
//!
//! - Tool input schemas are the generated schemas of the request types
//!   ([`tierbox_policy::schema::tool_schema`]); arguments are parsed by the same closed
//!   parsers the HTTP API and the CLI use.
//! - A refusal is a tool result with `isError: true`, `structuredContent` `{code,
//!   message}` and the text `rejected: <code>: <message>`, so the model reads why. Only an
//!   unknown tool is a protocol error.
//! - A run result has the outcome (or the background handle) as structured content and a
//!   short text summary: how it ended, truncation notes, the tail of the output.
//! - A `process_run` or `wasm_run` call that carries a progress token gets its output as
//!   `notifications/progress` messages while it runs. A cancelled call kills its run.
//! - The session is the owner of the background processes and terms it starts; the
//!   server ends its `run_owned` ones when the session ends ([`McpSession::owner`]).
//! - Terms (programs on a terminal of their own) are the `session_*` tools
//!   ([`crate::terms::TERM_TOOL_NAMES`]): `session_start`, then `session_write` (which
//!   returns the output of its yield time), `session_read`, `session_resize`,
//!   `session_signal` and `session_close`.
//! - The workspace's files are the `file_*` tools ([`crate::files::FILE_TOOL_NAMES`]):
//!   `file_read`, `file_write`, `file_list` and `file_stat`, under the rules a run
//!   answers to.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tierbox_policy::schema::{PROCESS_RUN_TOOL, TOOL_NAMES, WASM_RUN_TOOL, tool_schema};
use tierbox_runner::OutputEvent;
use tokio::sync::mpsc;

use crate::files::FILE_TOOL_NAMES;
use crate::service::{Caller, Service, ServiceError};
use crate::terms::TERM_TOOL_NAMES;

/// Output batches buffered between a run and its progress notifications. When the client
/// reads slower than the run writes, batches are dropped (the result has all the output).
pub const PROGRESS_CHANNEL_EVENTS: usize = 256;

/// What the server tells the model about itself at initialisation.
const INSTRUCTIONS: &str = "Tierbox runs programs in a sandbox chosen by policy. Use \
process_run with a bare command and its args (no shell); paths stay inside the workspace. \
With background: true it returns a handle for process_output / process_write_stdin / \
process_kill. For an interactive program (a shell, a REPL) use session_start, then \
session_write (it returns what the terminal showed within yield_ms) and session_close. \
Read and write workspace files directly with file_read, file_write, file_list and file_stat. \
A refusal names the rule (code) and the offending value.";

/// One MCP session: a fresh owner over a shared [`Service`].
#[derive(Debug, Clone)]
pub struct McpSession {
    service: Service,
    caller: Arc<Caller>,
    tools: Arc<Vec<Tool>>,
}

/// Whether `name` is a tool this server has (offered or not).
fn is_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name) || TERM_TOOL_NAMES.contains(&name) || FILE_TOOL_NAMES.contains(&name)
}

/// The tool list, from the generated schemas: `changes_apply` only where an agent may
/// apply ([`Service::may_apply`]; `workspace.agent_may_apply`), then the term tools and
/// the file tools.
fn tools(may_apply: bool) -> Vec<Tool> {
    TOOL_NAMES
        .iter()
        .chain(TERM_TOOL_NAMES.iter())
        .chain(FILE_TOOL_NAMES.iter())
        .filter(|name| may_apply || **name != tierbox_policy::schema::CHANGES_APPLY_TOOL)
        .filter_map(|name| {
            let schema = tool_schema(name)
                .or_else(|| crate::terms::tool_schema(name))
                .or_else(|| crate::files::tool_schema(name))?;
            let description = schema["description"].as_str().unwrap_or(name).to_owned();
            let Value::Object(map) = schema else {
                return None;
            };
            let Value::Object(output) = output_schema(name) else {
                return None;
            };
            Some(
                Tool::new(*name, description, Arc::new(map))
                    .with_raw_output_schema(Arc::new(output))
                    .annotate(annotations(name)),
            )
        })
        .collect()
}

/// The schema of each tool's structured content (a successful call's; a refusal's is the
/// error body), generated from the type the server serializes it from.
fn output_schema(name: &str) -> Value {
    use crate::results::{self, OutputChunk, ProcessList, RunResult, StdinWritten};
    use crate::terms::{
        SESSION_CLOSE_TOOL, SESSION_READ_TOOL, SESSION_RESIZE_TOOL, SESSION_SIGNAL_TOOL,
        SESSION_START_TOOL, SESSION_WRITE_TOOL,
    };
    use tierbox_policy::schema::{
        CHANGES_APPLY_TOOL, CHANGES_DISCARD_TOOL, CHANGES_SHOW_TOOL, PROCESS_KILL_TOOL,
        PROCESS_LIST_TOOL, PROCESS_OUTPUT_TOOL, PROCESS_STATUS_TOOL, PROCESS_WRITE_STDIN_TOOL,
    };
    use tierbox_runner::background::BackgroundStatus;
    match name {
        PROCESS_RUN_TOOL => results::output_schema::<RunResult>(),
        WASM_RUN_TOOL => results::output_schema::<tierbox_runner::Outcome>(),
        PROCESS_STATUS_TOOL | PROCESS_KILL_TOOL => results::output_schema::<BackgroundStatus>(),
        PROCESS_OUTPUT_TOOL => results::output_schema::<OutputChunk>(),
        PROCESS_WRITE_STDIN_TOOL => results::output_schema::<StdinWritten>(),
        PROCESS_LIST_TOOL => results::output_schema::<ProcessList>(),
        CHANGES_SHOW_TOOL => results::output_schema::<results::ChangesShown>(),
        CHANGES_APPLY_TOOL => results::output_schema::<tierbox_runner::review::Applied>(),
        CHANGES_DISCARD_TOOL => results::output_schema::<results::ChangesDiscarded>(),
        SESSION_START_TOOL => results::output_schema::<results::TermStarted>(),
        SESSION_WRITE_TOOL => results::output_schema::<results::TermWritten>(),
        SESSION_READ_TOOL => results::output_schema::<results::TermOutput>(),
        SESSION_RESIZE_TOOL => results::output_schema::<results::TermResized>(),
        SESSION_SIGNAL_TOOL => results::output_schema::<results::TermSignalled>(),
        SESSION_CLOSE_TOOL => results::output_schema::<BackgroundStatus>(),
        _ => crate::files::output_schema(name).unwrap_or(Value::Null),
    }
}

/// What each tool does to the world, for clients that ask before calling (MCP tool
/// annotations): the runs change the workspace (and `process_run` may reach the network
/// where the policy allows egress); reads change nothing; a kill ends a process, and
/// killing it again changes nothing more. A term's start runs a program as a run does;
/// typing into it, resizing and signalling it act on a running program (not
/// idempotent); reading changes nothing; closing it ends it, as a kill does. A file
/// write replaces a file of the workspace (an append is not idempotent); reading,
/// listing and stat-ing files change nothing.
fn annotations(name: &str) -> ToolAnnotations {
    use crate::files::{FILE_LIST_TOOL, FILE_READ_TOOL, FILE_STAT_TOOL, FILE_WRITE_TOOL};
    use crate::terms::{
        SESSION_CLOSE_TOOL, SESSION_READ_TOOL, SESSION_RESIZE_TOOL, SESSION_SIGNAL_TOOL,
        SESSION_START_TOOL, SESSION_WRITE_TOOL,
    };
    use tierbox_policy::schema::{
        CHANGES_APPLY_TOOL, CHANGES_DISCARD_TOOL, CHANGES_SHOW_TOOL, PROCESS_KILL_TOOL,
        PROCESS_LIST_TOOL, PROCESS_OUTPUT_TOOL, PROCESS_STATUS_TOOL, PROCESS_WRITE_STDIN_TOOL,
    };
    let a = ToolAnnotations::new();
    match name {
        SESSION_START_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
        SESSION_WRITE_TOOL | SESSION_SIGNAL_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
        SESSION_RESIZE_TOOL => a
            .read_only(false)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
        SESSION_READ_TOOL => a.read_only(true).open_world(false),
        SESSION_CLOSE_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
        PROCESS_RUN_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
        WASM_RUN_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
        PROCESS_STATUS_TOOL | PROCESS_OUTPUT_TOOL | PROCESS_LIST_TOOL => {
            a.read_only(true).open_world(false)
        }
        PROCESS_WRITE_STDIN_TOOL => a
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
        PROCESS_KILL_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
        CHANGES_SHOW_TOOL => a.read_only(true).open_world(false),
        // Writes the workspace; a second apply of the same set finds it gone.
        CHANGES_APPLY_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
        CHANGES_DISCARD_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
        FILE_READ_TOOL | FILE_LIST_TOOL | FILE_STAT_TOOL => a.read_only(true).open_world(false),
        FILE_WRITE_TOOL => a
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
        _ => a,
    }
}

impl McpSession {
    /// A session with a new random owner id: an agent ([`Caller::Agent`]), which sees
    /// only its own change sets and is offered `changes_apply` only where the policy
    /// says `workspace.agent_may_apply`.
    pub fn new(service: Service) -> Self {
        let caller = Caller::Agent {
            owner: format!("mcp:{}", tierbox_runner::supervisor::new_run_id()),
        };
        let tools = tools(service.may_apply(&caller));
        Self {
            service,
            caller: Arc::new(caller),
            tools: Arc::new(tools),
        }
    }

    /// The owner id of this session's background processes and change sets. When the
    /// session ends, call [`Service::end_owner`] with it.
    pub fn owner(&self) -> &str {
        self.caller.owner()
    }
}

/// A refusal as a tool result the model can read.
pub fn error_result(e: &ServiceError) -> CallToolResult {
    // Not `structured_error`: it would also render the whole value as text, only to
    // have that replaced by the line below.
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("rejected: {e}"))]);
    r.structured_content = Some(e.to_json());
    r
}

/// Forwards output events as progress notifications until the run's sender is dropped.
fn forward_progress(
    context: &RequestContext<RoleServer>,
) -> Option<(mpsc::Sender<OutputEvent>, tokio::task::JoinHandle<()>)> {
    let token = context.meta.get_progress_token()?;
    let peer = context.peer.clone();
    let (tx, mut rx) = mpsc::channel::<OutputEvent>(PROGRESS_CHANNEL_EVENTS);
    let task = tokio::spawn(async move {
        let mut sent: u64 = 0;
        while let Some(ev) = rx.recv().await {
            sent += ev.bytes.len() as u64;
            // A progress message is text for a reader: the bytes' UTF-8 view (the
            // result's structured content has them exactly).
            let message = format!("[{}] {}", ev.stream.as_str(), ev.text());
            #[allow(clippy::cast_precision_loss)]
            let param =
                ProgressNotificationParam::new(token.clone(), sent as f64).with_message(message);
            if peer.notify_progress(param).await.is_err() {
                return;
            }
        }
    });
    Some((tx, task))
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tierbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if !is_tool(name) {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}; the tools are {}, {}, {}",
                    TOOL_NAMES.join(", "),
                    TERM_TOOL_NAMES.join(", "),
                    FILE_TOOL_NAMES.join(", ")
                ),
                None,
            ));
        }
        let args = serde_json::to_vec(&request.arguments.unwrap_or_default())
            .unwrap_or_else(|_| b"{}".to_vec());
        let progress = if name == PROCESS_RUN_TOOL || name == WASM_RUN_TOOL {
            forward_progress(&context)
        } else {
            None
        };
        let (events, forwarder) = match progress {
            Some((tx, task)) => (Some(tx), Some(task)),
            None => (None, None),
        };
        // A cancelled request drops the call, and with it the run, whose guard kills the
        // whole sandboxed tree.
        let result = tokio::select! {
            r = self.service.call_tool(&self.caller, name, &args, events) => r,
            () = context.ct.cancelled() => Some(Err(ServiceError::new(
                "run.cancelled",
                "the client cancelled the call; the run was killed",
            ))),
        };
        if let Some(task) = forwarder {
            // The run's sender is gone: the forwarder drains what is queued, then ends.
            let _ = task.await;
        }
        let result = match result {
            None => return Err(ErrorData::invalid_params("unknown tool", None)),
            Some(Ok((structured, summary))) => {
                // Not `CallToolResult::structured`: it renders the whole outcome (~7 KiB)
                // as text for `content`, which the summary replaces.
                let mut r = CallToolResult::success(vec![ContentBlock::text(summary)]);
                r.structured_content = Some(structured);
                r
            }
            Some(Err(e)) => error_result(&e),
        };
        Ok(result.into())
    }
}

/// Serves one MCP session over `transport` until the client closes it, then ends the
/// session's `run_owned` background processes.
pub async fn serve_session<T, E, A>(service: Service, transport: T) -> anyhow::Result<()>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::ServiceExt;
    let session = McpSession::new(service.clone());
    let owner = session.owner().to_owned();
    let result = match session.serve(transport).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(anyhow::Error::from),
        Err(e) => Err(anyhow::Error::from(e)),
    };
    service.end_owner(&owner).await;
    result
}
