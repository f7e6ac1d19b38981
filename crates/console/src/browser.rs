//! What the console demands of a browser's requests and tells it with every answer.
//!
//! A request must name a host the console answers to (its `Host`): the listening address's IP
//! literal (any when it listens on every address), `localhost` when it listens on loopback, or
//! a name given with `--http-host`. The port is not compared, so a tunnel or a proxy on another
//! port works. A page that rebinds its own name to the console's address names that name, and
//! is answered 421. A call of the API that says where it comes from (`Origin`) must come from
//! the console's own origin, and one a browser marks as cross-site (`Sec-Fetch-Site`) is refused
//! too: another page can neither read the API nor make it work on its behalf. Every answer says
//! `nosniff`, carries the page's Content-Security-Policy, and over TLS asks for TLS from then on.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// `Strict-Transport-Security` over TLS: a year.
const HSTS: &str = "max-age=31536000";

/// How the console is reached.
#[derive(Debug, Clone)]
pub struct Site {
    listen: SocketAddr,
    names: Vec<String>,
    tls: bool,
}

impl Site {
    /// The console on `listen`, also reached by `names` (`--http-host`), over TLS or not.
    pub fn new(listen: SocketAddr, names: &[String], tls: bool) -> Site {
        Site {
            listen,
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            tls,
        }
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// Whether `name` (a `Host` without its port) is one the console answers to.
    fn answers_to(&self, name: &str) -> bool {
        let ip = self.listen.ip();
        if let Ok(literal) = name.parse::<IpAddr>() {
            return literal == ip || ip.is_unspecified();
        }
        if name.eq_ignore_ascii_case("localhost") {
            return ip.is_loopback() || ip.is_unspecified();
        }
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Why a request with these headers, for `path`, is refused, if it is.
    fn refuses(&self, path: &str, headers: &HeaderMap) -> Option<(StatusCode, String)> {
        let host = match headers.get(header::HOST).map(HeaderValue::to_str) {
            None => None,
            Some(Ok(h)) => Some(h),
            Some(Err(_)) => {
                return Some((
                    StatusCode::BAD_REQUEST,
                    "the Host header is not text".into(),
                ));
            }
        };
        if let Some(host) = host
            && !authority(host).is_some_and(|(name, _)| self.answers_to(name))
        {
            return Some((
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "host '{host}' is not one this console answers to (its address, localhost \
                     on loopback, or a name given with --http-host)"
                ),
            ));
        }
        if !path.starts_with("/api/") {
            return None;
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("?");
            let own = host.is_some_and(|h| same_origin(origin, self.scheme(), h));
            if !own {
                return Some((
                    StatusCode::FORBIDDEN,
                    format!("a request from the page at '{origin}' is refused: not this console's"),
                ));
            }
        }
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if let Some(site) = site
            && site != "same-origin"
            && site != "none"
        {
            return Some((
                StatusCode::FORBIDDEN,
                format!("a {site} request is refused: only the console's own page calls its API"),
            ));
        }
        None
    }
}

/// The name and port of a `Host` value (`[::1]:8080` gives `::1` and 8080).
fn authority(host: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        return match after {
            "" => Some((name, None)),
            _ => Some((name, Some(after.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) => Some((name, Some(port.parse().ok()?))),
        None => Some((host, None)),
    }
    .filter(|(name, _)| !name.is_empty())
}

/// Whether `origin` is `scheme://host`, the default port written or not.
fn same_origin(origin: &str, scheme: &str, host: &str) -> bool {
    let default = if scheme == "https" { 443 } else { 80 };
    let Some(rest) = origin
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("://"))
    else {
        return false;
    };
    match (authority(rest), authority(host)) {
        (Some((a, pa)), Some((b, pb))) => {
            a.eq_ignore_ascii_case(b) && pa.unwrap_or(default) == pb.unwrap_or(default)
        }
        _ => false,
    }
}

/// The middleware that refuses requests from elsewhere, in one line.
pub async fn guard(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    match site.refuses(request.uri().path(), request.headers()) {
        Some((status, why)) => (status, format!("{why}\n")).into_response(),
        None => next.run(request).await,
    }
}

/// The middleware that adds the security headers to every answer.
pub async fn headers(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(crate::page::POLICY),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if site.tls {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn status(site: &Site, path: &str, pairs: &[(&'static str, &str)]) -> u16 {
        site.refuses(path, &headers(pairs))
            .map_or(200, |(s, _)| s.as_u16())
    }

    #[test]
    fn hosts_are_the_address_localhost_on_loopback_and_the_given_names() {
        let site = Site::new(
            "127.0.0.1:8080".parse().unwrap(),
            &["Flows.Example.net".into()],
            false,
        );
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:9000",
            "LOCALHOST",
            "flows.example.net",
            "flows.example.net:443",
        ] {
            assert_eq!(status(&site, "/", &[("host", ok)]), 200, "{ok}");
        }
        for bad in [
            "127.0.0.2:8080",
            "evil.example",
            "[::1]:8080",
            ":8080",
            "localhost:x",
        ] {
            assert_eq!(status(&site, "/", &[("host", bad)]), 421, "{bad}");
        }
        assert_eq!(status(&site, "/", &[]), 200, "no Host (HTTP/1.0)");
        let v6 = Site::new("[::1]:8080".parse().unwrap(), &[], true);
        assert_eq!(status(&v6, "/", &[("host", "[::1]:8080")]), 200);
        assert_eq!(status(&v6, "/", &[("host", "localhost:8080")]), 200);
        let any = Site::new("0.0.0.0:8080".parse().unwrap(), &[], false);
        assert_eq!(status(&any, "/", &[("host", "192.0.2.7:8080")]), 200);
        assert_eq!(status(&any, "/", &[("host", "evil.example:8080")]), 421);
    }

    #[test]
    fn api_calls_come_from_the_console_s_own_origin() {
        let site = Site::new("127.0.0.1:8080".parse().unwrap(), &[], false);
        let api = "/api/v1/summary";
        let host = ("host", "127.0.0.1:8080");
        assert_eq!(status(&site, api, &[host]), 200);
        assert_eq!(
            status(&site, api, &[host, ("origin", "http://127.0.0.1:8080")]),
            200
        );
        for bad in [
            "http://evil.example",
            "https://127.0.0.1:8080",
            "http://127.0.0.1:9999",
            "http://localhost:8080",
            "null",
        ] {
            assert_eq!(status(&site, api, &[host, ("origin", bad)]), 403, "{bad}");
        }
        assert_eq!(
            status(&site, "/", &[host, ("origin", "null")]),
            200,
            "the page"
        );
        for (fetch, want) in [
            ("same-origin", 200),
            ("none", 200),
            ("cross-site", 403),
            ("same-site", 403),
        ] {
            assert_eq!(
                status(&site, api, &[host, ("sec-fetch-site", fetch)]),
                want,
                "{fetch}"
            );
        }
        let tls = Site::new(
            "127.0.0.1:443".parse().unwrap(),
            &["f.example".into()],
            true,
        );
        let h = ("host", "f.example");
        assert_eq!(
            status(&tls, api, &[h, ("origin", "https://f.example:443")]),
            200
        );
        assert_eq!(status(&tls, api, &[h, ("origin", "http://f.example")]), 403);
    }
}
