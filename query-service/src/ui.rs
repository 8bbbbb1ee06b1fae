//! The web explorer at `/`: a page and its scripts, compiled into the binary
//! so it works where nothing else can be reached. It reads the memory only
//! through the public HTTP API, with the bearer token the person types (kept
//! in the tab's memory, never in a URL or in storage).
//!
//! Every response carries a Content-Security-Policy that allows scripts and
//! styles from this origin only: no inline script runs, so a document's text
//! that holds markup can at worst show as text.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::service::ServiceState;

/// Where the page may load from and talk to: this origin, nothing inline.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The assets: path, media type, contents.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_bytes!("../ui/index.html"),
    ),
    (
        "/ui/app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/app.js"),
    ),
    (
        "/ui/style.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/style.css"),
    ),
    (
        "/ui/vendor/cytoscape.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/vendor/cytoscape.min.js"),
    ),
    (
        "/ui/vendor/cytoscape.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("../ui/vendor/cytoscape.LICENSE"),
    ),
];

/// The explorer's routes; none needs the token (the page holds no data).
pub fn routes() -> Router<Arc<ServiceState>> {
    ASSETS
        .iter()
        .fold(Router::new(), |router, &(path, media_type, body)| {
            router.route(
                path,
                get(move || async move {
                    (
                        [
                            (header::CONTENT_TYPE, media_type),
                            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
                            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                            (header::REFERRER_POLICY, "no-referrer"),
                            (header::CACHE_CONTROL, "no-cache"),
                        ],
                        body,
                    )
                        .into_response()
                }),
            )
        })
}
