//! The console's JSON API: the only way the page gets data (documented in `docs/console.md`).
//!
//! Every endpoint takes the same view parameters: `window` (a `tapflow query -t` window, e.g.
//! `last 15m` or `2026-11-25T10:00/1h`; default `last 1h`), or `from` and `to` in µs since 1970
//! (a zoomed range), and `filter` (the `tapflow query` filter language). Answers are JSON; an
//! error is `{"error": "..."}` with status 400 (bad parameter), 503 (busy: try again after
//! `Retry-After` seconds) or 500 (the store failed).
//!
//! What one request may cost is bounded, as the console may live inside a collector: a window
//! lies within 1970-01-01 … 9999-12-31, a series has at most [`POINTS`] buckets (wider ones over
//! a wider window), a listing at most [`MAX_FLOWS_JSON`] or [`MAX_FLOWS_CSV`] flows, and the
//! store queries behind the answers pass a [`Gate`]: [`RUNNING`] at once, [`WAITING`] more in
//! line, and the rest are answered 503 at once; so does an answer when those on their way to
//! clients hold [`SENDING`] bytes already.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query as Params, State as Extract};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json_, json};

use tapflow_store::query::interfaces::{IfNames, from_flows, utilisation};
use tapflow_store::query::result::{AsNames, Names, addr_text, proto_name};
use tapflow_store::query::time::parse_window;
use tapflow_store::query::{
    Answer, Counters, Filter, Key, Kind, Metric, OneWay, Query, QueryEngine, QueryError,
    QueryResult, Row, Value, Window, filter,
};

use crate::gate::{Busy, Gate};
use crate::probes;

/// Buckets a series has at most, whatever its window: what a chart draws across its width.
pub const POINTS: i64 = 240;

const US_PER_S: i64 = 1_000_000;
const DAY_S: i64 = 86_400;
const YEAR_S: i64 = 365 * DAY_S;

/// Bucket widths a series may use, in seconds: the narrowest that keeps a window within
/// [`POINTS`] buckets is taken.
const STEPS: &[i64] = &[
    1,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10_800,
    21_600,
    43_200,
    DAY_S,
    2 * DAY_S,
    7 * DAY_S,
    14 * DAY_S,
    30 * DAY_S,
    91 * DAY_S,
    182 * DAY_S,
    YEAR_S,
    2 * YEAR_S,
    5 * YEAR_S,
    10 * YEAR_S,
    20 * YEAR_S,
    50 * YEAR_S,
    100 * YEAR_S,
];

/// Flows a JSON listing holds at most (250 to 350 bytes each).
pub const MAX_FLOWS_JSON: u64 = 10_000;

/// Flows a CSV listing holds at most (some 100 bytes each, 200 with IPv6 addresses).
pub const MAX_FLOWS_CSV: u64 = 100_000;

/// Store queries that run at once.
pub const RUNNING: usize = 2;

/// Store queries that wait in line for one of the [`RUNNING`] places; past them the answer is
/// 503. A page asks for at most five at once.
pub const WAITING: usize = 8;

/// Bytes of answers that may be on their way to clients together (an answer stays in memory
/// until its client has read it); an answer past them is turned away with 503.
pub const SENDING: usize = 64 << 20;

/// What a 503 answer's `Retry-After` says, in seconds.
const RETRY_AFTER_S: &str = "2";

/// The first microsecond a window may hold: 1970-01-01T00:00Z.
pub const EARLIEST_US: i64 = 0;

/// The first microsecond past the last a window may hold: 10000-01-01T00:00Z, the end of
/// 9999-12-31.
pub const LATEST_US: i64 = 253_402_300_800 * US_PER_S;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct State {
    engine: Arc<dyn QueryEngine + Send + Sync>,
    probes: Arc<Vec<String>>,
    gate: Gate,
}

impl State {
    /// The API over `engine`, showing `probes` in the health view.
    pub fn new(engine: Arc<dyn QueryEngine + Send + Sync>, probes: Vec<String>) -> State {
        State {
            engine,
            probes: Arc::new(probes),
            gate: Gate::new(RUNNING, WAITING, SENDING),
        }
    }
}

/// The API's routes.
pub fn router(state: State) -> Router {
    Router::new()
        .route("/api/v1/series", get(series))
        .route("/api/v1/top", get(top))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/summary", get(summary))
        .route("/api/v1/health", get(health))
        .route("/api/v1/newest", get(newest))
        .route("/api/v1/alerts", get(alerts))
        .with_state(state)
}

