//! CPU time used by this process, and cache hints.
#![allow(unsafe_code)]

/// CPU time of all threads of this process in ns (`CLOCK_PROCESS_CPUTIME_ID`).
#[doc(alias = "CLOCK_PROCESS_CPUTIME_ID")]
pub fn process_cpu_ns() -> u64 {
    crate::clock::process_cpu_ns()
}

/// Asks the CPU to bring the cache lines holding `v` into its caches (`PREFETCHT0`): a hint,
/// with no effect on what the program computes.
#[inline(always)]
pub fn prefetch<T: ?Sized>(v: &T) {
    let p = std::ptr::from_ref(v).cast::<u8>();
    // From the start of the line holding the first byte to the line holding the last.
    let lead = p as usize % 64;
    let first = p.wrapping_sub(lead);
    let mut at = 0;
    while at < lead + size_of_val(v).max(1) {
        prefetch_line(first.wrapping_add(at));
        at += 64;
    }
}

/// [`prefetch`] of the one line holding address `p`, which need not be valid: a prefetch
/// never faults. For walks that run ahead of a buffer, past its end near the end.
#[inline(always)]
pub fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch never faults: it reads
        // nothing the program sees.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_grows_with_work() {
        let a = super::process_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(super::process_cpu_ns() > a, "{x}");
    }
}
