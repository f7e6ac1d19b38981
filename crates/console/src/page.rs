//! The single page: its own HTML, script and style, and the charting library (uPlot, from npm,
//! put in `vendor/` by `scripts/fetch-console-assets.sh` before the build), all compiled in, so
//! the console works wherever the binary is installed. Nothing is fetched from elsewhere: the
//! Content-Security-Policy says so to the browser.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The charting library's module, as the page imports it (`/vendor/uPlot.esm.js`).
pub const CHART_JS: &str = "uPlot.esm.js";
/// The charting library's style sheet.
pub const CHART_CSS: &str = "uPlot.min.css";

const CHART_JS_BODY: &str = include_str!("../vendor/uPlot.esm.js");
const CHART_CSS_BODY: &str = include_str!("../vendor/uPlot.min.css");
const INDEX: &str = include_str!("../web/index.html");
const APP: &str = include_str!("../web/app.js");
const STYLE: &str = include_str!("../web/style.css");
const ICON: &str = include_str!("../web/favicon.svg");

/// The Content-Security-Policy of every answer: nothing but the console's own script, style,
/// images and API, and no framing.
pub const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                      script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// The page's routes.
pub fn router() -> Router {
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
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn vendor(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let (content_type, body) = match name.as_str() {
        CHART_JS => ("text/javascript", CHART_JS_BODY),
        CHART_CSS => ("text/css", CHART_CSS_BODY),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=86400"),
    );
    r
}