/// The view parameters every endpoint takes, and each one's own.
#[derive(Debug, Default, Deserialize)]
pub struct View {
    window: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    filter: Option<String>,
    /// The key a series is stacked by or a table ranks (`srcip`, `dstport`, `proto`, …).
    key: Option<String>,
    /// `bytes`, `packets` or `flows`.
    metric: Option<String>,
    /// Rows (top) or stacked keys (series), 1–100.
    n: Option<usize>,
    /// Flows listed at most.
    limit: Option<u64>,
    /// `csv` for a flow listing as CSV.
    format: Option<String>,
}

/// An API error: a status and a one-line message.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.1 }));
        if self.0 == StatusCode::SERVICE_UNAVAILABLE {
            return (self.0, [(header::RETRY_AFTER, RETRY_AFTER_S)], body).into_response();
        }
        (self.0, body).into_response()
    }
}

impl From<Busy> for ApiError {
    fn from(e: Busy) -> ApiError {
        ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> ApiError {
        ApiError(e.status(), e.body_text())
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> ApiError {
        match e {
            QueryError::Parse(m) => ApiError(StatusCode::BAD_REQUEST, m),
            QueryError::Store(e) => ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

fn bad(m: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, m.into())
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Whether `t_us` may bound a window: from 1970-01-01 to the end of 9999-12-31.
fn in_range(t_us: i64) -> bool {
    (EARLIEST_US..=LATEST_US).contains(&t_us)
}

impl View {
    /// The window asked for, within 1970-01-01 … 9999-12-31 and not empty: so its span, the
    /// window before it and its buckets are all far from overflowing.
    fn window(&self) -> Result<Window, ApiError> {
        match (self.from, self.to) {
            (Some(start_us), Some(end_us)) => {
                for (name, t) in [("from", start_us), ("to", end_us)] {
                    if !in_range(t) {
                        return Err(bad(format!(
                            "{name} {t}: not between {EARLIEST_US} and {LATEST_US} \
                             (µs since 1970: 1970-01-01 to 9999-12-31)"
                        )));
                    }
                }
                if start_us >= end_us {
                    return Err(bad(format!(
                        "from {start_us} to {end_us}: from must be before to"
                    )));
                }
                Ok(Window { start_us, end_us })
            }
            (None, None) => {
                let text = self.window.as_deref().unwrap_or("last 1h");
                let mut w = parse_window(text, now_us())?;
                if w.end_us == i64::MAX {
                    w.end_us = now_us().max(w.start_us.saturating_add(1));
                }
                if !in_range(w.start_us) || !in_range(w.end_us) {
                    return Err(bad(format!(
                        "time window '{text}': not within 1970-01-01 to 9999-12-31"
                    )));
                }
                Ok(w)
            }
            _ => Err(bad("give both from and to, or neither")),
        }
    }

    fn filter(&self) -> Result<Option<Filter>, ApiError> {
        match self.filter.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(text) => Ok(Some(filter::parse(text)?)),
        }
    }

    fn key(&self, default: Key) -> Result<Key, ApiError> {
        match self.key.as_deref() {
            None => Ok(default),
            Some(name) => {
                key(name).ok_or_else(|| bad(format!("key '{name}': not one of {}", key_names())))
            }
        }
    }

    fn metric(&self) -> Result<Metric, ApiError> {
        match self.metric.as_deref().unwrap_or("bytes") {
            "bytes" => Ok(Metric::Bytes),
            "packets" => Ok(Metric::Packets),
            "flows" => Ok(Metric::Flows),
            m => Err(bad(format!("metric '{m}': bytes, packets or flows"))),
        }
    }

    fn n(&self, default: usize) -> Result<usize, ApiError> {
        match self.n.unwrap_or(default) {
            n @ 1..=100 => Ok(n),
            n => Err(bad(format!("n {n}: from 1 to 100"))),
        }
    }
}

/// Every key the API ranks or stacks by, by its `tapflow query -s` name.
const KEYS: &[Key] = &[
    Key::SrcAddr(None),
    Key::DstAddr(None),
    Key::Addr(None),
    Key::SrcPort,
    Key::DstPort,
    Key::Port,
    Key::Protocol,
    Key::Exporter,
    Key::InIf,
    Key::OutIf,
    Key::Vlan,
    Key::SrcAs,
    Key::DstAs,
    Key::SrcCountry,
    Key::DstCountry,
    Key::SrcNet,
    Key::DstNet,
];

fn key(name: &str) -> Option<Key> {
    KEYS.iter().copied().find(|k| k.name() == name)
}

fn key_names() -> String {
    KEYS.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

/// The names an answer's rows carry: of AS numbers, of interfaces.
type Labels = (AsNames, IfNames);

/// `value` under `key` as the page shows it: an AS number as `AS13335` with its name beside it
/// where the store knows it (`AS13335 Cloudflare, Inc.`), an interface index with its name
/// (`3 ge-0/0/3`), anything else as query prints it.
fn label(key: Key, value: &Value, labels: &Labels) -> String {
    let names = Names {
        as_names: &labels.0,
        if_names: &labels.1,
    };
    let name = names.of(std::slice::from_ref(&key), std::slice::from_ref(value), 0);
    match (key.is_as(), name) {
        (true, Some(name)) => format!("AS{} {name}", value.show(key)),
        (true, None) => format!("AS{}", value.show(key)),
        (false, Some(name)) => format!("{} {name}", value.show(key)),
        (false, None) => value.show(key),
    }
}

/// The filter term that selects `value` under `key`, for click-to-filter.
fn term(key: Key, value: &Value) -> String {
    let v = match (key, value) {
        (Key::Protocol, Value::Num(p)) => proto_name(*p as u8)
            .map(str::to_ascii_lowercase)
            .unwrap_or_else(|| p.to_string()),
        (Key::SrcNet | Key::DstNet, Value::Text(t)) if !t.is_empty() => format!("\"{t}\""),
        (_, v) => v.show(key),
    };
    match key {
        Key::SrcAddr(_) => format!("src ip {v}"),
        Key::DstAddr(_) => format!("dst ip {v}"),
        Key::Addr(_) => format!("ip {v}"),
        Key::SrcPort => format!("src port {v}"),
        Key::DstPort => format!("dst port {v}"),
        Key::Port => format!("port {v}"),
        Key::Protocol => format!("proto {v}"),
        Key::Exporter => format!("exporter {v}"),
        Key::InIf => format!("in if {v}"),
        Key::OutIf => format!("out if {v}"),
        Key::Vlan => format!("vlan {v}"),
        Key::SrcAs => format!("src as {v}"),
        Key::DstAs => format!("dst as {v}"),
        Key::SrcCountry => format!("src country {v}"),
        Key::DstCountry => format!("dst country {v}"),
        Key::SrcNet => format!("src net-name {v}"),
        Key::DstNet => format!("dst net-name {v}"),
    }
}

/// The bucket width for `window`: the narrowest of [`STEPS`] giving at most [`POINTS`] buckets
/// (counted as [`buckets`] aligns them), else whole seconds wide enough.
fn step_us(window: &Window) -> i64 {
    let fits = |every_us: i64| buckets(window, every_us).1 <= POINTS as usize;
    STEPS
        .iter()
        .map(|s| s * US_PER_S)
        .find(|&every_us| fits(every_us))
        .unwrap_or_else(|| {
            // Past the widest step (a window wider than 9999 years): POINTS - 1 buckets cover
            // the span, and aligning the first adds one at most.
            let span = window.end_us.saturating_sub(window.start_us);
            let span_s = ceil_div(span, US_PER_S).max(1);
            ceil_div(span_s, POINTS - 1).saturating_mul(US_PER_S)
        })
}

/// Runs `work` over the store on a blocking thread once the [`Gate`] lets it in (503 if it
/// does not); the pass is held until `work` ends, even if the client has gone by then.
async fn blocking<T: Send + 'static>(
    state: &State,
    work: impl FnOnce(&(dyn QueryEngine + Send + Sync)) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let pass = state.gate.enter().await?;
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || {
        let answer = work(engine.as_ref());
        drop(pass);
        answer
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// `value` as a JSON answer whose bytes take their share of the room for answers on their way
/// until sent (503 if the room is taken).
fn reply(state: &State, value: &Json_) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value)
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let body = state.gate.hold(body)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn run(state: &State, query: Query) -> Result<Answer, ApiError> {
    blocking(state, move |engine| {
        engine.run(&query).map_err(ApiError::from)
    })
    .await
}

fn per_second(metric: Metric, c: &Counters, every_us: i64) -> f64 {
    let v = match metric {
        Metric::Bytes | Metric::Bps => c.bytes as f64 * 8.0,
        Metric::Packets | Metric::Pps => c.packets as f64,
        Metric::Flows => c.flows as f64,
    };
    v * 1e6 / every_us as f64
}

fn unit(metric: Metric) -> &'static str {
    match metric {
        Metric::Bytes | Metric::Bps => "bit/s",
        Metric::Packets | Metric::Pps => "packet/s",
        Metric::Flows => "flow/s",
    }
}

fn table(answer: Answer) -> Result<(Vec<Row>, Counters, u32, Labels), ApiError> {
    let tier = answer.stats.tier_seconds;
    match answer.result {
        QueryResult::Table {
            rows,
            total,
            as_names,
            if_names,
            ..
        } => Ok((rows, total, tier, (as_names, if_names))),
        _ => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the store answered a table query with something else".into(),
        )),
    }
}

/// The buckets of `every_us` (> 0) covering `window`, aligned to multiples of `every_us` since
/// 1970 as the store counts them: the first one's start, and how many.
fn buckets(window: &Window, every_us: i64) -> (i64, usize) {
    let first = window
        .start_us
        .div_euclid(every_us)
        .saturating_mul(every_us);
    let n = ceil_div(window.end_us.saturating_sub(first), every_us).max(1);
    (first, usize::try_from(n).unwrap_or(usize::MAX))
}

/// `a / b` rounded up, for `b` > 0.
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

/// The bucket of `every_us` since `first` that `t_us` falls in, if it is not before `first`.
fn bucket(t_us: i64, first: i64, every_us: i64) -> Option<usize> {
    usize::try_from(t_us.checked_sub(first)?.div_euclid(every_us)).ok()
}

#[derive(Debug, Serialize)]
struct Series {
    name: String,
    filter: Option<String>,
    values: Vec<f64>,
}

/// `GET /api/v1/series`: the window's traffic as rates per bucket, stacked by the top `n`
/// values of `key` plus `other` (or by protocol without `key`), with the previous period's
/// total beside it.
async fn series(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    series_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn series_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let filter = view.filter()?;
    let key = view.key(Key::Protocol)?;
    let metric = view.metric()?;
    let n = view.n(5)?;
    let every_us = step_us(&window);
    let (first, count) = buckets(&window, every_us);
    let query = |window: Window, key: Option<Key>| Query {
        window: Some(window),
        filter: filter.clone(),
        kind: Kind::Series {
            every_us,
            key,
            order_by: metric,
            n,
        },
    };
    // Within 1970 … 9999 neither can overflow; the window before may start before 1970.
    let span = window.end_us.saturating_sub(window.start_us);
    let previous = Window {
        start_us: window.start_us.saturating_sub(span),
        end_us: window.start_us,
    };
    let (by_key, total, before) = tokio::join!(
        run(&state, query(window, Some(key))),
        run(&state, query(window, None)),
        run(&state, query(previous, None)),
    );
    let (rows, _, tier, names) = table(by_key?)?;
    let (total_rows, totals, _, _) = table(total?)?;
    let (before_rows, _, _, _) = table(before?)?;

    let index = |t: i64, base: i64| bucket(t, base, every_us);
    let mut order: Vec<Value> = Vec::new();
    let mut stacked: Vec<Vec<f64>> = Vec::new();
    for r in &rows {
        let Some(t) = r.time_us else { continue };
        let Some(v) = r.values.first() else { continue };
        let i = match order.iter().position(|o| o == v) {
            Some(i) => i,
            None => {
                order.push(*v);
                stacked.push(vec![0.0; count]);
                order.len() - 1
            }
        };
        if let Some(slot) = index(t, first).and_then(|b| stacked[i].get_mut(b)) {
            *slot += per_second(metric, &r.counters, every_us);
        }
    }
    let mut all = vec![0.0; count];
    for r in &total_rows {
        if let Some(t) = r.time_us
            && let Some(a) = index(t, first).and_then(|b| all.get_mut(b))
        {
            *a += per_second(metric, &r.counters, every_us);
        }
    }
    let prev_first = first.saturating_sub(span);
    let mut prev = vec![0.0; count];
    for r in &before_rows {
        if let Some(t) = r.time_us
            && let Some(a) = index(t, prev_first).and_then(|b| prev.get_mut(b))
        {
            *a += per_second(metric, &r.counters, every_us);
        }
    }
    // Sort the stack by each key's total, largest first, so colours stay put on refresh.
    let mut keyed: Vec<(Value, Vec<f64>)> = order.into_iter().zip(stacked).collect();
    keyed.sort_by(|a, b| {
        let (sa, sb): (f64, f64) = (a.1.iter().sum(), b.1.iter().sum());
        sb.total_cmp(&sa).then(a.0.cmp(&b.0))
    });
    let mut out: Vec<Series> = Vec::new();
    let mut other = all.clone();
    for (v, values) in keyed {
        for (o, x) in other.iter_mut().zip(&values) {
            *o = (*o - x).max(0.0);
        }
        out.push(Series {
            name: label(key, &v, &names),
            filter: Some(term(key, &v)),
            values,
        });
    }
    if other.iter().any(|x| *x > 0.0) {
        out.push(Series {
            name: "other".into(),
            filter: None,
            values: other,
        });
    }
    let times: Vec<i64> = (0..count as i64).map(|i| first + i * every_us).collect();
    reply(
        &state,
        &json!({
            "from": window.start_us,
            "to": window.end_us,
            "every_us": every_us,
            "key": key.name(),
            "metric": metric.name(),
            "unit": unit(metric),
            "tier_seconds": tier,
            "times": times,
            "series": out,
            "total": all,
            "previous": prev,
            "flows": totals.flows,
            "packets": totals.packets,
            "bytes": totals.bytes,
        }),
    )
}

/// 95th percentile of `values` (nearest rank), what transit is billed by.
fn p95(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// `GET /api/v1/top`: the top `n` values of `key` by `metric` in the window, each with its
/// flows, packets and bytes, its average, 95th percentile and last rate, and the filter term
/// that selects it.
async fn top(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    top_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn top_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let filter = view.filter()?;
    let key = view.key(Key::SrcAddr(None))?;
    let metric = view.metric()?;
    let n = view.n(10)?;
    let every_us = step_us(&window);
    let (first, count) = buckets(&window, every_us);
    let answer = run(
        &state,
        Query {
            window: Some(window),
            filter: filter.clone(),
            kind: Kind::Series {
                every_us,
                key: Some(key),
                order_by: metric,
                n,
            },
        },
    )
    .await?;
    let (rows, total, tier, names) = table(answer)?;
    let mut order: Vec<(Value, Counters, Vec<f64>)> = Vec::new();
    for r in &rows {
        let (Some(t), Some(v)) = (r.time_us, r.values.first()) else {
            continue;
        };
        let i = match order.iter().position(|o| o.0 == *v) {
            Some(i) => i,
            None => {
                order.push((*v, Counters::EMPTY, vec![0.0; count]));
                order.len() - 1
            }
        };
        order[i].1.merge(&r.counters);
        if let Some(slot) = bucket(t, first, every_us).and_then(|b| order[i].2.get_mut(b)) {
            *slot += per_second(metric, &r.counters, every_us);
        }
    }
    order.sort_by(|a, b| {
        b.1.metric(metric)
            .total_cmp(&a.1.metric(metric))
            .then(a.0.cmp(&b.0))
    });
    let span_s = window.end_us.saturating_sub(window.start_us) as f64 / 1e6;
    // The last complete bucket: the one before the bucket "now" falls in, if now is inside;
    // none if the window lies ahead.
    let now = now_us();
    let last_index = if now >= window.end_us {
        Some(count - 1)
    } else {
        bucket(now, first, every_us).and_then(|i| i.checked_sub(1))
    };
    let rows: Vec<Json_> = order
        .iter()
        .map(|(v, c, rates)| {
            let amount = per_second(metric, c, 1_000_000);
            json!({
                "value": v.show(key),
                "label": label(key, v, &names),
                "filter": term(key, v),
                "flows": c.flows,
                "packets": c.packets,
                "bytes": c.bytes,
                "average": amount / span_s,
                "p95": p95(rates),
                "last": last_index.and_then(|i| rates.get(i)).copied().unwrap_or(0.0),
            })
        })
        .collect();
    reply(
        &state,
        &json!({
            "from": window.start_us,
            "to": window.end_us,
            "key": key.name(),
            "metric": metric.name(),
            "unit": unit(metric),
            "every_us": every_us,
            "tier_seconds": tier,
            "rows": rows,
            "total": { "flows": total.flows, "packets": total.packets, "bytes": total.bytes },
        }),
    )
}

/// One flow of a JSON listing, written straight to the answer's bytes.
#[derive(Debug, Serialize)]
struct FlowOut {
    start_us: i64,
    end_us: i64,
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
    protocol: u8,
    protocol_name: Option<&'static str>,
    tcp_flags: u16,
    packets: u64,
    bytes: u64,
    exporter: String,
    in_if: u32,
    out_if: u32,
    vlan: u16,
    reverse: bool,
}

impl From<&OneWay> for FlowOut {
    fn from(f: &OneWay) -> FlowOut {
        FlowOut {
            start_us: f.start_us,
            end_us: f.end_us,
            src: addr_text(&f.src),
            dst: addr_text(&f.dst),
            sport: f.sport,
            dport: f.dport,
            protocol: f.protocol,
            protocol_name: proto_name(f.protocol),
            tcp_flags: f.tcp_flags,
            packets: f.packets,
            bytes: f.bytes,
            exporter: addr_text(&f.exporter),
            in_if: f.in_if,
            out_if: f.out_if,
            vlan: f.vlan,
            reverse: f.reverse,
        }
    }
}

/// A JSON listing.
#[derive(Debug, Serialize)]
struct Listing {
    from: i64,
    to: i64,
    limit: u64,
    flows: Vec<FlowOut>,
}

const CSV_HEADER: &str = "start_us,end_us,src,dst,sport,dport,protocol,tcp_flags,packets,bytes,exporter,in_if,out_if,vlan,reverse\n";

/// `flows` as CSV, one line each under [`CSV_HEADER`].
fn csv(flows: &[OneWay]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(CSV_HEADER.len() + flows.len() * 100);
    text.push_str(CSV_HEADER);
    for f in flows {
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            f.start_us,
            f.end_us,
            addr_text(&f.src),
            addr_text(&f.dst),
            f.sport,
            f.dport,
            f.protocol,
            f.tcp_flags,
            f.packets,
            f.bytes,
            addr_text(&f.exporter),
            f.in_if,
            f.out_if,
            f.vlan,
            u8::from(f.reverse)
        );
    }
    text
}

/// `GET /api/v1/flows`: the window's one-way flows by start time, `limit` at most (default
/// 1000; at most [`MAX_FLOWS_JSON`], or [`MAX_FLOWS_CSV`] as CSV), as JSON or (`format=csv`)
/// CSV. The answer is written on the query's blocking thread, within its pass of the gate.
async fn flows(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    flows_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn flows_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let filter = view.filter()?;
    let as_csv = view.format.as_deref() == Some("csv");
    let most = if as_csv {
        MAX_FLOWS_CSV
    } else {
        MAX_FLOWS_JSON
    };
    let limit = view.limit.unwrap_or(1000).clamp(1, most);
    let query = Query {
        window: Some(window),
        filter,
        kind: Kind::List { limit: Some(limit) },
    };
    let body = blocking(&state, move |engine| {
        let answer = engine.run(&query)?;
        let QueryResult::Flows(rows) = answer.result else {
            return Err(ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the store answered a listing with something else".into(),
            ));
        };
        if as_csv {
            return Ok(csv(&rows).into_bytes());
        }
        let listing = Listing {
            from: window.start_us,
            to: window.end_us,
            limit,
            flows: rows.iter().map(FlowOut::from).collect(),
        };
        drop(rows);
        serde_json::to_vec(&listing)
            .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    })
    .await?;
    let body = state.gate.hold(body)?;
    if as_csv {
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"flows.csv\"",
                ),
            ],
            body,
        )
            .into_response());
    }
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn counters_json(c: &Counters) -> Json_ {
    json!({ "flows": c.flows, "packets": c.packets, "bytes": c.bytes })
}

