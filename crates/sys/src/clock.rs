//! Clocks in nanoseconds (`clock_gettime`, served by the vDSO: no syscall).
#![allow(unsafe_code)]

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in ns: for intervals.
#[doc(alias = "CLOCK_MONOTONIC")]
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in ns since the Unix epoch: the clock packet timestamps use.
#[doc(alias = "CLOCK_REALTIME")]
pub fn realtime_ns() -> u64 {
    now_ns(libc::CLOCK_REALTIME)
}

pub(crate) fn process_cpu_ns() -> u64 {
    now_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clocks_move_forward() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(b >= a);
        assert!(super::realtime_ns() > 1_600_000_000 * 1_000_000_000);
    }
}
