//! Integers in byte slices: big-endian (network byte order) for packets and export formats, either
//! order for capture files, whose header says which. Every format in this crate reads and writes
//! its multi-byte fields through here.
//!
//! A reader or writer takes the slice that starts at the field (`&buf[field::LEN]`, `&buf[at..]`)
//! and, like indexing, panics if the slice is shorter than the integer: call it after the view's
//! `check_len`. The `get_*` readers return `None` instead, for code that has checked nothing.
//! `Put` is a crate-internal cursor that writes big-endian integers one after another.

/// The first `N` bytes of `b`.
#[inline(always)]
#[track_caller]
fn first<const N: usize>(b: &[u8]) -> [u8; N] {
    match b.first_chunk::<N>() {
        Some(a) => *a,
        None => too_short(N, b.len()),
    }
}

/// The first `N` bytes of `b`, to overwrite.
#[inline(always)]
#[track_caller]
fn first_mut<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    let len = b.len();
    match b.first_chunk_mut::<N>() {
        Some(a) => a,
        None => too_short(N, len),
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn too_short(need: usize, have: usize) -> ! {
    panic!("a {need}-byte integer in a {have}-byte slice")
}

/// The big-endian `u16` at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn read_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes(first(b))
}

/// The big-endian `u32` at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(first(b))
}

/// The big-endian `u64` at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn read_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes(first(b))
}

/// Writes `v` big-endian at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn write_u16(b: &mut [u8], v: u16) {
    *first_mut(b) = v.to_be_bytes();
}

/// Writes `v` big-endian at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn write_u32(b: &mut [u8], v: u32) {
    *first_mut(b) = v.to_be_bytes();
}

/// Writes `v` big-endian at the start of `b`.
#[inline(always)]
#[track_caller]
pub fn write_u64(b: &mut [u8], v: u64) {
    *first_mut(b) = v.to_be_bytes();
}

/// The big-endian `u16` at `at`, or `None` if `b` ends before it does.
#[inline(always)]
pub fn get_u16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..)?.first_chunk().map(|a| u16::from_be_bytes(*a))
}

/// The big-endian `u32` at `at`, or `None` if `b` ends before it does.
#[inline(always)]
pub fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..)?.first_chunk().map(|a| u32::from_be_bytes(*a))
}

/// The `u16` at the start of `b`, big-endian if `big_endian`, else little-endian.
#[inline(always)]
#[track_caller]
pub fn read_u16_as(big_endian: bool, b: &[u8]) -> u16 {
    let a = first(b);
    if big_endian {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

/// The `u32` at the start of `b`, big-endian if `big_endian`, else little-endian.
#[inline(always)]
#[track_caller]
pub fn read_u32_as(big_endian: bool, b: &[u8]) -> u32 {
    let a = first(b);
    if big_endian {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// The `u64` that is all of `b`, big-endian if `big_endian`, else little-endian; `None` unless
/// `b` is exactly 8 bytes (a pcapng option value).
#[inline(always)]
pub fn get_u64_exact_as(big_endian: bool, b: &[u8]) -> Option<u64> {
    let a: [u8; 8] = b.try_into().ok()?;
    Some(if big_endian {
        u64::from_be_bytes(a)
    } else {
        u64::from_le_bytes(a)
    })
}

/// Writes `v` at the start of `b`, big-endian if `big_endian`, else little-endian.
#[inline(always)]
#[track_caller]
pub fn write_u16_as(big_endian: bool, b: &mut [u8], v: u16) {
    *first_mut(b) = if big_endian {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    };
}

/// Writes `v` at the start of `b`, big-endian if `big_endian`, else little-endian.
#[inline(always)]
#[track_caller]
pub fn write_u32_as(big_endian: bool, b: &mut [u8], v: u32) {
    *first_mut(b) = if big_endian {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    };
}

/// A big-endian writer over a buffer the caller has sized: each call writes at the cursor and
/// moves it on; panics only on a sizing bug.
#[derive(Debug)]
pub(crate) struct Put<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Put<'a> {
    /// Writes into `buf` from `pos` on.
    #[inline]
    pub(crate) fn at(buf: &'a mut [u8], pos: usize) -> Put<'a> {
        Put { buf, pos }
    }

    /// The offset of the next byte.
    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Overwrites the 16 bits at `at`, behind the cursor (a length written last).
    #[inline]
    pub(crate) fn set_u16(&mut self, at: usize, v: u16) {
        write_u16(&mut self.buf[at..], v);
    }

    /// The next `N` bytes, to fill at fixed offsets; the cursor moves past them.
    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> &mut [u8; N] {
        let (at, len) = (self.pos, self.buf.len());
        self.pos += N;
        let Some(a) = self.buf[at..].first_chunk_mut::<N>() else {
            panic!("{N} bytes at {at} past the end of a {len}-byte buffer");
        };
        a
    }

    #[inline]
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    /// `n` zero bytes.
    #[inline]
    pub(crate) fn zeros(&mut self, n: usize) {
        self.buf[self.pos..self.pos + n].fill(0);
        self.pos += n;
    }

    #[inline]
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf[self.pos] = v;
        self.pos += 1;
    }

    #[inline]
    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes(&v.to_be_bytes());
    }

    #[inline]
    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_be_bytes());
    }

    #[inline]
    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_round_trips_at_the_start_of_the_slice() {
        let mut b = [0u8; 10];
        write_u16(&mut b[1..], 0x0102);
        write_u32(&mut b[3..], 0x0304_0506);
        assert_eq!(b[..7], [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            (read_u16(&b[1..]), read_u32(&b[3..])),
            (0x0102, 0x0304_0506)
        );
        write_u64(&mut b[2..], u64::MAX - 1);
        assert_eq!(read_u64(&b[2..]), u64::MAX - 1);
        assert_eq!(b[9], 0xfe);
    }

    #[test]
    fn get_never_panics() {
        let b = [1, 2, 3];
        assert_eq!(get_u16(&b, 1), Some(0x0203));
        assert_eq!(get_u16(&b, 2), None);
        assert_eq!(get_u16(&b, usize::MAX), None);
        assert_eq!(get_u64_exact_as(false, &[1, 0, 0, 0, 0, 0, 0, 0]), Some(1));
        assert_eq!(get_u64_exact_as(true, &[0; 9]), None);
    }

    #[test]
    fn either_order() {
        let mut b = [0u8; 4];
        write_u32_as(false, &mut b, 0x0a0b_0c0d);
        assert_eq!(b, [0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(read_u32_as(false, &b), 0x0a0b_0c0d);
        assert_eq!(read_u32_as(true, &b), 0x0d0c_0b0a);
        write_u16_as(true, &mut b, 0x0102);
        assert_eq!(
            (read_u16_as(true, &b), read_u16_as(false, &b)),
            (0x0102, 0x0201)
        );
    }

    #[test]
    #[should_panic(expected = "a 4-byte integer in a 3-byte slice")]
    fn short_slice_panics_like_indexing() {
        read_u32(&[0; 3]);
    }

    #[test]
    fn put_writes_in_order_and_patches_behind() {
        let mut b = [0xffu8; 12];
        let mut w = Put::at(&mut b, 1);
        w.u8(1);
        w.u16(0);
        w.u32(0x0203_0405);
        w.zeros(2);
        w.set_u16(2, 0x0607);
        assert_eq!(w.pos(), 10);
        assert_eq!(b, [0xff, 1, 6, 7, 2, 3, 4, 5, 0, 0, 0xff, 0xff]);
    }
}
