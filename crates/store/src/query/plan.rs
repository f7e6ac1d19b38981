//! Planning a query over what every store keeps: which rollup tier answers it exactly.
//!
//! A rollup row holds, for one bucket, exporter, domain and protocol, the sums of the one-way
//! flows that started in the bucket. So a tier answers a query exactly when the query needs only
//! the protocol, the exporter and the time at the tier's bucket width: `-I`, `-s proto|exporter`,
//! `-a` of those keys, or `--every` (a multiple of the bucket) with no key or one of those,
//! ordered by flows, packets or bytes (rates need the flows' own times); a filter of `proto`,
//! `exporter`, `and`, `or`, `not` only; a window whose ends fall on bucket boundaries. Whether
//! the tier has caught up with the flows is the backend's to say.

use super::{Filter, Key, Kind, Metric, Query, Term};

pub fn filter_answerable(f: &Filter) -> bool {
    match f {
        Filter::And(v) | Filter::Or(v) => v.iter().all(filter_answerable),
        Filter::Not(a) => filter_answerable(a),
        Filter::Term(t) => matches!(t, Term::Protocol(_) | Term::Exporter(_)),
    }
}

pub fn key_answerable(k: Key) -> bool {
    matches!(k, Key::Protocol | Key::Exporter)
}

pub fn order_answerable(m: Metric) -> bool {
    matches!(m, Metric::Flows | Metric::Packets | Metric::Bytes)
}

/// Whether a tier of `bucket_us` answers `q` exactly, its coverage aside.
pub fn answerable(q: &Query, bucket_us: i64) -> bool {
    let aligned = |t: i64| t == i64::MAX || t.rem_euclid(bucket_us) == 0;
    let kind = match &q.kind {
        Kind::List { .. } => false,
        Kind::Summary => true,
        Kind::Top { key, order_by, .. } => key_answerable(*key) && order_answerable(*order_by),
        Kind::Aggregate { keys, order_by, .. } => {
            keys.iter().all(|k| key_answerable(*k)) && order_answerable(*order_by)
        }
        Kind::Series {
            every_us,
            key,
            order_by,
            ..
        } => {
            every_us % bucket_us == 0
                && key.is_none_or(key_answerable)
                && order_answerable(*order_by)
        }
    };
    kind && q.filter.as_ref().is_none_or(filter_answerable)
        && q.window
            .is_none_or(|w| aligned(w.start_us) && aligned(w.end_us))
}

/// The side of the places table holding `key`'s values: 0 the sender's, 1 the receiver's.
pub fn place_side(key: Key) -> Option<u8> {
    match key {
        Key::SrcAs | Key::SrcCountry | Key::SrcNet => Some(0),
        Key::DstAs | Key::DstCountry | Key::DstNet => Some(1),
        _ => None,
    }
}

/// The side of the 1-hour places table (every AS, country and network of each hour and side)
/// whose rows answer `q` exactly, if any: keys of one side's places, no filter, whole hours.
pub fn place_answerable(q: &Query) -> Option<u8> {
    let hour = crate::schema::HOUR_US;
    let aligned = |t: i64| t == i64::MAX || t.rem_euclid(hour) == 0;
    let side = match &q.kind {
        Kind::Top { key, order_by, .. } if order_answerable(*order_by) => place_side(*key),
        Kind::Aggregate { keys, order_by, .. } if order_answerable(*order_by) => {
            // Keys of one side only.
            let mut side = None;
            for &k in keys {
                match place_side(k) {
                    Some(s) if side.is_none_or(|x| x == s) => side = Some(s),
                    _ => return None,
                }
            }
            side
        }
        Kind::Series {
            every_us,
            key: Some(k),
            order_by,
            ..
        } if every_us % hour == 0 && order_answerable(*order_by) => place_side(*k),
        _ => None,
    };
    side.filter(|_| {
        q.filter.is_none()
            && q.window
                .is_none_or(|w| aligned(w.start_us) && aligned(w.end_us))
    })
}
