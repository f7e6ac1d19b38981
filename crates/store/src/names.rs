//! Interned text: every distinct AS name, country and network attribute is kept once for the
//! life of the process, so a flow refers to it by a `&'static str` and stays `Copy`.
//!
//! Interning takes a lock: callers (the enrichment stage, a reader) do it when they load a file
//! or meet a value first, never once per flow. The set only grows by distinct values, so reloading
//! the same files adds nothing.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::schema::Network;

fn strings() -> &'static Mutex<HashSet<&'static str>> {
    static SET: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

fn networks() -> &'static Mutex<HashSet<&'static Network>> {
    static SET: OnceLock<Mutex<HashSet<&'static Network>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// `s`, kept once for the life of the process.
pub fn intern(s: &str) -> &'static str {
    if s.is_empty() {
        return "";
    }
    let mut set = strings().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&k) = set.get(s) {
        return k;
    }
    let k: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(k);
    k
}

/// `n` (whose text is already interned), kept once for the life of the process.
pub fn intern_network(n: Network) -> &'static Network {
    if n == crate::schema::NO_NETWORK {
        return &crate::schema::NO_NETWORK;
    }
    let mut set = networks().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&k) = set.get(&n) {
        return k;
    }
    let k: &'static Network = Box::leak(Box::new(n));
    set.insert(k);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_distinct_text() {
        let a = intern(&String::from("Cloudflare, Inc."));
        let b = intern("Cloudflare, Inc.");
        assert!(std::ptr::eq(a, b));
        assert_eq!(intern(""), "");
        let n = Network {
            name: intern("office"),
            ..Network::default()
        };
        assert!(std::ptr::eq(intern_network(n), intern_network(n)));
        assert!(std::ptr::eq(
            intern_network(Network::default()),
            &crate::schema::NO_NETWORK
        ));
    }
}
