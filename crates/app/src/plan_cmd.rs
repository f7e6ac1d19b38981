//! `tapflow plan`: sizes the capture ring with the SEPCOM model adapted to TPACKET_V3 blocks
//! (`tapflow_engine::tools::plan`), and prints bounds, a geometry and the predicted losses.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use tapflow_engine::tools::plan::{self, Loss, Plan, RingBehaviour, RingGeometry, Workload};
use tapflow_wire::capfile::MAXIMUM_SNAPLEN;

use crate::cli::PlanArgs;
use crate::report::json_line;
use crate::svg;
use crate::units::{self, format_size};
use crate::{Failure, in_range};

/// What the burst option asks: a rate and a length.
struct Burst {
    rate: f64,
    length: Duration,
}

/// Everything `plan` prints.
struct Report {
    workers: usize,
    hold: Duration,
    link_rate: f64,
    work: Workload,
    plan: Plan,
    chosen: RingGeometry,
    behaviour: RingBehaviour,
    stall: Option<(Duration, Loss)>,
    burst: Option<(Burst, Loss)>,
}

/// Runs `tapflow plan`.
pub fn run(a: &PlanArgs) -> Result<ExitCode, Failure> {
    let bad = Failure::Usage;
    in_range("--threads", a.threads, 1, plan::MAX_THREADS)?;
    in_range("--retire-ms", a.retire_ms, 1, 1000)?;
    in_range("--frame-size", a.frame_size, 64, 9018)?;
    in_range("-s", a.snaplen, 1, MAXIMUM_SNAPLEN)?;
    let cost = |v: Option<f64>, name: &str, default: f64| match v {
        None => Ok(default),
        Some(x) if (0.0..1e9).contains(&x) => Ok(x),
        Some(x) => Err(bad(format!(
            "{name} {x} is not a number of ns from 0 to 1e9"
        ))),
    };
    let packet_ns = cost(a.cost_ns, "--cost-ns", plan::MEASURED_PACKET_NS)?;
    let block_ns = cost(a.block_cost_ns, "--block-cost-ns", plan::MEASURED_BLOCK_NS)?;
    let ms_arg = |v: f64, name: &str| {
        if (0.0..1e9).contains(&v) {
            Ok(Duration::from_secs_f64(v / 1e3))
        } else {
            Err(bad(format!("{name} {v} is not a number of ms")))
        }
    };
    let hold = ms_arg(a.hold_ms, "--hold-ms")?;
    let stall = a.stall_ms.map(|v| ms_arg(v, "--stall-ms")).transpose()?;
    let burst = match &a.burst {
        None => None,
        Some(s) => {
            let (r, l) = s
                .split_once(':')
                .ok_or_else(|| bad(format!("--burst '{s}' is not RATE:MS (like 3M:50)")))?;
            Some(Burst {
                rate: units::rate(r).map_err(|e| bad(format!("--burst: {e}")))?,
                length: ms_arg(
                    units::millis(l).map_err(|e| bad(format!("--burst: {e}")))?,
                    "--burst length",
                )?,
            })
        }
    };
    let link_rate = match (a.rate, a.speed, &a.interface) {
        (Some(r), _, _) => r,
        (None, Some(0), _) => return Err(bad("--speed 0 is not a link speed".into())),
        (None, Some(s), _) => plan::line_rate_pps(f64::from(s), a.frame_size),
        (None, None, Some(i)) => {
            let speed = tapflow_sys::iface::speed_mbps(i).ok_or_else(|| {
                if std::path::Path::new("/sys/class/net").join(i).exists() {
                    bad(format!(
                        "the link speed of {i} is unknown (virtual or down): give --speed or --rate"
                    ))
                } else {
                    bad(format!("no interface {i}"))
                }
            })?;
            plan::line_rate_pps(f64::from(speed), a.frame_size)
        }
        (None, None, None) => {
            return Err(bad(
                "give the traffic: --rate PPS, --speed MBITS or -i IFACE".into(),
            ));
        }
    };
    if let Some(n) = a.block_count {
        in_range("--block-count", n, 1, plan::MAX_BLOCK_COUNT)?;
    }
    let block_size = a.block_size.map(block_size).transpose().map_err(bad)?;
    let record = plan::ring_record_bytes(plan::kept_bytes(a.frame_size, a.snaplen));
    let work = Workload {
        rate: link_rate / a.threads as f64,
        record,
        retire: Duration::from_millis(u64::from(a.retire_ms)),
        packet_ns,
        block_ns,
    };
    if let Some(b) = block_size
        && plan::packets_per_block(b, record) == 0
    {
        return Err(bad(format!(
            "--block-size {b} cannot hold one {record}-byte ring slot"
        )));
    }
    let p = work.plan(hold, a.memory).ok_or_else(|| {
        bad(format!(
            "--memory {} cannot hold one block with a {record}-byte ring slot",
            a.memory.unwrap_or_default()
        ))
    })?;
    let mut chosen = p.geometry;
    if let Some(b) = block_size {
        chosen.block_size = b;
        chosen.block_count = work.blocks_for(b, hold, a.memory);
    }
    if let Some(n) = a.block_count {
        chosen.block_count = n;
    }
    let behaviour = work.behaviour(&chosen);
    let report = Report {
        workers: a.threads,
        hold,
        link_rate,
        work,
        plan: p,
        chosen,
        behaviour,
        stall: stall.map(|s| (s, work.stall(&chosen, s))),
        burst: burst.map(|b| {
            let loss = work.burst(&chosen, b.rate / a.threads as f64, b.length);
            (b, loss)
        }),
    };
    if let Some(path) = &a.svg {
        write_svg(path, &report)?;
    }
    let out = if a.json {
        json_line(&PlanJson::new(&report))?
    } else {
        text(&report, a)
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// Points of each curve in the loss-against-stall chart.
const SVG_POINTS: u32 = 200;

/// Draws the percentage of the packets arriving in a stall that are lost, against the stall's
/// length (to three times what the chosen ring holds), for the chosen ring and for half and
/// twice as many blocks.
fn write_svg(path: &std::path::Path, r: &Report) -> Result<(), Failure> {
    let holds = r.behaviour.holds;
    if holds == Duration::MAX {
        return Err(Failure::Usage(
            "--svg: at a rate of 0 the ring never loses anything; give --rate".into(),
        ));
    }
    let span_ms = (holds.as_secs_f64() * 3e3).max(1.0);
    let curve = |blocks: u32, label: String, dashed: bool| {
        let g = RingGeometry {
            block_count: blocks.max(1),
            ..r.chosen
        };
        let points = (0..=SVG_POINTS)
            .map(|i| {
                let ms = span_ms * f64::from(i) / f64::from(SVG_POINTS);
                let arrived = r.work.rate * ms / 1e3;
                let lost = r.work.stall(&g, Duration::from_secs_f64(ms / 1e3)).packets;
                let pct = if arrived > 0.0 {
                    100.0 * lost / arrived
                } else {
                    0.0
                };
                (ms, pct)
            })
            .collect();
        svg::Line {
            label,
            points,
            dashed,
        }
    };
    let n = r.chosen.block_count;
    let size = |blocks: u32| format_size(u64::from(blocks) * u64::from(r.chosen.block_size));
    let lines = [
        curve(n, format!("{n} blocks ({}), recommended", size(n)), false),
        curve(n / 2, format!("{} blocks ({})", n / 2, size(n / 2)), true),
        curve(n * 2, format!("{} blocks ({})", n * 2, size(n * 2)), true),
    ];
    let title = format!(
        "Loss in a stall at {:.0} packets/s per worker, {}-byte blocks",
        r.work.rate, r.chosen.block_size
    );
    let doc = svg::chart(
        &title,
        "stall (ms)",
        "packets lost (% of those arriving)",
        &lines,
    );
    let mut f = tapflow_sys::outfile::create(path)
        .map_err(|e| Failure::Usage(format!("--svg {}: {e}", path.display())))?;
    use std::io::Write;
    f.write_all(doc.as_bytes())
        .map_err(|e| Failure::Runtime(format!("--svg {}: {e}", path.display())))
}

fn ms(d: Duration) -> String {
    if d == Duration::MAX {
        "forever".into()
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

fn loss_text(l: &Loss) -> String {
    let mut s = format!("loses {:.0} packets", l.packets);
    match l.recovery {
        Some(r) if l.backlog > 0.0 => {
            let _ = write!(s, "; the {:.0} queued drain in {}", l.backlog, ms(r));
        }
        None if l.backlog > 0.0 => s.push_str("; the consumer never catches up"),
        _ => {}
    }
    s
}

/// The human report.
fn text(r: &Report, a: &PlanArgs) -> String {
    let w = &r.work;
    let b = &r.behaviour;
    let g = &r.chosen;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tapflow plan: {:.0} packets/s per ring ({:.0} on the link, {} worker{}), {}-byte frames, snaplen {}",
        w.rate,
        r.link_rate,
        r.workers,
        if r.workers == 1 { "" } else { "s" },
        a.frame_size,
        a.snaplen
    );
    let _ = writeln!(
        s,
        "  ring slot      {} bytes per packet (tpacket3_hdr + sockaddr_ll + {} kept, 8-aligned)",
        w.record,
        plan::kept_bytes(a.frame_size, a.snaplen)
    );
    let _ = writeln!(
        s,
        "  consumer       {:.0} ns per packet + {:.0} ns per block; {:.1} ns between packets",
        w.packet_ns,
        w.block_ns,
        1e9 / w.rate
    );
    match (r.plan.min_fill, r.plan.min_block) {
        (Some(f), Some(blk)) => {
            let _ = writeln!(
                s,
                "  block size     at least {} to keep up (blocks of more than {:.1} packets)",
                format_size(blk.into()),
                f
            );
        }
        (Some(f), None) => {
            // The timer closes a block after p·α packets: a longer timeout lets blocks grow.
            let _ = writeln!(
                s,
                "  block size     none keeps up within the {} ms retire timeout: blocks must carry more than {:.1} packets, and the timer closes them after {:.0}; give --retire-ms {} or more",
                g.retire_ms,
                f,
                w.per_retire(),
                (f / w.rate * 1e3).ceil().min(1000.0)
            );
        }
        (None, _) => {
            // Even free blocks leave β per packet: the link's packets need that many workers.
            let need = (r.link_rate * w.packet_ns * 1e-9).floor() as u64 + 1;
            let advice = if need > plan::MAX_THREADS as u64 {
                format!(
                    "more than {} workers: more than one machine at this cost",
                    plan::MAX_THREADS
                )
            } else {
                format!("use --threads {need} or more")
            };
            let _ = writeln!(
                s,
                "  block size     none keeps up: {:.0} ns per packet is more than the {:.1} ns between packets; {advice}",
                w.packet_ns,
                1e9 / w.rate
            );
        }
    }
    let _ = writeln!(
        s,
        "                 at most {}: it takes a whole {} ms retire period ({:.0} packets); larger blocks carry no more",
        format_size(r.plan.max_block.into()),
        g.retire_ms,
        w.per_retire()
    );
    let p = &r.plan.geometry;
    let _ = writeln!(
        s,
        "  recommended    --block-size {} --block-count {} ({} per ring)",
        format_size(p.block_size.into()),
        p.block_count,
        format_size(p.bytes())
    );
    let judged = if *g == *p {
        "this ring"
    } else {
        "the ring asked"
    };
    let _ = writeln!(
        s,
        "  {judged:<14} {} x {} = {}: {:.0} packets per block of {} slots{}, {:.0} ns per packet, {:.0}% busy",
        g.block_count,
        format_size(g.block_size.into()),
        format_size(g.bytes()),
        b.fill,
        b.capacity_per_block,
        if b.timer_bound {
            " (the timer closes them)"
        } else {
            ""
        },
        b.service_ns,
        b.busy * 100.0
    );
    let _ = writeln!(
        s,
        "                 rides out a stall of {} ({:.0} packets); packets wait {} on average for their block",
        ms(b.holds),
        b.absorbs,
        ms(b.mean_delay)
    );
    if b.busy >= 1.0 {
        let _ = writeln!(
            s,
            "  WARNING        the consumer cannot keep up with this ring: it would lose {:.0}% of the packets",
            (1.0 - 1.0 / b.busy) * 100.0
        );
    }
    let each = if r.workers == 1 { "" } else { "each ring " };
    if b.holds < r.hold {
        let _ = writeln!(
            s,
            "  WARNING        this ring rides out {} of the {} asked (--hold-ms)",
            ms(b.holds),
            ms(r.hold)
        );
    }
    if let Some((d, l)) = &r.stall {
        let _ = writeln!(s, "  stall {:<8} {each}{}", ms(*d), loss_text(l));
    }
    if let Some((bu, l)) = &r.burst {
        let _ = writeln!(
            s,
            "  burst          {:.0} packets/s ({:.0} per ring) for {}: {each}{}",
            bu.rate,
            bu.rate / r.workers as f64,
            ms(bu.length),
            loss_text(l)
        );
    }
    s
}

/// The JSON report (`--json`): the workload, the bounds and the recommended geometry, the
/// ring judged, and the stall and burst asked about.
#[derive(Debug, Serialize)]
struct PlanJson<'a> {
    #[serde(flatten)]
    work: &'a Workload,
    link_rate: f64,
    workers: usize,
    #[serde(flatten)]
    plan: &'a Plan,
    ring: RingJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stall: Option<StallJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<BurstJson<'a>>,
}

/// The ring judged: its geometry and how it behaves.
#[derive(Debug, Serialize)]
struct RingJson<'a> {
    #[serde(flatten)]
    geometry: &'a RingGeometry,
    #[serde(flatten)]
    behaviour: &'a RingBehaviour,
}

/// A stall of the consumer and what it loses.
#[derive(Debug, Serialize)]
struct StallJson<'a> {
    #[serde(serialize_with = "plan::ms")]
    ms: Duration,
    loss: &'a Loss,
}

