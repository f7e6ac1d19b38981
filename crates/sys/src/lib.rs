//! tapflow's only door into Linux: every unsafe call, behind small safe types.
//!
//! - [`ring`]: the AF_PACKET `TPACKET_V3` receive ring (filter, fanout, statistics, blocks).
//! - [`tx`]: frames sent in batches (`sendmmsg`) on an AF_PACKET socket, for the traffic
//!   generator.
//! - [`bpf`]: classic BPF socket filters (tcpdump syntax through libpcap).
//! - [`ethtool`]: NIC offload features, ring sizes, channels and driver (`SIOCETHTOOL`).
//! - [`outfile`]: output files that never follow a link or replace what is not a regular file.
//! - [`privilege`]: becoming an unprivileged user, with no capability, once a run is set up.
//! - [`xdp`], [`xsk`], [`ringbuf`]: XDP capture: the XDP programs (eBPF written here), their
//!   maps and link, the AF_XDP socket with its UMEM and rings, and the BPF ring buffer that
//!   carries copies of frames left to the stack.
//! - [`iface`], [`mmap`], [`clock`], [`cpu`], [`netns`], [`rlimit`]: small lookups and helpers.
//!
//! Unsafe code is denied at the root and allowed only in the modules that call the kernel; each
//! `unsafe` block says why it is sound. Socket setup goes through one funnel (`syscall`), which
//! unit tests replace to check the order of calls and the error paths without root.
#![deny(unsafe_code)]

pub mod bpf;
pub mod clock;
pub mod cpu;
pub mod direct;
mod error;
pub mod ethtool;
pub mod heap;
pub mod iface;
pub mod listener;
pub mod mmap;
pub mod netlink;
pub mod netns;
pub mod outfile;
mod packet;
pub mod peer;
pub mod privilege;
pub mod ring;
pub mod ringbuf;
pub mod rlimit;
mod syscall;
mod tpacket;
pub mod tx;
pub mod udp;
pub mod xdp;
pub mod xsk;
pub mod xsk_pair;

pub use error::SysError;
