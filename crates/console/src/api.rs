//! The console's JSON API: the only way the page gets data (documented in `docs/console.md`).
//!
//! Every endpoint takes the same view parameters: `window` (a `tapflow query -t` window, e.g.
//! `last 15m` or `2026-11-25T10:00/1h`; default `last 1h`), or `from` and `to` in µs since 1970
//! (a zoomed range), and `filter` (the `tapflow query` filter language). Answers are JSON; an
//! error is `{"error": "..."}` with status 400 (bad parameter) or 500 (the store failed).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::{Query as Params, State as Extract};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json_, json};

use tapflow_store::query::result::{addr_text, proto_name};
use tapflow_store::query::time::parse_window;
use tapflow_store::query::{
    Answer, Counters, Filter, Key, Kind, Metric, OneWay, Query, QueryEngine, QueryError,
    QueryResult, Row, Value, Window, filter,
};

use crate::probes;

/// Points a chart aims for across its window.
const POINTS: i64 = 240;

/// Bucket widths a series may use, in seconds.
const STEPS: &[i64] = &[
    1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 21_600, 43_200, 86_400,
];

/// Flows a listing returns at most.
const MAX_FLOWS: u64 = 100_000;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct State {
    engine: Arc<dyn QueryEngine + Send + Sync>,
    probes: Arc<Vec<String>>,
}

