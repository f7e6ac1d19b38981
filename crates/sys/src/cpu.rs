//! CPU time used by this process.

/// CPU time of all threads of this process in ns (`CLOCK_PROCESS_CPUTIME_ID`).
#[doc(alias = "CLOCK_PROCESS_CPUTIME_ID")]
pub fn process_cpu_ns() -> u64 {
    crate::clock::process_cpu_ns()
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
