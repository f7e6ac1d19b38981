//! The single page: its own HTML, script and style, compiled in, and the charting library
//! (uPlot, from npm) read from the assets directory. Nothing is fetched from elsewhere: the
//! Content-Security-Policy says so to the browser.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::ConsoleError;

/// The charting library's module, in the assets directory.
pub const CHART_JS: &str = "uPlot.esm.js";
/// The charting library's style sheet.
pub const CHART_CSS: &str = "uPlot.min.css";

const INDEX: &str = include_str!("../web/index.html");
const APP: &str = include_str!("../web/app.js");
const STYLE: &str = include_str!("../web/style.css");
const ICON: &str = include_str!("../web/favicon.svg");

/// The Content-Security-Policy of every answer: nothing but the console's own script, style,
/// images and API, and no framing.
pub const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                      script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// Checks the charting library is where the console will serve it from.
pub fn check_assets(dir: &Path) -> Result<(), ConsoleError> {
    for name in [CHART_JS, CHART_CSS] {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(ConsoleError::Config(format!(
                "{}: the charting library is missing (run scripts/fetch-console-assets.sh, or \
                 give --assets DIR)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The page's routes.
pub fn router(assets: PathBuf) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route("/app.js", get(|| async { file("text/javascript", APP) }))
        .route("/style.css", get(|| async { file("text/css", STYLE) }))
        .route(
            "/favicon.svg",
            get(|| async { file("image/svg+xml", ICON) }),
        )
        .route("/vendor/{name}", get(vendor))
        .with_state(assets)
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn vendor(
    State(assets): State<PathBuf>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let content_type = match name.as_str() {
        CHART_JS => "text/javascript",
        CHART_CSS => "text/css",
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    match tokio::fs::read(assets.join(&name)).await {
        Ok(bytes) => {
            let mut r = bytes.into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=86400"),
            );
            r
        }
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}