impl State {
    /// The API over `engine`, showing `probes` in the health view.
    pub fn new(engine: Arc<dyn QueryEngine + Send + Sync>, probes: Vec<String>) -> State {
        State {
            engine,
            probes: Arc::new(probes),
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
        (self.0, Json(json!({ "error": self.1 }))).into_response()
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
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

impl View {
    fn window(&self) -> Result<Window, ApiError> {
        match (self.from, self.to) {
            (Some(start_us), Some(end_us)) if start_us < end_us => Ok(Window { start_us, end_us }),
            (Some(_), Some(_)) => Err(bad("from must be before to")),
            (None, None) => {
                let text = self.window.as_deref().unwrap_or("last 1h");
                let w = parse_window(text, now_us())?;
                if w.end_us == i64::MAX {
                    Ok(Window {
                        start_us: w.start_us,
                        end_us: now_us().max(w.start_us + 1),
                    })
                } else {
                    Ok(w)
                }
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
];

fn key(name: &str) -> Option<Key> {
    KEYS.iter().copied().find(|k| k.name() == name)
}

fn key_names() -> String {
    KEYS.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

/// The filter term that selects `value` under `key`, for click-to-filter.
fn term(key: Key, value: &Value) -> String {
    let v = match (key, value) {
        (Key::Protocol, Value::Num(p)) => proto_name(*p as u8)
            .map(str::to_ascii_lowercase)
            .unwrap_or_else(|| p.to_string()),
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
    }
}

/// The bucket width for `window`: the smallest step giving at most [`POINTS`] buckets.
fn step_us(window: &Window) -> i64 {
    let span_s = ((window.end_us - window.start_us) / 1_000_000).max(1);
    let s = STEPS
        .iter()
        .copied()
        .find(|s| span_s / s <= POINTS)
        .unwrap_or(86_400);
    s * 1_000_000
}

async fn run(state: &State, query: Query) -> Result<Answer, ApiError> {
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || engine.run(&query))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
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

fn table(answer: Answer) -> Result<(Vec<Row>, Counters, u32), ApiError> {
    let tier = answer.stats.tier_seconds;
    match answer.result {
        QueryResult::Table { rows, total, .. } => Ok((rows, total, tier)),
        _ => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the store answered a table query with something else".into(),
        )),
    }
}

/// Buckets of a series as an array of rates, one per bucket of the window (zeros where empty).
fn buckets(window: &Window, every_us: i64) -> (i64, usize) {
    let first = window.start_us.div_euclid(every_us) * every_us;
    let n = ((window.end_us - first + every_us - 1) / every_us).max(1) as usize;
    (first, n)
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
async fn series(Extract(state): Extract<State>, Params(view): Params<View>) -> Response {
    series_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn series_inner(state: State, view: View) -> Result<Response, ApiError> {
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
    let span = window.end_us - window.start_us;
    let previous = Window {
        start_us: window.start_us - span,
        end_us: window.end_us - span,
    };
    let (by_key, total, before) = tokio::join!(
        run(&state, query(window, Some(key))),
        run(&state, query(window, None)),
        run(&state, query(previous, None)),
    );
    let (rows, _, tier) = table(by_key?)?;
    let (total_rows, totals, _) = table(total?)?;
    let (before_rows, _, _) = table(before?)?;

    let index = |t: i64, base: i64| ((t - base) / every_us) as usize;
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
        if let Some(slot) = stacked[i].get_mut(index(t, first)) {
            *slot += per_second(metric, &r.counters, every_us);
        }
    }
    let mut all = vec![0.0; count];
    for r in &total_rows {
        if let Some(t) = r.time_us
            && let Some(a) = all.get_mut(index(t, first))
        {
            *a += per_second(metric, &r.counters, every_us);
        }
    }
    let prev_first = first - span;
    let mut prev = vec![0.0; count];
    for r in &before_rows {
        if let Some(t) = r.time_us
            && t >= prev_first
            && let Some(a) = prev.get_mut(index(t, prev_first))
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
            name: v.show(key),
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
    let times: Vec<i64> = (0..count).map(|i| first + i as i64 * every_us).collect();
    Ok(Json(json!({
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
    }))
    .into_response())
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
async fn top(Extract(state): Extract<State>, Params(view): Params<View>) -> Response {
    top_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn top_inner(state: State, view: View) -> Result<Response, ApiError> {
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
    let (rows, total, tier) = table(answer)?;
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
        if let Some(slot) = order[i].2.get_mut(((t - first) / every_us) as usize) {
            *slot += per_second(metric, &r.counters, every_us);
        }
    }
    order.sort_by(|a, b| {
        b.1.metric(metric)
            .total_cmp(&a.1.metric(metric))
            .then(a.0.cmp(&b.0))
    });
    let span_s = (window.end_us - window.start_us) as f64 / 1e6;
    // The last complete bucket: the one before the bucket "now" falls in, if now is inside.
    let last_index = {
        let now = now_us().min(window.end_us);
        let i = ((now - first) / every_us) as usize;
        if now < window.end_us {
            i.saturating_sub(1)
        } else {
            count - 1
        }
    };
    let rows: Vec<Json_> = order
        .iter()
        .map(|(v, c, rates)| {
            let amount = per_second(metric, c, 1_000_000);
            json!({
                "value": v.show(key),
                "filter": term(key, v),
                "flows": c.flows,
                "packets": c.packets,
                "bytes": c.bytes,
                "average": amount / span_s,
                "p95": p95(rates),
                "last": rates.get(last_index).copied().unwrap_or(0.0),
            })
        })
        .collect();
    Ok(Json(json!({
        "from": window.start_us,
        "to": window.end_us,
        "key": key.name(),
        "metric": metric.name(),
        "unit": unit(metric),
        "every_us": every_us,
        "tier_seconds": tier,
        "rows": rows,
        "total": { "flows": total.flows, "packets": total.packets, "bytes": total.bytes },
    }))
    .into_response())
}

fn flow_json(f: &OneWay) -> Json_ {
    json!({
        "start_us": f.start_us,
        "end_us": f.end_us,
        "src": addr_text(&f.src),
        "dst": addr_text(&f.dst),
        "sport": f.sport,
        "dport": f.dport,
        "protocol": f.protocol,
        "protocol_name": proto_name(f.protocol),
        "tcp_flags": f.tcp_flags,
        "packets": f.packets,
        "bytes": f.bytes,
        "exporter": addr_text(&f.exporter),
        "in_if": f.in_if,
        "out_if": f.out_if,
        "vlan": f.vlan,
        "reverse": f.reverse,
    })
}

/// `GET /api/v1/flows`: the window's one-way flows by start time, `limit` at most (default
/// 1000), as JSON or (`format=csv`) CSV.
async fn flows(Extract(state): Extract<State>, Params(view): Params<View>) -> Response {
    flows_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn flows_inner(state: State, view: View) -> Result<Response, ApiError> {
    let window = view.window()?;
    let filter = view.filter()?;
    let limit = view.limit.unwrap_or(1000).clamp(1, MAX_FLOWS);
    let answer = run(
        &state,
        Query {
            window: Some(window),
            filter: filter.clone(),
            kind: Kind::List { limit: Some(limit) },
        },
    )
    .await?;
    let QueryResult::Flows(rows) = answer.result else {
        return Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the store answered a listing with something else".into(),
        ));
    };
    if view.format.as_deref() == Some("csv") {
        let mut text = String::from(
            "start_us,end_us,src,dst,sport,dport,protocol,tcp_flags,packets,bytes,exporter,in_if,out_if,vlan,reverse\n",
        );
        for f in &rows {
            text.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
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
            ));
        }
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"flows.csv\"",
                ),
            ],
            text,
        )
            .into_response());
    }
    let list: Vec<Json_> = rows.iter().map(flow_json).collect();
    Ok(Json(json!({
        "from": window.start_us,
        "to": window.end_us,
        "limit": limit,
        "flows": list,
    }))
    .into_response())
}

fn counters_json(c: &Counters) -> Json_ {
    json!({ "flows": c.flows, "packets": c.packets, "bytes": c.bytes })
}

/// `GET /api/v1/summary`: totals in the window, and per protocol (`tapflow query -I`).
async fn summary(Extract(state): Extract<State>, Params(view): Params<View>) -> Response {
    summary_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn summary_inner(state: State, view: View) -> Result<Response, ApiError> {
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
    Ok(Json(json!({
        "from": window.start_us,
        "to": window.end_us,
        "total": counters_json(&s.total),
        "tcp": counters_json(&s.tcp),
        "udp": counters_json(&s.udp),
        "icmp": counters_json(&s.icmp),
        "other": counters_json(&s.other),
    }))
    .into_response())
}

/// `GET /api/v1/health`: per exporter and observation domain, what the collector counted in the
/// window (records, records lost on the way by sequence numbers, records without a template, bad
/// messages; from the store's `exporter_stats`), exporters whose flows the store holds without
/// such counters (imported or metered on the spot) by their flows, and each probe's counters
/// (from its `/metrics`), with alarms where records or packets are lost.
async fn health(Extract(state): Extract<State>, Params(view): Params<View>) -> Response {
    health_inner(state, view)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn health_inner(state: State, view: View) -> Result<Response, ApiError> {
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
    let (rows, _, _) = table(answer)?;
    let span_s = ((window.end_us - window.start_us) as f64 / 1e6).max(1e-6);
    let engine = state.engine.clone();
    let stats = tokio::task::spawn_blocking(move || engine.exporter_stats(window))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)?;
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
    let targets = state.probes.clone();
    let probes = tokio::task::spawn_blocking(move || probes::scrape_all(&targets))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(json!({ "exporters": exporters, "probes": probes })).into_response())
}
