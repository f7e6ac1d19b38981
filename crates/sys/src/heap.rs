//! The C library's heap: how much freed memory it keeps for the next allocation.
#![allow(unsafe_code)]

/// Keeps freed blocks of up to `bytes` in the process's heap instead of handing them back to the
/// kernel (glibc's `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD`), so that a scan allocating and
/// freeing large buffers batch after batch reuses the same pages rather than taking fresh,
/// zeroed ones from the kernel each time. Whether the C library took both settings (elsewhere
/// than glibc: nothing is set).
#[doc(alias = "mallopt")]
pub fn keep_freed_memory(bytes: usize) -> bool {
    #[cfg(target_env = "gnu")]
    {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets two tunables of the allocator; no memory is touched.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, v) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, v.saturating_mul(2)) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = bytes;
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_env = "gnu")]
    fn glibc_takes_both_settings() {
        assert!(super::keep_freed_memory(32 << 20));
    }
}
