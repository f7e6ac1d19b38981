//! Link-layer header types (LINKTYPE_* values of the tcpdump.org registry).

/// A link-layer header type, as carried in pcap and pcapng headers.
///
/// Open enum: values tapflow does not decode round-trip as [`LinkType::Unknown`].
#[doc(alias = "LINKTYPE")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_NULL` (0): BSD loopback, 4-byte host-order address family.
    Null,
    /// `LINKTYPE_ETHERNET` (1): IEEE 802.3 Ethernet (`DLT_EN10MB`).
    Ethernet,
    /// `LINKTYPE_PPP` (9).
    Ppp,
    /// `LINKTYPE_RAW` (101): raw IPv4 or IPv6, version nibble decides.
    Raw,
    /// `LINKTYPE_LOOP` (108): OpenBSD loopback, 4-byte network-order address family.
    Loop,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1.
    LinuxSll,
    /// `LINKTYPE_IPV4` (228).
    Ipv4,
    /// `LINKTYPE_IPV6` (229).
    Ipv6,
    /// `LINKTYPE_NFLOG` (239): Linux netfilter log messages.
    Nflog,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2.
    LinuxSll2,
    /// Any other value.
    Unknown(u16),
}

impl LinkType {
    /// The LINKTYPE_ number.
    pub const fn to_u16(self) -> u16 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Ppp => 9,
            LinkType::Raw => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::Nflog => 239,
            LinkType::LinuxSll2 => 276,
            LinkType::Unknown(n) => n,
        }
    }

    /// The link type for a LINKTYPE_ number (DLT_RAW's platform values 12 and 14 map to `Raw`).
    pub const fn from_u16(n: u16) -> LinkType {
        match n {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            9 => LinkType::Ppp,
            12 | 14 | 101 => LinkType::Raw,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            239 => LinkType::Nflog,
            276 => LinkType::LinuxSll2,
            n => LinkType::Unknown(n),
        }
    }

    /// The lowercase name tcpdump prints (`EN10MB`, `LINUX_SLL`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            LinkType::Null => "NULL",
            LinkType::Ethernet => "EN10MB",
            LinkType::Ppp => "PPP",
            LinkType::Raw => "RAW",
            LinkType::Loop => "LOOP",
            LinkType::LinuxSll => "LINUX_SLL",
            LinkType::Ipv4 => "IPV4",
            LinkType::Ipv6 => "IPV6",
            LinkType::Nflog => "NFLOG",
            LinkType::LinuxSll2 => "LINUX_SLL2",
            LinkType::Unknown(_) => "UNKNOWN",
        }
    }
}

impl From<u16> for LinkType {
    fn from(n: u16) -> Self {
        LinkType::from_u16(n)
    }
}

impl core::fmt::Display for LinkType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LinkType::Unknown(n) => write!(f, "LINKTYPE {n}"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_value() {
        for n in 0..=u16::MAX {
            let t = LinkType::from_u16(n);
            match n {
                12 | 14 => assert_eq!(t, LinkType::Raw),
                _ => assert_eq!(t.to_u16(), n),
            }
        }
    }
}
