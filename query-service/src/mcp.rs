//! The memory as tools for agents, over the Model Context Protocol: the HTTP
//! API's operations under tool names, their input schemas generated from the
//! same request types, their errors the API's messages as tool errors. Served
//! over streamable HTTP at `/mcp` (stateless, so any replica answers any
//! call) and over stdio (`memweave-query mcp`) for desktop clients.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Serialize;

use crate::reader::Reader;
use crate::request::{
    AskRequest, DocumentsRequest, EntityRequest, NodeRequest, PageRequest, SearchRequest,
    TreeRequest,
};
use crate::service::{ApiError, ServiceState};

/// What an agent is told the server is for.
const INSTRUCTIONS: &str = "Long-term memory over a document archive, built as four memories: \
MemWalker summary trees, ReadAgent pages with gists, a QRMeM entity/relation graph and RAPTOR/ILM-TR \
cluster trees. `ask` answers a question with one navigation strategy and cites its passages \
(document, character range, and the page, heading path, message or row it is in) with the trace of how it found them; `search` ranks passages without \
a model; `list_documents`, `document_tree`, `node`, `page` and `entity` read the memory itself.";

/// The `Host`s `/mcp` answers: every one, or these (the rest get 403, so a
/// web page cannot reach a service on loopback through DNS rebinding).
#[derive(Debug, Clone)]
pub enum AllowedHosts {
    Any,
    Only(Vec<String>),
}

impl AllowedHosts {
    /// Loopback's names, and `others`.
    pub fn loopback_and(others: impl IntoIterator<Item = String>) -> Self {
        let loopback = ["localhost", "127.0.0.1", "::1"].map(String::from);
        AllowedHosts::Only(loopback.into_iter().chain(others).collect())
    }

    /// Whether a request's `Host` (`name`, `name:port`, `[v6]:port`) is
    /// served: its name, or the whole value, is one of the hosts, in any case.
    pub fn permits(&self, host: &str) -> bool {
        let AllowedHosts::Only(hosts) = self else {
            return true;
        };
        let host = host.trim().to_ascii_lowercase();
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split_once(']').map_or(v6, |(name, _)| name),
            None => host
                .rsplit_once(':')
                .map_or(host.as_str(), |(name, _)| name),
        };
        hosts.iter().any(|allowed| {
            allowed.eq_ignore_ascii_case(name) || allowed.eq_ignore_ascii_case(&host)
        })
    }
}

/// The tools, over one service's state.
#[derive(Clone)]
pub struct MemoryTools {
    state: Arc<ServiceState>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for MemoryTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTools").finish_non_exhaustive()
    }
}

/// Whose call it is: over HTTP, who `http`'s authorisation found (none
/// found is no one: nothing is read); over stdio, the administrator, who
/// started the server on the tables.
fn reader_of(context: &RequestContext<RoleServer>) -> Reader {
    match context.extensions.get::<axum::http::request::Parts>() {
        Some(parts) => (parts.extensions.get::<Reader>().cloned()).unwrap_or_else(Reader::nobody),
        None => Reader::Everything,
    }
}

/// A served result as the tool's structured result, or its error as a tool
/// error with the HTTP API's message.
fn result<T: Serialize>(served: Result<T, ApiError>) -> CallToolResult {
    let value = served
        .map_err(|failure| failure.to_string())
        .and_then(|value| serde_json::to_value(value).map_err(|failure| failure.to_string()));
    match value {
        Ok(value) => CallToolResult::structured(value),
        Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
    }
}

// Every tool only reads the memory, a closed world: clients may call them
// without asking their user first.
#[tool_router]
impl MemoryTools {
    pub fn new(state: Arc<ServiceState>) -> Self {
        MemoryTools {
            state,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "Answer a question from the memory with one navigation strategy. Returns the answer, the passages it rests on (document, title, source, character range, section: the PDF page, heading path, mail message or dataset row it is in, text) and the trace of every step and model call."
    )]
    async fn ask(
        &self,
        Parameters(request): Parameters<AskRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.ask(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "Search the memory's passages with BM25 (default) or the dense baseline, without asking a model: the top_k passages with their scores, document, character range and text."
    )]
    async fn search(
        &self,
        Parameters(request): Parameters<SearchRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.search(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "List the memory's documents a page at a time, in id order: pass a page's `next` as `after` for the following one."
    )]
    async fn list_documents(
        &self,
        Parameters(request): Parameters<DocumentsRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.documents(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "A document's MemWalker summary tree (default) or RAPTOR cluster tree: its nodes with their summaries, levels and children, the top `depth` levels below the root only when given."
    )]
    async fn document_tree(
        &self,
        Parameters(request): Parameters<TreeRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.tree(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "One tree node: its summary (and surprising facts for RAPTOR), level, parent, children and, for a leaf, its segment."
    )]
    async fn node(
        &self,
        Parameters(request): Parameters<NodeRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.node(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "A ReadAgent page of a document (numbered from 0): its text and its gist."
    )]
    async fn page(
        &self,
        Parameters(request): Parameters<PageRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.page(&reader_of(&context), &request).await)
    }

    #[tool(
        annotations(read_only_hint = true, open_world_hint = false),
        description = "A graph entity: its name, type, aliases and description, its first relations (id order) and the segments it was extracted from, with how many there are of each."
    )]
    async fn entity(
        &self,
        Parameters(request): Parameters<EntityRequest>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.state.entity(&reader_of(&context), &request).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "memweave-query",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }
}

/// `/mcp`: streamable HTTP, stateless and answering in plain JSON, so a
/// call needs no session and any replica can take it.
pub fn http_service(
    state: Arc<ServiceState>,
    hosts: AllowedHosts,
) -> StreamableHttpService<MemoryTools, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    // The API's limit: rmcp reads the body itself, past axum's.
    config.max_request_body_bytes = crate::request::MAX_BODY_BYTES;
    let config = match hosts {
        AllowedHosts::Any => config.disable_allowed_hosts(),
        AllowedHosts::Only(hosts) => config.with_allowed_hosts(hosts),
    };
    StreamableHttpService::new(
        move || Ok(MemoryTools::new(state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Why serving over stdio ended early.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(Box<rmcp::service::ServerInitializeError>),
    #[error("the MCP session stopped: {0}")]
    Stopped(tokio::task::JoinError),
}

/// Serves the tools over stdin and stdout until the client closes them.
pub async fn serve_stdio(state: Arc<ServiceState>) -> Result<(), StdioError> {
    let running = MemoryTools::new(state)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Handshake(Box::new(e)))?;
    running.waiting().await.map_err(StdioError::Stopped)?;
    Ok(())
}
