//! The health view's probes: each tapflow probe's `/metrics` (`--probe HOST:PORT`), read when the
//! page asks and reduced to what an operator checks first: packets received and recorded, the
//! drops by where they happened, and how full its capture rings run.

use std::time::Duration;

use serde::Serialize;

/// How long one probe may take to answer.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A ring that has been this full (a ratio) is a warning: the next burst may not fit.
pub const FILL_WARNING: f64 = 0.9;

/// The counters the health view shows for one probe, or why it could not be read.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Probe {
    /// `HOST:PORT` as given.
    pub address: String,
    /// Why the probe could not be read, if it could not.
    pub error: Option<String>,
    /// `tapflow_received_total`, summed over its labels.
    pub received: f64,
    /// `tapflow_recorded_total`.
    pub recorded: f64,
    /// Dropped by the kernel (`tapflow_dropped_kernel_total`: ring full).
    pub dropped_kernel: f64,
    /// Dropped by tapflow (`tapflow_dropped_ours_total`).
    pub dropped_ours: f64,
    /// Lost between probe and receiver (`tapflow_dropped_in_transit_total`).
    pub dropped_in_transit: f64,
    /// Batches that could not be forwarded (`tapflow_forward_failed_total`).
    pub forward_failed: f64,
    /// How full its fullest ring was when the last block was taken (`tapflow_ring_fill_ratio`,
    /// the largest over its workers, 0 to 1); none if the probe does not say.
    pub ring_fill: Option<f64>,
    /// The highest ring fill since it started (`tapflow_ring_fill_peak_ratio`, the largest).
    pub ring_fill_peak: Option<f64>,
    /// Whether a ring has been [`FILL_WARNING`] full or more: the warning the page shows
    /// before any packet is lost.
    pub warning: bool,
    /// Whether any packet was lost, or the probe could not be read: the alarm the page shows.
    pub alarm: bool,
}

/// Reads every probe in turn.
pub fn scrape_all(addresses: &[String]) -> Vec<Probe> {
    addresses.iter().map(|a| scrape(a)).collect()
}

/// Reads one probe.
pub fn scrape(address: &str) -> Probe {
    let url = format!("http://{address}/metrics");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    let text = agent
        .get(&url)
        .call()
        .and_then(|mut r| r.body_mut().read_to_string());
    match text {
        Ok(text) => parse(address, &text),
        Err(e) => Probe {
            address: address.to_owned(),
            error: Some(e.to_string()),
            alarm: true,
            ..Probe::default()
        },
    }
}

/// The probe's counters from Prometheus text: each counter family summed over its labels, each
/// ring fill the largest over them.
pub fn parse(address: &str, text: &str) -> Probe {
    let mut p = Probe {
        address: address.to_owned(),
        ..Probe::default()
    };
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or("");
        let gauge = match name {
            "tapflow_ring_fill_ratio" => Some(&mut p.ring_fill),
            "tapflow_ring_fill_peak_ratio" => Some(&mut p.ring_fill_peak),
            _ => None,
        };
        if let Some(g) = gauge {
            *g = Some(g.map_or(value, |v| v.max(value)));
            continue;
        }
        let slot = match name {
            "tapflow_received_total" => &mut p.received,
            "tapflow_recorded_total" => &mut p.recorded,
            "tapflow_dropped_kernel_total" => &mut p.dropped_kernel,
            "tapflow_dropped_ours_total" => &mut p.dropped_ours,
            "tapflow_dropped_in_transit_total" => &mut p.dropped_in_transit,
            "tapflow_forward_failed_total" => &mut p.forward_failed,
            _ => continue,
        };
        *slot += value;
    }
    p.alarm = p.dropped_kernel + p.dropped_ours + p.dropped_in_transit + p.forward_failed > 0.0;
    p.warning = p.ring_fill_peak.is_some_and(|f| f >= FILL_WARNING);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_summed_over_labels_and_drops_raise_the_alarm() {
        let text = "# HELP tapflow_received_total x\n\
                    tapflow_received_total{worker=\"0\"} 10\n\
                    tapflow_received_total{worker=\"1\"} 5\n\
                    tapflow_recorded_total 15\n\
                    tapflow_dropped_kernel_total 0\n";
        let p = parse("h:1", text);
        assert_eq!((p.received, p.recorded, p.alarm), (15.0, 15.0, false));
        assert_eq!(
            (p.ring_fill, p.ring_fill_peak, p.warning),
            (None, None, false)
        );
        let p = parse("h:1", &format!("{text}tapflow_dropped_ours_total 2\n"));
        assert!(p.alarm);
        assert_eq!(p.dropped_ours, 2.0);
    }

    #[test]
    fn the_fullest_ring_stands_and_a_high_peak_is_a_warning() {
        let text = "# TYPE tapflow_ring_fill_ratio gauge\n\
                    tapflow_ring_fill_ratio{interface=\"eth0\",worker=\"0\"} 0.125\n\
                    tapflow_ring_fill_ratio{interface=\"eth0\",worker=\"1\"} 0.25\n\
                    tapflow_ring_fill_peak_ratio{interface=\"eth0\",worker=\"0\"} 0.5\n\
                    tapflow_ring_fill_peak_ratio{interface=\"eth0\",worker=\"1\"} 0.875\n\
                    tapflow_dropped_kernel_total{interface=\"eth0\",worker=\"0\"} 0\n";
        let p = parse("h:1", text);
        assert_eq!((p.ring_fill, p.ring_fill_peak), (Some(0.25), Some(0.875)));
        assert!(!p.warning && !p.alarm);
        let p = parse("h:1", &text.replace("} 0.875", "} 0.9375"));
        assert!(p.warning && !p.alarm, "{p:?}");
    }

    #[test]
    fn an_unreachable_probe_says_why() {
        let p = scrape("127.0.0.1:1");
        assert!(p.error.is_some() && p.alarm);
    }
}