/// `GET /api/v1/summary`: totals in the window, and per protocol (`tapflow query -I`).
async fn summary(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    summary_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn summary_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let filter = view.filter()?;
    let answer = run(
        &state,
        Query {
            window: Some(window),
            filter: filter.clone(),
            kind: Kind::Summary,
        },
    )
    .await?;
    let QueryResult::Summary(s) = answer.result else {
        return Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the store answered a summary with something else".into(),
        ));
    };
    reply(
        &state,
        &json!({
            "from": window.start_us,
            "to": window.end_us,
            "total": counters_json(&s.total),
            "tcp": counters_json(&s.tcp),
            "udp": counters_json(&s.udp),
            "icmp": counters_json(&s.icmp),
            "other": counters_json(&s.other),
        }),
    )
}

/// `GET /api/v1/newest`: the start of the newest stored flow (`newest_us`, µs since 1970, or
/// null when the store holds none) and the hour-long window ending just after it (`from`, `to`):
/// where the page goes when its default window is empty.
async fn newest(Extract(state): Extract<State>) -> Response {
    newest_inner(state)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn newest_inner(state: State) -> Result<Response, ApiError> {
    let newest = blocking(&state, |engine| engine.newest().map_err(ApiError::from)).await?;
    let value = match newest {
        Some(t) => {
            let to = t.saturating_add(US_PER_S).clamp(EARLIEST_US, LATEST_US);
            let from = to.saturating_sub(3600 * US_PER_S).max(EARLIEST_US);
            json!({ "newest_us": t, "from": from, "to": to })
        }
        None => json!({ "newest_us": null }),
    };
    reply(&state, &value)
}

/// `GET /api/v1/health`: per exporter and observation domain, what the collector counted in the
/// window (records, records lost on the way by sequence numbers, records without a template, bad
/// messages; from the store's `exporter_stats`), exporters whose flows the store holds without
/// such counters (imported or metered on the spot) by their flows, each interface sFlow agents
/// sent counters for (from the store's `if_counters`: rates, errors and discards in the window),
/// and each probe's counters (from its `/metrics`), with alarms where records or packets are
/// lost or an interface errs or discards.
async fn health(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    health_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn health_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let answer = run(
        &state,
        Query {
            window: Some(window),
            filter: None,
            kind: Kind::Aggregate {
                keys: vec![Key::Exporter],
                order_by: Metric::Flows,
                n: 0,
            },
        },
    )
    .await?;
    let (rows, _, _, _) = table(answer)?;
    let span_s = (window.end_us.saturating_sub(window.start_us) as f64 / 1e6).max(1e-6);
    let stats = blocking(&state, move |engine| {
        engine.exporter_stats(window).map_err(ApiError::from)
    })
    .await?;
    let mut exporters: Vec<Json_> = stats
        .iter()
        .map(|s| {
            let sent = s.records + s.sequence_lost;
            json!({
                "exporter": Value::Addr(s.exporter).show(Key::Exporter),
                "domain": s.domain,
                "records": s.records,
                "records_per_second": s.records as f64 / span_s,
                "sequence_lost": s.sequence_lost,
                "lost_percent": if sent > 0 { s.sequence_lost as f64 * 100.0 / sent as f64 } else { 0.0 },
                "template_missing": s.template_missing,
                "bad_messages": s.bad_messages,
                "alarm": s.sequence_lost + s.template_missing + s.bad_messages > 0,
            })
        })
        .collect();
    for r in &rows {
        let Some(Value::Addr(a)) = r.values.first() else {
            continue;
        };
        if stats.iter().any(|s| s.exporter == *a) {
            continue;
        }
        exporters.push(json!({
            "exporter": Value::Addr(*a).show(Key::Exporter),
            "domain": null,
            "records": r.counters.flows,
            "records_per_second": r.counters.flows as f64 / span_s,
            "sequence_lost": null,
            "lost_percent": null,
            "template_missing": null,
            "bad_messages": null,
            "alarm": false,
        }));
    }
    let (totals, names) = blocking(&state, move |engine| {
        let totals = engine.interfaces(window).map_err(ApiError::from)?;
        let names = IfNames::new(engine.interface_names().map_err(ApiError::from)?);
        Ok((totals, names))
    })
    .await?;
    let mut interfaces: Vec<Json_> = totals
        .iter()
        .map(|t| {
            let span = (t.last_ns.saturating_sub(t.first_ns) as f64 / 1e9).max(1e-9);
            let rate = |octets: u64| {
                if t.samples > 1 {
                    octets as f64 * 8.0 / span
                } else {
                    0.0
                }
            };
            let named = names.get(&t.exporter, t.if_index);
            let speed = names.speed(&t.exporter, t.if_index, t.if_speed);
            let trouble = t.in_errors + t.in_discards + t.out_errors + t.out_discards;
            json!({
                "exporter": Value::Addr(t.exporter).show(Key::Exporter),
                "domain": t.domain,
                "if_index": t.if_index,
                "name": named.map_or("", |n| n.name.as_str()),
                "description": named.map_or("", |n| n.description.as_str()),
                "from": "counters",
                "samples": t.samples,
                "speed": speed,
                "up": t.if_status & 3 == 3,
                "in_bps": rate(t.in_octets),
                "out_bps": rate(t.out_octets),
                "in_percent": utilisation(rate(t.in_octets), speed),
                "out_percent": utilisation(rate(t.out_octets), speed),
                "in_errors": t.in_errors,
                "in_discards": t.in_discards,
                "out_errors": t.out_errors,
                "out_discards": t.out_discards,
                "alarm": trouble > 0 || t.if_status & 3 == 1,
            })
        })
        .collect();
    // Interfaces whose speed is known but whose exporter sends no counters (NetFlow, IPFIX):
    // their rates from the flows, in by the ingress interface, out by the egress interface.
    let flows = blocking(&state, move |engine| {
        from_flows(engine, window, &names, &totals).map_err(ApiError::from)
    })
    .await?;
    for t in flows {
        let (in_bps, out_bps) = (
            t.in_bytes as f64 * 8.0 / span_s,
            t.out_bytes as f64 * 8.0 / span_s,
        );
        interfaces.push(json!({
            "exporter": Value::Addr(t.exporter).show(Key::Exporter),
            "domain": null,
            "if_index": t.if_index,
            "name": t.name.name,
            "description": t.name.description,
            "from": "flows",
            "samples": null,
            "speed": t.name.speed,
            "up": null,
            "in_bps": in_bps,
            "out_bps": out_bps,
            "in_percent": utilisation(in_bps, t.name.speed),
            "out_percent": utilisation(out_bps, t.name.speed),
            "in_errors": null,
            "in_discards": null,
            "out_errors": null,
            "out_discards": null,
            "alarm": false,
        }));
    }
    let targets = state.probes.clone();
    let probes = tokio::task::spawn_blocking(move || probes::scrape_all(&targets))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    reply(
        &state,
        &json!({ "exporters": exporters, "interfaces": interfaces, "probes": probes }),
    )
}

/// Around an alert, the view that opens on it shows this much before its start and after its
/// end: the traffic it rose from and fell back to.
const ALERT_MARGIN_US: i64 = 60 * US_PER_S;

/// `GET /api/v1/alerts`: the flood alerts kept in the store that overlap the window (a running
/// one reaches to now), by start time, each with the view that shows it (`view_from`, `view_to`
/// and `filter`: its time range with [`ALERT_MARGIN_US`] either side, and `dst host TARGET`);
/// `unreadable` counts the lines of the log left out.
async fn alerts(
    Extract(state): Extract<State>,
    view: Result<Params<View>, QueryRejection>,
) -> Response {
    alerts_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn alerts_inner(
    state: State,
    view: Result<Params<View>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Params(view) = view?;
    let window = view.window()?;
    let found = blocking(&state, move |engine| {
        engine.alerts(window).map_err(ApiError::from)
    })
    .await?;
    let now = now_us();
    let list: Vec<Json_> = found
        .alerts
        .iter()
        .map(|a| {
            let mut v = serde_json::to_value(a).unwrap_or_default();
            let from = a
                .start_us
                .saturating_sub(ALERT_MARGIN_US)
                .clamp(EARLIEST_US, LATEST_US);
            // A running alert's view reaches to now.
            let to = match (a.end_us, a.state) {
                (Some(end), _) => end.saturating_add(ALERT_MARGIN_US),
                (None, "running") => now,
                (None, _) => a.start_us.saturating_add(ALERT_MARGIN_US),
            }
            .clamp(from.saturating_add(1), LATEST_US);
            if let Some(o) = v.as_object_mut() {
                o.insert("view_from".into(), json!(from));
                o.insert("view_to".into(), json!(to));
            }
            v
        })
        .collect();
    reply(
        &state,
        &json!({
            "from": window.start_us,
            "to": window.end_us,
            "alerts": list,
            "unreadable": found.unreadable,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: i64, to: i64) -> Result<Window, ApiError> {
        View {
            from: Some(from),
            to: Some(to),
            ..View::default()
        }
        .window()
    }

    fn text(window: &str) -> Result<Window, ApiError> {
        View {
            window: Some(window.into()),
            ..View::default()
        }
        .window()
    }

    #[test]
    fn windows_lie_within_1970_to_9999() {
        assert!(range(EARLIEST_US, LATEST_US).is_ok());
        assert!(text("1970-01-01-9999-12-31").is_ok());
        assert!(text("9999-12-31T23:00/1h").is_ok());
        for (from, to) in [
            (EARLIEST_US - 1, 1),
            (0, LATEST_US + 1),
            (i64::MIN, i64::MAX),
            (-9_000_000_000_000_000_000, 9_000_000_000_000_000_000),
            (5, 5),
            (6, 5),
        ] {
            let ApiError(status, msg) = range(from, to).unwrap_err();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{from} {to}");
            assert!(msg.contains(&from.to_string()), "{msg}");
        }
        for window in ["1970-01-01T00:00+00:01/1h", "9999-12-31T23:30/1h"] {
            let ApiError(status, msg) = text(window).unwrap_err();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{window}");
            assert!(msg.contains(window) && msg.contains("1970"), "{msg}");
        }
    }

    #[test]
    fn every_window_fits_in_points_whole_second_buckets_that_cover_it() {
        let mut windows = vec![Window {
            start_us: EARLIEST_US,
            end_us: LATEST_US,
        }];
        let mut span = 1;
        while span <= LATEST_US {
            for start in [EARLIEST_US, 1_795_600_800_123_456, LATEST_US - span] {
                windows.push(Window {
                    start_us: start,
                    end_us: start + span,
                });
            }
            span = span * 3 / 2 + 1;
        }
        for w in windows {
            let every = step_us(&w);
            let (first, n) = buckets(&w, every);
            assert!(n as i64 <= POINTS, "{w:?}: {n} buckets of {every} µs");
            assert!(every > 0 && every % US_PER_S == 0, "{w:?}: {every} µs");
            assert!(first <= w.start_us && w.start_us < first + every, "{w:?}");
            assert!(first + n as i64 * every >= w.end_us, "{w:?}");
            assert_eq!(bucket(w.end_us - 1, first, every), Some(n - 1), "{w:?}");
            assert_eq!(bucket(first - 1, first, every), None, "{w:?}");
        }
    }
}