/// A burst and what it loses.
#[derive(Debug, Serialize)]
struct BurstJson<'a> {
    rate: f64,
    rate_per_ring: f64,
    #[serde(serialize_with = "plan::ms")]
    ms: Duration,
    loss: &'a Loss,
}

impl<'a> PlanJson<'a> {
    fn new(r: &'a Report) -> PlanJson<'a> {
        PlanJson {
            work: &r.work,
            link_rate: r.link_rate,
            workers: r.workers,
            plan: &r.plan,
            ring: RingJson {
                geometry: &r.chosen,
                behaviour: &r.behaviour,
            },
            stall: r.stall.as_ref().map(|(d, loss)| StallJson { ms: *d, loss }),
            burst: r.burst.as_ref().map(|(b, loss)| BurstJson {
                rate: b.rate,
                rate_per_ring: b.rate / r.workers as f64,
                ms: b.length,
                loss,
            }),
        }
    }
}

/// A ring block size (`--block-size`): a power of two from 4K to 1G.
pub(crate) fn block_size(bytes: u64) -> Result<u32, String> {
    match u32::try_from(bytes) {
        Ok(b) if b.is_power_of_two() && (plan::PAGE..=plan::MAX_BLOCK_SIZE).contains(&b) => Ok(b),
        _ => Err(format!(
            "--block-size {bytes} must be a power of two from 4K to 1G"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_are_powers_of_two_from_a_page() {
        assert_eq!(block_size(65536), Ok(65536));
        assert!(block_size(3000).is_err() && block_size(2048).is_err());
        assert!(block_size(2 << 30).is_err());
    }
}
